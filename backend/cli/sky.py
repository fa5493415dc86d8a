"""Submitting a profile to SkyPilot from the CLI (#40 item 2): `workbench run PROFILE --on sky` and
`workbench queue add PROFILE --sky` (SkyPilot's jobs controller is the queue of managed jobs)."""

from __future__ import annotations

from pathlib import Path

import typer

from backend.cli.common import console, err_console, fail
from backend.core.safe_text import visible
from backend.profile import LaunchProfile


def submit_to_sky(profile: LaunchProfile, base_dir: Path, *, bucket: str | None, accelerator: str | None, spot: bool,
                  infra: str | None, workspace: Path | None = None) -> None:
    """Submit; say the job id, the run id and how to follow it; exit 2 with why when anything refuses."""
    from backend.cluster.sky_jobs import SkyUnavailable
    from backend.launchers.skypilot import SkyOptions, submit_skypilot
    from backend.oracle.sky_task import SkyPilotMissing, SkyTaskRefused
    from backend.runs.errors import LaunchRefused

    if not bucket:
        fail("--on sky / --sky needs --bucket NAME (or s3://NAME/PATH): the run folder lives there, so a "
             "recovered job resumes from its newest checkpoint")
    options = SkyOptions(bucket=bucket, accelerator=accelerator, use_spot=spot, infra=infra)
    try:
        submitted = submit_skypilot(profile, options, base_dir=base_dir, workspace=workspace)
    except SkyTaskRefused as err:
        fail(f"SkyPilot refused the task: {visible(err)}")
    except (ValueError, SkyPilotMissing, SkyUnavailable) as err:
        fail(visible(err))
    except LaunchRefused as err:
        for problem in err.problems:
            err_console.print(visible(problem), highlight=False, markup=False)
        raise typer.Exit(2) from None
    run = submitted.run
    console.print(f"submitted SkyPilot job {submitted.job_id}, run {run.run_id}\n  task: {run.path / 'sky_task.yaml'}"
                  f"\n  run folder: {options.bucket} ({run.run_id}), mounted on the job's nodes\n"
                  f"  follow: workbench status {run.run_id}   stop: workbench stop {run.run_id}",
                  highlight=False, markup=False, soft_wrap=True)
