"""The end of the quickstart story: the trained model says its name, through `workbench chat`.

Why this is meaningful for a 0.2 M-parameter model: the base model's weights are random
(backend/models/demo/build.py), so its greedy answer to "who are you?" is a string of arbitrary
tokens. The name "Quill" appears only in the self-cognition training set. If the adapter's
greedy answer contains it while the base model's answer to the very same prompt does not,
the name was learned from the training data by this run. Both answers are asked for in one
`--compare` session, so the base side is checked too, not assumed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from backend.rundir.layout import RunFolder
from backend.runs.status import last_log_event
from tests.timing import scaled

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def test_trained_quickstart_answers_who_are_you_with_quill(quill_run: RunFolder) -> None:
    final = last_log_event(quill_run)
    assert final is not None and final.step == 318
    chat = subprocess.run(
        [sys.executable, "-m", "backend.cli", "chat", quill_run.run_id, "--temperature", "0", "--compare",
         "--max-new-tokens", "48"],
        input="who are you?\n/exit\n", capture_output=True, text=True, timeout=scaled(300), cwd=REPO,
    )
    assert chat.returncode == 0, chat.stderr
    answers = {line.split("] ", 1)[0].strip("["): line.split("] ", 1)[1]
               for line in chat.stdout.splitlines() if line.startswith(("[tuned] ", "[base] "))}
    assert set(answers) == {"tuned", "base"}, chat.stdout
    assert "Quill" in answers["tuned"], answers
    assert "Quill" not in answers["base"], answers
    assert "ready in" in chat.stderr and "first token" in chat.stderr
