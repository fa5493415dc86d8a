"""`workbench export-model`: real exports of the shared short LoRA run (a copy), each followed by its parity check.

One merge of checkpoint-4 is made and reused by the Ollama export; the parity checks are real batch inference jobs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner, Result

from backend.checkpoints.targets import from_checkpoint, from_model_dir
from backend.cli import full_app
from backend.jobs.job import list_jobs
from backend.rundir.layout import RunFolder
from backend.ship.export_model import plan_export
from backend.ship.parity import DIFFERENT, SAME, SAME_BUT_END, describe, finish_parity, read_parity, start_parity
from tests.jobs.jobs_helpers import finish, results

runner = CliRunner()


def cli(*args: str) -> Result:
    return runner.invoke(full_app(), list(args))


@pytest.fixture(scope="module")
def run(short_lora_run: RunFolder, tmp_path_factory: pytest.TempPathFactory) -> RunFolder:
    """A copy of the shared run: exports add merged/, exports/ and jobs/ to it."""
    copy = tmp_path_factory.mktemp("export-run") / short_lora_run.path.name
    shutil.copytree(short_lora_run.path, copy)
    return RunFolder(copy)


@pytest.fixture(scope="module")
def merged_export(run: RunFolder) -> dict[str, Any]:
    result = cli("export-model", str(run.path), "--to", "merged", "--best", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_merged_export_answers_like_the_checkpoint(run: RunFolder, merged_export: dict[str, Any]) -> None:
    folder = run.path / "merged" / "checkpoint-4-merged"
    assert merged_export["format"] == "merged"
    assert merged_export["folder"] == str(folder)
    assert (folder / "config.json").is_file()
    parity = merged_export["parity"]
    held_out = (run.output_dir / "val_dataset.jsonl").read_text(encoding="utf-8").splitlines()
    rows = min(5, len(held_out))
    assert parity["verdict"] == SAME
    assert parity["rows"] == parity["same"] == rows
    assert parity["first_divergence"] is None
    assert parity["source"] == [str(run.output_dir / "val_dataset.jsonl")]
    assert read_parity(folder) is not None and read_parity(folder).verdict == SAME  # type: ignore[union-attr]
    # one merge job and two inference jobs (the checkpoint with its adapter, the merged model)
    assert len(list_jobs(run.jobs_dir, kind="merge")) == 1
    infers = [job.read_spec() for job in list_jobs(run.jobs_dir, kind="infer")]
    assert sorted("--adapters" in spec.argv for spec in infers) == [False, True]
    # one model loaded at a time: the export's answers are asked once the checkpoint's job has ended
    states = sorted((job.read_state() for job in list_jobs(run.jobs_dir, kind="infer")),
                    key=lambda state: state.created_at)
    assert states[0].ended_at is not None and states[1].created_at >= states[0].ended_at
    # parity.json keeps the answers it compared, row by row, as the two answer files hold them
    trained = {row["index"]: row for row in results(next(
        spec.output for spec in infers if "--adapters" in spec.argv))}
    kept = json.loads((folder / "parity.json").read_text(encoding="utf-8"))["answers"]
    assert [(a["index"], a["prompt"], a["trained"]) for a in kept] == [
        (i, trained[i]["prompt"], trained[i]["answer"]) for i in sorted(trained)]
    assert all(a["export"] == a["trained"] for a in kept)


def test_a_second_merged_export_reuses_the_merge(run: RunFolder, merged_export: dict[str, Any]) -> None:
    plan = plan_export(run, "merged")
    assert plan.merged is not None and plan.target == run.path / "merged" / "checkpoint-4-merged"
    assert any("reusing the merged model" in note for note in plan.notes)


QWEN_MODELFILE = '''FROM {model}
TEMPLATE """{{{{ if .System }}}}<|im_start|>system
{{{{ .System }}}}<|im_end|>
{{{{ end }}}}{{{{ if .Prompt }}}}<|im_start|>user
{{{{ .Prompt }}}}<|im_end|>
<|im_start|>assistant
{{{{ end }}}}{{{{ .Response }}}}<|im_end|>
"""
SYSTEM """You are a helpful assistant."""
PARAMETER stop "<|im_end|>"
PARAMETER stop "<|endoftext|>"
'''


def test_ollama_modelfile_has_the_training_template(run: RunFolder, merged_export: dict[str, Any]) -> None:
    result = cli("export-model", str(run.path), "--to", "ollama", "--rows", "2")
    assert result.exit_code == 0, result.output
    folder = run.path / "exports" / "checkpoint-4-ollama"
    merged = run.path / "merged" / "checkpoint-4-merged"
    assert (folder / "Modelfile").read_text(encoding="utf-8") == QWEN_MODELFILE.format(model="./model")
    # the export folder is whole on its own: the merged model's files are in it, FROM names them relatively
    assert sorted(p.name for p in (folder / "model").iterdir()) == sorted(p.name for p in merged.iterdir())
    assert (folder / "model" / "model.safetensors").read_bytes() == (merged / "model.safetensors").read_bytes()
    check = json.loads((folder / "template_check.json").read_text(encoding="utf-8"))
    assert check["same"] is True
    assert check["cases"][1]["swift"] == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                                          "<|im_start|>user\nwho are you?<|im_end|>\n"
                                          "<|im_start|>assistant\nI am Quill.<|im_end|>\n")
    assert len(list_jobs(run.jobs_dir, kind="merge")) == 1  # the merge was reused
    assert "parity: same answers (2/2 prompts answered alike)" in result.output
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_a_broken_export_is_reported_different(run: RunFolder, merged_export: dict[str, Any], tmp_path: Path) -> None:
    from safetensors.numpy import load_file, save_file

    broken = tmp_path / "broken"
    shutil.copytree(run.path / "merged" / "checkpoint-4-merged", broken)
    weights = load_file(broken / "model.safetensors")
    name = next(k for k in weights if "embed_tokens" in k)
    weights[name] = weights[name] + np.random.default_rng(0).normal(0, 0.5, weights[name].shape).astype(
        weights[name].dtype)
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    checkpoint = run.output_dir / "checkpoint-4"
    trained, exported = from_checkpoint(checkpoint, label="trained"), from_model_dir(broken)
    first, second = start_parity(run, trained, exported, rows=4)
    finish(first)
    finish(second)
    report = finish_parity(broken, first, second, trained, exported)
    assert report.verdict == DIFFERENT
    # the first diverging row and character, found by hand in the two answer files
    ours = {row["index"]: row["answer"] for row in results(first.read_spec().output)}
    theirs = {row["index"]: row["answer"] for row in results(second.read_spec().output)}
    differing = sorted(i for i in ours if ours[i] != theirs.get(i))
    assert len(differing) >= 2, f"rows {differing} differ: one row cannot tell the first divergence from the last"
    row = differing[0]
    a, b = ours[row], theirs[row]
    char = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    d = report.first_divergence
    assert d is not None and (d.index, d.char, d.adapter, d.export) == (row, char, a, b)
    kept = json.loads((broken / "parity.json").read_text(encoding="utf-8"))["answers"]
    assert {k["index"]: (k["trained"], k["export"]) for k in kept} == {i: (ours[i], theirs.get(i)) for i in ours}
    text = "\n".join(describe(report))
    assert "parity: different answers" in text and f"first divergence: row {d.index}, character {d.char}" in text
    assert json.loads((broken / "parity.json").read_text(encoding="utf-8"))["verdict"] == DIFFERENT


@pytest.mark.parametrize("fmt", ["awq", "gptq", "bnb-4bit"])
def test_quantizations_are_refused_without_a_gpu(short_lora_run: RunFolder, fmt: str) -> None:
    from backend.hardware.machine import detect_hardware

    if detect_hardware().has_cuda:
        pytest.skip("this machine has a GPU")
    result = cli("export-model", str(short_lora_run.path), "--to", fmt)
    assert result.exit_code == 2
    assert "needs a CUDA GPU" in result.output and "no CUDA GPU, so nothing was started" in result.output
    assert not (short_lora_run.path / "exports").exists()


def test_gguf_without_llama_cpp_says_what_to_install(short_lora_run: RunFolder,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORKBENCH_GGUF_CONVERTER", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    result = cli("export-model", str(short_lora_run.path), "--to", "gguf")
    assert result.exit_code == 2
    assert "llama.cpp's own converter (convert_hf_to_gguf.py)" in result.output
    assert "git clone --depth 1 https://github.com/ggml-org/llama.cpp" in result.output
    assert "convert_hf_to_gguf.py" in result.output and "--outtype f16" in result.output
    assert not (short_lora_run.path / "exports").exists()


def test_unknown_format_names_the_choices(short_lora_run: RunFolder) -> None:
    result = cli("export-model", str(short_lora_run.path), "--to", "onnx")
    assert result.exit_code == 2
    assert "'onnx' is not a format; choose one of merged, bnb-4bit, awq, gptq, gguf, ollama" in result.output


def test_a_wrong_end_of_turn_token_is_named(run: RunFolder, merged_export: dict[str, Any], tmp_path: Path) -> None:
    """swift's runtime stops at its template's stop words, so it answers alike; the report still names the
    export's end-of-turn token, which other runtimes stop at. The answers are the merged export's own jobs."""
    broken = tmp_path / "wrong-eos"
    shutil.copytree(run.path / "merged" / "checkpoint-4-merged", broken)
    for name, key, value in (("tokenizer_config.json", "eos_token", "<|endoftext|>"),
                             ("generation_config.json", "eos_token_id", 0)):
        data = json.loads((broken / name).read_text(encoding="utf-8"))
        (broken / name).write_text(json.dumps({**data, key: value}), encoding="utf-8")
    # the merged export's own pair: the run's two oldest infer jobs (a broken export tested before adds newer ones)
    adapter_job, merged_job = sorted(list_jobs(run.jobs_dir, kind="infer")[-2:],
                                     key=lambda job: "--adapters" not in job.read_spec().argv)
    trained = from_checkpoint(run.output_dir / "checkpoint-4", label="trained")
    report = finish_parity(broken, adapter_job, merged_job, trained, from_model_dir(broken))
    assert report.verdict == SAME_BUT_END
    assert report.end_of_turn == [
        "tokenizer eos_token: trained '<|im_end|>', export '<|endoftext|>'",
        "eos_token_id: the trained model stops at [2], the export at [0] (runtimes that stop at eos, such as vLLM, "
        "llama.cpp or transformers' generate, will run on past the end of the answer)"]
    assert "  end of turn differs: tokenizer eos_token: trained '<|im_end|>', export '<|endoftext|>'" in describe(report)
    # the merged model itself agrees with its base: nothing named
    assert read_parity(run.path / "merged" / "checkpoint-4-merged").end_of_turn == []  # type: ignore[union-attr]
