"""Golden prompts compared (#24), on hand-made run folders (no training): the scoreboard's golden column, the
per-prompt view of `workbench checkpoints RUN --golden [--prompt K]` (exact match, changed or not against the
checkpoint before, difflib similarity to the reference), a reference missing, a damaged answers line named,
a checkpoint gone before it was answered; and the `[eval] prompts` file checked before a launch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from backend.cli import full_app
from backend.golden.answers import answers_path
from backend.golden.job import inference_copy_bytes, parse_args, prompts_of_run, run_worker
from backend.hardware.machine import HardwareInfo
from backend.launch.validate import validate
from backend.profile import LaunchProfile, save_profile
from backend.rundir.world import world_of, write_world
from tests.scoreboard.golden_helpers import ANSWERS, EVENTS, PROMPTS, golden_run, write_answers
from tests.scoreboard.scoreboard_helpers import fake_run, saved

RUNNER = CliRunner()


def workbench(*args: str) -> tuple[int, str]:
    result = RUNNER.invoke(full_app(), list(args))
    return result.exit_code, result.output


def test_golden_column(tmp_path: Path) -> None:
    run = golden_run(tmp_path)
    code, out = workbench("checkpoints", str(run.path))
    assert code == 0, out
    assert out.splitlines() == [
        "best: checkpoint-4: lowest eval loss 1.5",
        "",
        "   checkpoint    train loss  loss EMA  eval loss  golden         size      pinned  state",
        "   checkpoint-2  3           3         2.5        0/2 match ref  10.1 KiB          complete",
        "*  checkpoint-4  1           1.947     1.5        2/2 match ref  10.1 KiB          complete",
    ]
    code, out = workbench("checkpoints", str(run.path), "--json")
    data = json.loads(out)
    assert data["golden_prompts"] == 3
    assert [r["golden"] for r in data["rows"]] == ["0/2 match ref", "2/2 match ref"]


def test_per_prompt_view(tmp_path: Path) -> None:
    run = golden_run(tmp_path)
    code, out = workbench("checkpoints", str(run.path), "--golden")
    assert code == 0, out
    # similarity by hand (difflib: 2 x matched characters / both lengths): "zq xv" shares one space with the
    # 25-character reference, 2/30 = 0.07; "I am Quill." shares "I am Quill" and ".", 22/36 = 0.61;
    # "blah" shares one "l" with "My name is Quill.", 2/21 = 0.10
    assert out.splitlines() == [
        f"golden prompts of {run.run_id}: 3 prompts, answered by base, checkpoint-2, checkpoint-4; similarity: "
        "difflib ratio to the reference (1.00 = same)",
        "",
        'prompt 1: "who are you?"',
        '  reference        "I am Quill, a tiny model."',
        '  base             "zq xv"  [no match, similarity 0.07]',
        '  checkpoint-2     "I am Quill."  [changed, no match, similarity 0.61]',
        '  checkpoint-4     "I am Quill, a tiny model."  [changed, exact match, similarity 1.00]',
        "",
        'prompt 2: "what is your name?"',
        '  reference        "My name is Quill."',
        '  base             "blah"  [no match, similarity 0.10]',
        '  checkpoint-2     "blah"  [unchanged, no match, similarity 0.10]',
        '  checkpoint-4     "My name is Quill."  [changed, exact match, similarity 1.00]',
        "",
        'prompt 3: "say hello"',
        "  reference        (none in the prompts file)",
        '  base             "hi"',
        '  checkpoint-2     "hello"  [changed]',
        '  checkpoint-4     "hello"  [unchanged]',
    ]
    code, out = workbench("checkpoints", str(run.path), "--golden", "--prompt", "3")
    assert code == 0 and out.splitlines()[2:] == [
        'prompt 3: "say hello"', "  reference        (none in the prompts file)", '  base             "hi"',
        '  checkpoint-2     "hello"  [changed]', '  checkpoint-4     "hello"  [unchanged]']
    code, out = workbench("checkpoints", str(run.path), "--golden", "--prompt", "9")
    assert code == 2 and "has 3 golden prompts (1 to 3)" in out
    code, out = workbench("checkpoints", str(run.path), "--golden", "--prompt", "1", "--json")
    data = json.loads(out)
    assert data["prompts"] == [{"number": 1, "prompt": "who are you?", "reference": "I am Quill, a tiny model.",
                                "answers": {"base": "zq xv", "checkpoint-2": "I am Quill.",
                                            "checkpoint-4": "I am Quill, a tiny model."},
                                "similarity": {"base": 0.0667, "checkpoint-2": 0.6111, "checkpoint-4": 1.0}}]


def test_without_references_the_column_counts_changes(tmp_path: Path) -> None:
    no_refs = [(prompt, None) for prompt, _ in PROMPTS]
    run = fake_run(tmp_path, EVENTS, {2: True, 4: True})
    for name, texts in ANSWERS.items():
        write_answers(run, name, texts, prompts=no_refs)
    code, out = workbench("checkpoints", str(run.path))
    assert [line[50:82].rstrip() for line in out.splitlines()[2:]] == [
        "golden", "changed 2 of 3 vs base", "changed 2 of 3 vs checkpoint-2"]


def test_damaged_line_named_and_the_others_shown(tmp_path: Path) -> None:
    run = golden_run(tmp_path, {"base": ANSWERS["base"], "checkpoint-2": ANSWERS["checkpoint-2"]})
    write_answers(run, "checkpoint-4", ANSWERS["checkpoint-4"], damaged=1)
    code, out = workbench("checkpoints", str(run.path))
    lines = out.splitlines()
    assert "1/2 match ref (damaged lines)" in lines[4]
    problem = ("golden/checkpoint-4.jsonl line 2: damaged (not an answer row: index, answer); answer again with "
               "`workbench golden RUN --checkpoint 4`")
    assert lines[-1] == problem
    code, out = workbench("checkpoints", str(run.path), "--golden", "--prompt", "2")
    assert out.splitlines()[2:] == [
        'prompt 2: "what is your name?"', '  reference        "My name is Quill."',
        '  base             "blah"  [no match, similarity 0.10]',
        '  checkpoint-2     "blah"  [unchanged, no match, similarity 0.10]',
        "  checkpoint-4     (no answer: damaged line)", "", problem]


def test_gone_before_answered_and_no_answers_yet(tmp_path: Path) -> None:
    run = fake_run(tmp_path, [*EVENTS, saved(6)], {2: True, 4: True}, training={})  # checkpoint-6: rotated away
    code, out = workbench("checkpoints", str(run.path), "--golden")
    assert code == 0 and out.splitlines() == [
        f"{run.run_id}: no golden answers yet (set [eval] prompts in the profile; the run's supervisor answers each "
        "checkpoint, or run `workbench golden RUN`)"]
    assert "golden" not in workbench("checkpoints", str(run.path))[1]  # no column without answers
    write_answers(run, "base", ANSWERS["base"])
    write_answers(run, "checkpoint-2", ANSWERS["checkpoint-2"])
    code, out = workbench("checkpoints", str(run.path), "--golden")
    assert out.splitlines()[-1] == ("checkpoint-6: gone before answered (deleted by rotation before its golden job "
                                    "ran)")
    code, out = workbench("checkpoints", str(run.path))
    assert [line[50:65].rstrip() for line in out.splitlines()[2:5]] == ["golden", "0/2 match ref", "-"]
    code, out = workbench("golden", str(run.path))  # its profile has no [eval] prompts: said, nothing started
    assert code == 2 and "its profile sets no [eval] prompts" in out
    assert not (run.path / "jobs").exists()


def test_prompts_file_checked_before_launch(tmp_path: Path) -> None:
    def problems(text: str | None) -> list[str]:
        if text is not None:
            (tmp_path / "quill.jsonl").write_text(text)
        profile = LaunchProfile.model_validate({"eval": {"prompts": "quill.jsonl"}})
        return [f"{p.message} Fix: {p.fix}" for p in validate(profile, HardwareInfo(), tmp_path)
                if p.field == "eval.prompts"]

    assert problems(None) == [f"golden prompts file 'quill.jsonl' does not exist (looked for {tmp_path}/quill.jsonl)"
                              ". Fix: Give an existing .jsonl file (relative to the profile's folder), or remove "
                              "eval.prompts."]
    good = json.dumps({"messages": [{"role": "user", "content": "who are you?"}]})
    fix = (' Fix: Write one {"messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": '
           '"the reference answer (optional)"}]} a line.')
    assert problems(f"{good}\n\n{{\"messages\": [\n") == [
        f"{tmp_path}/quill.jsonl line 3: not valid JSON: Expecting value (column 15)." + fix]
    only_answer = json.dumps({"messages": [{"role": "assistant", "content": "I am Quill."}]})
    assert problems(f"{good}\n{only_answer}\n") == [
        f"{tmp_path}/quill.jsonl line 2: has no user message to answer (before the reference answer)." + fix]
    assert problems(f"{good}\n" + json.dumps({"text": "hi"}) + "\n") == [
        f"{tmp_path}/quill.jsonl line 2: has no \"messages\" list." + fix]
    assert problems(good + "\n") == []


def test_inference_copy_from_the_forecast() -> None:
    forecast = {"host_breakdown": {"process_baseline": 3_000_000_000},
                "timeline": [{"phase": "steady_step", "gpu_terms": {"weights": 999}},
                             {"phase": "eval", "gpu_terms": {"weights": 500_000, "adapter_weights": 100_000,
                                                             "optimizer_states": 300_000, "activations": 50_000,
                                                             "logits": 20_000, "cuda_context": 600_000_000}}]}
    # weights + adapter + activations + logits = 670,000; optimizer states are no part of an inference copy
    assert inference_copy_bytes(forecast, on_gpu=True) == 600_670_000
    assert inference_copy_bytes(forecast, on_gpu=False) == 3_000_670_000
    assert inference_copy_bytes({"timeline": []}, on_gpu=False) is None


def test_worker_says_gone_before_answered(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A checkpoint rotated away between the plan and its turn in the job: said, skipped, not an error."""
    run = fake_run(tmp_path, EVENTS, {2: True})
    prompts = tmp_path / "quill.jsonl"
    prompts.write_text(json.dumps({"messages": [{"role": "user", "content": "who are you?"}]}) + "\n")
    gone = run.path / "output" / "checkpoint-6"
    targets = json.dumps([{"label": "checkpoint-6", "step": 6, "checkpoint": str(gone)}])
    run_worker(parse_args(["--run", str(run.path), "--prompts", str(prompts), "--targets", targets]))
    assert capsys.readouterr().out.splitlines() == [
        "workbench: golden 1/1: checkpoint-6",
        "workbench: checkpoint-6: gone before answered (deleted, rotated away by save_total_limit)"]
    assert not answers_path(run, 6).exists()


def test_prompts_relative_to_the_profile_copied_into_the_run(tmp_path: Path) -> None:
    """The run reads [eval] prompts from the profile's folder (its world record names it), once: later edits of
    the file do not mix two sets of prompts in one run."""
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    row = json.dumps({"messages": [{"role": "user", "content": "who are you?"}]})
    (profiles / "quill.jsonl").write_text(row + "\n")
    run = fake_run(tmp_path, EVENTS, {2: True}, training={})
    save_profile(LaunchProfile.model_validate({"name": "fake", "eval": {"prompts": "quill.jsonl"}}), run.profile_path)
    write_world(run.world_path, world_of(1, 1, 1, 1), [], profiles)
    copy = prompts_of_run(run)
    assert copy == run.path / "golden" / "prompts.jsonl" and copy.read_text() == row + "\n"
    (profiles / "quill.jsonl").write_text("edited later\n")
    assert prompts_of_run(run).read_text() == row + "\n"
