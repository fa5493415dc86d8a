"""What the rooms above lend the rooms below, registered once per process at start-up.

Imports run one way (ground -> knowledge -> launch -> lifecycle -> faces). Where a lower room needs
an answer or a plug-in that only a higher one has, it keeps a registry and this module fills it:

- the resolver's `run:` references (backend.models.refs);
- the validation rules of the [watch]/[notify] keys, of output_dir and of golden prompts (backend.launch.validate);
- the companions the supervisor keeps beside a run: the watchdog, the events summary, the golden keeper
  (backend.runs.supervise);
- the finishing step of each job kind (backend.jobs.supervise);
- the scoreboard's columns of golden prompts and swift eval (backend.checkpoints.scoreboard);
- the finished runs the forecast's calibration reads (backend.estimate.calibration_hook).

The CLI, the TUI and the supervisor's entry (backend.cli.supervise) call `install()` as they start. Each
plug-in imports its room only when it is used, so start-up stays light.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from backend.jobs.job import EvalFinish, ExportFinish, InferFinish, JobSpec, MergeFinish
    from backend.rundir.layout import RunFolder

_installed = False


def merged_model_of_run(run_id: str) -> Path:
    """The merged model folder of run `run_id`; LookupError saying why there is none."""
    from backend.checkpoints.targets import TargetError, target_of_run
    from backend.runs.lookup import find_run

    try:
        return Path(target_of_run(find_run(run_id).path, merged=True).model)
    except TargetError as err:
        raise LookupError(str(err)) from None


# ---------------------------------------------------------------- beside a run


def _watchdog(run: RunFolder, trainer_pid: int) -> Any:
    from backend.watch.watchdog import start_watchdog

    return start_watchdog(run, trainer_pid, lambda: _a_job_beside(run))  # alerts from outside the trainer (#15)


def _a_job_beside(run: RunFolder) -> bool:
    """A golden-prompts or swift-eval job of the run's own is running now: it shares the run's CPU or GPU, so
    a slower step then is not the run's own slowness (#34 item 11)."""
    from backend.jobs.job import list_jobs, refresh_job

    for job in list_jobs(run.jobs_dir):
        try:
            state = refresh_job(job)
        except (OSError, ValueError):
            continue
        if state.kind in ("golden", "eval") and state.is_active:
            return True
    return False


def _events_summary(run: RunFolder, trainer_pid: int) -> Any:
    from backend.rundir.layout import append_watch_log
    from backend.series.summary import KeeperThread

    # so that a monitor opens a long run without reading it all
    return KeeperThread(run.events_path, lambda text: append_watch_log(run.path, text)).start()


def _golden_keeper(run: RunFolder, trainer_pid: int) -> Any:
    try:
        if not run.read_profile().eval.prompts:
            return None  # the usual case: nothing more is imported
    except Exception:
        return None  # an unreadable profile.toml: the run's other readers say so
    from backend.golden.job import start_keeper
    from backend.rundir.layout import append_watch_log

    return start_keeper(run, lambda text: append_watch_log(run.path, text))  # golden prompts per checkpoint (#24)


# ---------------------------------------------------------------- the jobs' finishing steps


def _finish_merge(spec: JobSpec, data: MergeFinish) -> str | None:
    from backend.merge.job import finish_merge

    return finish_merge(spec, data)


def _finish_infer(spec: JobSpec, data: InferFinish) -> str | None:
    from backend.inference.batch import finish_infer

    return finish_infer(data)


def _finish_export(spec: JobSpec, data: ExportFinish) -> str | None:
    from backend.ship.export_model import finish_export

    return finish_export(data)


def _finish_eval(spec: JobSpec, data: EvalFinish) -> str | None:
    from backend.evaluation.job import finish_eval

    return finish_eval(data)


# ---------------------------------------------------------------- the forecast's calibration


def _calibration_runs() -> Any:
    from backend.runs.calibration_runs import refresh

    return refresh()  # this machine's finished runs read for the forecast (#37)


# ---------------------------------------------------------------- the scoreboard's columns


def _golden_column(run: RunFolder, board: Any) -> None:
    from backend.golden.answers import add_golden_column

    add_golden_column(run, board)


def _eval_column(run: RunFolder, board: Any) -> None:
    from backend.evaluation.results import add_eval_column

    add_eval_column(run, board)


def install() -> None:
    """Register every plug-in with the rooms below (once per process)."""
    global _installed
    if _installed:
        return
    from backend.checkpoints.scoreboard import register_column
    from backend.estimate.calibration_hook import register_refresh
    from backend.golden.prompts import golden_prompts
    from backend.jobs.job import EvalFinish, ExportFinish, InferFinish, MergeFinish
    from backend.jobs.supervise import register_finisher
    from backend.launch.validate import register_rules
    from backend.models.refs import register_run_lookup
    from backend.runs.rules import RUN_PATH_RULES
    from backend.runs.supervise import CompanionKind, register_companion
    from backend.watch.rules import WATCH_RULES

    register_run_lookup(merged_model_of_run)
    register_rules(WATCH_RULES, [*RUN_PATH_RULES, golden_prompts])
    register_companion(CompanionKind("watchdog", _watchdog))
    register_companion(CompanionKind("events summary keeper", _events_summary))
    register_companion(CompanionKind("golden prompts keeper", _golden_keeper))
    register_finisher(MergeFinish, _finish_merge)
    register_finisher(InferFinish, _finish_infer)
    register_finisher(ExportFinish, _finish_export)
    register_finisher(EvalFinish, _finish_eval)
    register_column(_golden_column)
    register_column(_eval_column)
    register_refresh(_calibration_runs)
    _installed = True
