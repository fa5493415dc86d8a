"""`workbench chat RUN [--checkpoint N | --merged]` (README): prompts from stdin, one a line; `/reset` starts
a new conversation, `/exit` ends; Ctrl-C stops an answer and the chat goes on. On a copy of the shared
four-step LoRA run (tests/conftest.py short_lora_run), the copy given a merged model (the tiny base model
itself, with the record `workbench merge` writes) so that no merge job runs here."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backend.rundir.layout import RunFolder
from tests.terminal_signals import default_terminal_signals
from tests.timing import scaled

WORKBENCH = [sys.executable, "-m", "backend.cli"]
GREEDY = ["--temperature", "0", "--max-new-tokens", "8"]


@pytest.fixture(scope="module")
def run_copy(short_lora_run: RunFolder, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> RunFolder:
    folder = tmp_path_factory.mktemp("chat-cli") / short_lora_run.path.name
    shutil.copytree(short_lora_run.path, folder, ignore=shutil.ignore_patterns("jobs"))
    merged = folder / "merged" / "checkpoint-4-merged"
    shutil.copytree(tiny_model, merged)
    trained = json.loads((RunFolder(folder).checkpoints()[-1] / "args.json").read_text())
    (merged / "workbench_model.json").write_text(json.dumps({
        "run_id": folder.name, "run_dir": str(folder), "checkpoint": "checkpoint-4", "step": 4,
        "base_model": str(tiny_model), "model_type": trained["model_type"], "template": trained["template"],
        "created_at": time.time()}))
    return RunFolder(folder)


def chat(*args: str, stdin: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*WORKBENCH, "chat", *args], input=stdin, capture_output=True, text=True,
                          timeout=scaled(timeout), cwd=Path(__file__).resolve().parents[2])


def _two_equal_answers(stdout: str) -> str:
    lines = stdout.splitlines()
    assert len(lines) % 2 == 0 and lines, stdout
    half = len(lines) // 2
    assert lines[:half] == lines[half:], stdout  # greedy, and the second question had no history
    return "\n".join(lines[:half])


CHOICES = {"checkpoint": ["--checkpoint", "4"], "merged": ["--merged"]}


@pytest.fixture(scope="module")
def chats(run_copy: RunFolder) -> dict[str, subprocess.CompletedProcess[str]]:
    """`workbench chat` of the run copy with checkpoint-4 and with its merged model (the base model's weights:
    see run_copy), the same two questions each, once for the module."""
    return {name: chat(str(run_copy.path), *which, *GREEDY, stdin="who are you?\n/reset\nwho are you?\n/exit\nnever\n")
            for name, which in CHOICES.items()}


@pytest.mark.slow
@pytest.mark.parametrize("which", list(CHOICES))
def test_chat_with_a_runs_checkpoint_or_merged_model_and_reset(run_copy: RunFolder, which: str,
                                                               chats: dict[str, subprocess.CompletedProcess[str]]) -> None:
    result = chats[which]
    assert result.returncode == 0, result.stderr
    label = "checkpoint-4-merged" if which == "merged" else "checkpoint-4"
    assert f"loading {run_copy.run_id} {label} ..." in result.stderr
    assert f"{run_copy.run_id} {label}: ready in " in result.stderr
    assert result.stderr.count("(new conversation)") == 1
    assert result.stderr.count(" tokens in ") == 2  # two answers; nothing after /exit
    _two_equal_answers(result.stdout)


@pytest.mark.slow
def test_chat_with_a_checkpoint_answers_with_its_adapter_not_as_the_base_model(
        chats: dict[str, subprocess.CompletedProcess[str]]) -> None:
    """The label alone proves nothing: with the adapter never loaded, the base model would answer under it.
    Four LoRA steps change the tiny model's greedy answer (seen by hand with `workbench chat RUN --checkpoint 4
    --compare`), so checkpoint-4 must not answer as the base model does."""
    tuned = _two_equal_answers(chats["checkpoint"].stdout)
    base = _two_equal_answers(chats["merged"].stdout)  # run_copy's merged model is the base model itself
    assert tuned.strip() and base.strip()
    assert tuned != base, f"checkpoint-4 answered exactly as the base model: {tuned!r}"


def test_chat_names_the_checkpoints_a_run_has_and_how_to_make_a_merged_model(run_copy: RunFolder,
                                                                             tmp_path: Path) -> None:
    missing = chat(str(run_copy.path), "--checkpoint", "9", stdin="")
    assert missing.returncode == 2
    assert f"run {run_copy.run_id} has no checkpoint-9; it has: 4" in missing.stderr
    bare = tmp_path / run_copy.path.name
    shutil.copytree(run_copy.path, bare, ignore=shutil.ignore_patterns("merged"))
    unmerged = chat(str(bare), "--merged", stdin="")
    assert unmerged.returncode == 2
    assert f"has no merged model of any checkpoint; make one with: workbench merge {run_copy.run_id}" in \
        unmerged.stderr.replace("\n", " ")


@pytest.mark.slow
def test_ctrl_c_stops_an_answer_and_the_chat_goes_on(run_copy: RunFolder) -> None:
    chat_process = subprocess.Popen(
        [*WORKBENCH, "chat", str(run_copy.path), "--checkpoint", "4", "--temperature", "0",
         "--max-new-tokens", "5000"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2], env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=default_terminal_signals)  # Ctrl-C reaches it as it would from a terminal
    try:
        assert chat_process.stdin and chat_process.stdout and chat_process.stderr
        chat_process.stdin.write(b"tell me a long story\n")
        chat_process.stdin.flush()
        assert chat_process.stdout.read(1), "no answer began"
        chat_process.send_signal(signal.SIGINT)
        _, err = chat_process.communicate(b"who are you?\n/exit\n", timeout=scaled(300))
    finally:
        if chat_process.poll() is None:
            chat_process.kill()
    assert chat_process.returncode == 0, err
    told = err.decode()
    assert told.count(" tokens in ") == 2, told  # the stopped answer, then the next question's
    stopped = next(line for line in told.splitlines() if " tokens in " in line)
    assert stopped.endswith("(stopped)") and int(stopped.split(" tokens in ")[0].split()[-1]) < 5000
