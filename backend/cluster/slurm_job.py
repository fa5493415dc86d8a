"""The SLURM job of a run folder: `slurm_job.json`, written by the batch job (backend/launchers/slurm.py).

The folder may come from a shared filesystem anyone can write, so only a job id is believed: digits, an
array task `_N` at most. Anything else (`--user=root`, `12 --full`, escapes) is refused and said.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from backend.core.safe_text import visible

JOB_FILE_NAME = "slurm_job.json"
JOB_ID = re.compile(r"\d+(_\d+)?")


def job_id_of(run_dir: Path) -> tuple[str | None, list[str]]:
    """The run's SLURM job id, or None and why not (nothing said when the run has no job file)."""
    job_file = Path(run_dir) / JOB_FILE_NAME
    if not job_file.is_file():
        return None, []
    try:
        content = json.loads(job_file.read_text(encoding="utf-8"))
        job_id = content.get("SLURM_JOB_ID") if isinstance(content, dict) else None
    except (OSError, UnicodeDecodeError, ValueError) as err:
        return None, [f"{job_file.name} is unreadable ({visible(err, 200)})"]
    if isinstance(job_id, int) and not isinstance(job_id, bool):
        job_id = str(job_id)
    if not isinstance(job_id, str) or not JOB_ID.fullmatch(job_id):
        return None, [f"{job_file.name} holds no SLURM job id (SLURM_JOB_ID = {visible(repr(job_id), 80)})"]
    return job_id, []
