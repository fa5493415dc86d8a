"""A fake SLURM for queue tests: sbatch, squeue and scancel are scripts that write their arguments to
`calls.txt` (sbatch answers job ids 1001, 1002 ...; squeue prints what the test put in `squeue.txt`; a file
`sbatch-refuses` makes sbatch refuse; scancel says job 1001 is over already)."""

from __future__ import annotations

from pathlib import Path

FAKE_SBATCH = """#!/bin/bash
echo "sbatch $*" >> "$FAKE_SLURM_DIR/calls.txt"
if [ -e "$FAKE_SLURM_DIR/sbatch-refuses" ]; then echo "sbatch: error: Batch job submission failed: Invalid account" >&2; exit 1; fi
n=$(cat "$FAKE_SLURM_DIR/next-id" 2>/dev/null || echo 1001)
echo $((n + 1)) > "$FAKE_SLURM_DIR/next-id"
echo "$n;cluster-a"
"""
FAKE_SQUEUE = """#!/bin/bash
echo "squeue $*" >> "$FAKE_SLURM_DIR/calls.txt"
cat "$FAKE_SLURM_DIR/squeue.txt" 2>/dev/null
"""
FAKE_SCANCEL = """#!/bin/bash
echo "scancel $*" >> "$FAKE_SLURM_DIR/calls.txt"
if [ "${@: -1}" = "1001" ]; then echo "scancel: error: Kill job error on job id 1001: Invalid job id specified" >&2; exit 1; fi
"""


def slurm_calls(folder: Path) -> list[str]:
    """The fake SLURM commands run so far, one line each (`sbatch --parsable ...`, `scancel -- 1002`)."""
    path = folder / "calls.txt"
    return path.read_text().splitlines() if path.exists() else []
