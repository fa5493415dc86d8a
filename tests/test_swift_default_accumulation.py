"""swift's default gradient accumulation as the workbench derives it (backend.profile.batch) equals what swift
4.6 itself computes: swift's own TrainingArguments built in a child process for micro-batch 1-16 x world size
1-8 (WORLD_SIZE set as a launcher sets it); nothing of swift's rule is typed here."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from backend.profile.batch import swift_default_accumulation
from tests.timing import scaled

SWIFT_CHILD = """
import json, os, sys, tempfile
from swift.trainers.arguments import TrainingArguments
out = {}
with tempfile.TemporaryDirectory() as folder:
    for world in range(1, 9):
        os.environ["WORLD_SIZE"] = str(world)
        for batch in range(1, 17):
            args = TrainingArguments(output_dir=folder, per_device_train_batch_size=batch, report_to=[])
            out[f"{batch} {world}"] = args.gradient_accumulation_steps
sys.stdout.write("ANSWER " + json.dumps(out) + "\\n")
"""


@pytest.mark.slow
def test_the_default_accumulation_is_swifts_for_batch_1_to_16_and_world_1_to_8() -> None:
    child = subprocess.run([sys.executable, "-c", SWIFT_CHILD], capture_output=True, text=True, timeout=scaled(180),
                           check=True)
    line = next(x for x in child.stdout.splitlines() if x.startswith("ANSWER "))
    swift = json.loads(line.removeprefix("ANSWER "))
    assert len(swift) == 16 * 8
    ours = {f"{b} {w}": swift_default_accumulation(b, w) for b in range(1, 17) for w in range(1, 9)}
    assert ours == swift
    assert (swift["6 1"], swift["3 2"], swift["16 1"], swift["1 8"]) == (3, 3, 1, 2)  # 6 x 3 = 18, not 16 // 6
