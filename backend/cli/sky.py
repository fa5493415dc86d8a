"""Runs on clusters and clouds from the CLI (#40): submitting a profile to SkyPilot (`workbench run PROFILE
--on sky`, `workbench queue add PROFILE --sky`: SkyPilot's jobs controller is the queue of managed jobs), and
`workbench sync RUN --from DIR`: the run's folder where it runs, copied into its local folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

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


def sync(
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="The run's id (its local folder).")],
    source: Annotated[Path, typer.Option("--from", help="The run's folder where it runs: the bucket mounted here "
                                         "(mount-s3, gcsfuse ...), a copy (`aws s3 sync`), or the SLURM cluster's "
                                         "shared filesystem.")],
) -> None:
    """Copy a run's state, events, log and alerts from where it runs into its local folder: the runs list,
    status and the monitor then show it, with how old what they see is."""
    from backend.cli.common import find_run_or_exit
    from backend.cluster.follow import sync_from
    from backend.rundir.layout import RunFolder

    folder = find_run_or_exit(run_ref)
    remote = RunFolder(source)
    problem = remote.identity_problem()
    if problem:
        fail(f"--from: {visible(problem)}")
    if remote.run_id != folder.run_id:
        fail(f"--from: {visible(remote.path)} is run {visible(remote.run_id)}, not {visible(folder.run_id)}")
    if remote.path.resolve() == folder.path.resolve():
        fail(f"--from: {visible(remote.path)} is the run's local folder itself; give the folder where it runs")
    copied = sync_from(remote.path, folder.path)
    console.print(f"synced {visible(folder.run_id)} from {visible(remote.path)}: {', '.join(copied) or 'nothing'}",
                  highlight=False, markup=False, soft_wrap=True)
