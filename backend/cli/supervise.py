"""The supervisor's entry points, with every plug-in of the rooms below registered first (backend.cli.wiring):

    python -m backend.cli.supervise run RUN_DIR      a training run (started detached by `workbench run`)
    python -m backend.cli.supervise job JOB_DIR      a job of a run (merge, inference, export, eval)
    python -m backend.cli.supervise slurm RUN_DIR    a run inside its SLURM batch job (backend.launchers.slurm)
    python -m backend.cli.supervise sky JOB_PROFILE RUN_ID   a run inside its SkyPilot task, on every node
                                                     (backend.launchers.skypilot)

No Typer and no torch here: the supervisor stays small beside the trainer.
"""

from __future__ import annotations

import sys
from pathlib import Path

USAGE = "usage: python -m backend.cli.supervise {run|job|slurm} FOLDER | sky JOB_PROFILE RUN_ID"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 3 and args[0] == "sky":
        from backend.cli.wiring import install
        from backend.launchers.skypilot import job_main as sky_main

        install()
        return sky_main(args[1:])
    if len(args) != 2 or args[0] not in ("run", "job", "slurm"):
        print(USAGE, file=sys.stderr)
        return 2
    from backend.cli.wiring import install

    install()
    kind, folder = args
    if kind == "job":
        from backend.jobs.job import JobFolder
        from backend.jobs.supervise import JobKept
        from backend.rundir.supervise import supervise

        return supervise(JobKept(JobFolder(Path(folder))))
    if kind == "slurm":
        from backend.launchers.slurm import job_main

        return job_main([folder])
    from backend.rundir.layout import RunFolder
    from backend.runs.supervise import supervise_run

    return supervise_run(RunFolder(folder))


if __name__ == "__main__":
    sys.exit(main())
