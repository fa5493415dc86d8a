"""A run's status when someone looks: reconciled with its processes and, once they are all gone
without a final status, concluded from the evidence (verdict.py) and said once in its alerts.
Also the run's last logged step, read from the tail of its events.

A run with a SLURM job (slurm_job.json) also gets SLURM's own verdict (backend/cluster/sacct.py, #40): a
job SLURM preempted, timed out, lost with its node or killed for memory is shown by SLURM's word, and a
run whose supervisor SLURM took with it is concluded from it (recorded, and said in its alerts). A run
submitted to SkyPilot (sky_job.json) is shown with SkyPilot's state of its managed job (backend/cluster/
sky_jobs.py): PENDING and STARTING as starting, RUNNING and RECOVERING as running with what SkyPilot says
(a recovery: "recovered 1 time on another instance"), its end recorded."""

from __future__ import annotations

import time

import msgspec

from backend.cluster.sacct import SacctUnavailable, SlurmVerdict, verdict
from backend.cluster.sky_jobs import SkyJob, SkyUnavailable, job_states
from backend.cluster.sky_jobs import job_id_of as sky_job_id_of
from backend.cluster.slurm_job import job_id_of
from backend.contract.events import EventReader, Log, RunEnd
from backend.core.process_identity import run_marker
from backend.rundir.layout import FolderBusy, FolderNotWritable, RunFolder, RunState, StateUnreadable
from backend.rundir.reconcile import reconcile
from backend.runs.verdict import judge_lost


def refresh(run: RunFolder) -> RunState:
    """The run's state, reconciled with its processes and, once they are gone, with the evidence.
    Never raises for a damaged folder: the state then says `damaged` and why."""
    state = run.state_or_damaged()
    if state.status == "damaged":
        if run_marker(run.path).processes():  # state.json lost mid-run: the run still goes on
            return state.model_copy(update={"status": "running", "failure_reason": (
                f"{state.failure_reason}; its processes are still running (`workbench stop` stops them)")})
        return state
    state = reconcile(run.state_or_damaged, run_marker(run.path), lambda lost: _conclude_lost(run, lost), state)
    return _with_sky_state(run, _with_slurm_verdict(run, state))


SLURM_SAID = "SLURM "  # a reason SLURM's verdict gave starts so: it is recorded, sacct is not asked again
SKY_SAID = "SkyPilot "  # a reason SkyPilot's state gave starts so
SKY_STATUS = {"PENDING": "starting", "SUBMITTED": "starting", "STARTING": "starting", "RUNNING": "running",
              "RECOVERING": "running", "WINDING_DOWN": "running", "CANCELLING": "stopping", "SUCCEEDED": "finished",
              "CANCELLED": "stopped"}


def _with_sky_state(run: RunFolder, state: RunState) -> RunState:
    """The state with SkyPilot's word on the run's managed job: shown while it is active, recorded once it
    ended (SUCCEEDED finished, CANCELLED stopped, FAILED* failed)."""
    if state.status in ("damaged",) or (not state.is_active and (state.failure_reason or "").startswith(SKY_SAID)):
        return state
    job_id = sky_job_id_of(run.path)
    if job_id is None:
        return state
    try:
        job: SkyJob | None = job_states().get(job_id)
    except SkyUnavailable as err:
        return state.model_copy(update={"failure_reason": f"{SKY_SAID}job {job_id}: state unknown ({err})"}) \
            if state.is_active else state
    if job is None:
        return state
    status = SKY_STATUS.get(job.status, "failed" if job.status.startswith("FAILED") else state.status)
    said = job.describe()
    if state.resumed_from and job.recoveries:
        said += f"; resumed from {state.resumed_from}"
    if job.is_active or job.status.startswith("unknown"):
        return state.model_copy(update={"status": status, "failure_reason": said})
    update = {"status": status, "failure_reason": said, "ended_at": state.ended_at or time.time()}
    try:
        return run.update_state(**update)
    except (StateUnreadable, FolderNotWritable, FolderBusy):
        return state.model_copy(update=update)


def _slurm_verdict(run: RunFolder, state: RunState) -> SlurmVerdict | None:
    """SLURM's verdict on the run's job, when it has one and SLURM gave one it has not recorded yet."""
    if state.status in ("finished", "damaged") or (state.failure_reason or "").startswith(SLURM_SAID):
        return None
    job_id, _ = job_id_of(run.path)
    if job_id is None:
        return None
    try:
        found = verdict(job_id)
    except (SacctUnavailable, ValueError):  # not on a SLURM login node: the run folder's word alone
        return None
    return found if found is not None and found.reason is not None else None


def _with_slurm_verdict(run: RunFolder, state: RunState) -> RunState:
    """The state with SLURM's verdict: an active run whose job SLURM ended is concluded by it (its supervisor
    went with the job); an ended one gets SLURM's reason before its own. A job SLURM requeued is shown, not
    recorded: its next attempt resumes the run and writes its state."""
    said = _slurm_verdict(run, state)
    if said is None or said.status is None or said.reason is None:
        return state
    if said.requeued and said.now == "RUNNING" and state.is_active:
        return state  # the next attempt runs: the run's own state says the rest
    reason = said.reason if state.is_active or not state.failure_reason else f"{said.reason}; {state.failure_reason}"
    status = said.status if state.is_active or state.status == "unknown" or said.requeued else state.status
    ended = said.ended.end.timestamp() if said.ended is not None and said.ended.end is not None else None
    update = {"status": status, "failure_reason": reason, "ended_at": state.ended_at or ended or time.time()}
    if said.requeued or not run.is_proven():
        return state.model_copy(update=update)
    if state.is_active:
        _alert_supervisor_gone(run, status, reason)
    try:
        return run.update_state(**update)
    except (StateUnreadable, FolderNotWritable, FolderBusy):  # shown as SLURM says, written next time
        return state.model_copy(update=update)


def _conclude_lost(run: RunFolder, state: RunState) -> RunState:
    """The supervisor and every process of the run are gone without a final status: conclude from
    the evidence (verdict.judge_lost), say it once in the run's alerts, and record it."""
    status, reason, sig = judge_lost(run, state)
    ended_at, when = _evidence_end(run)
    if when and reason:
        reason = f"{reason}; {when}"
    said = _slurm_verdict(run, state)
    if said is not None and said.status is not None and not said.requeued:  # SLURM knows what took it
        status, reason = said.status, f"{said.reason}; {reason}" if reason else said.reason
    concluded = {"status": status, "failure_reason": reason, "signal": sig, "ended_at": ended_at}
    if not run.is_proven():  # a legacy or foreign folder (no run.json): shown as concluded, never written to
        return state.model_copy(update=concluded)
    _alert_supervisor_gone(run, status, reason)
    try:
        return run.update_state(**concluded)
    except (StateUnreadable, FolderNotWritable, FolderBusy):  # shown as concluded, written next time
        return state.model_copy(update=concluded)


def _evidence_end(run: RunFolder) -> tuple[float, str | None]:
    """When a run concluded from evidence ended: its `run_end` event's time; without one, its last
    event's (said so: the run was alive then and gone later); without any event, now. Never the moment
    someone looked, which can be hours after the end."""
    events = EventReader.from_end(run.events_path, 65_536).read_new()
    end = next((e for e in reversed(events) if isinstance(e, RunEnd) and e.rank == 0 and e.time > 0), None)
    if end is not None:
        return end.time, None
    last = next((e for e in reversed(events) if e.time > 0), None)
    if last is None:
        return time.time(), None
    return last.time, "its end is taken as its last event's time (it ended then or later)"


def _alert_supervisor_gone(run: RunFolder, status: str, reason: str | None) -> None:
    """The run's final alert when its supervisor (and watchdog) died before raising one: written once,
    by whichever workbench process concluded the run, so the inbox and the monitor still hear how it
    ended. Not sent to the profile's webhooks or commands: that is the watchdog's, which is gone."""
    from backend.contract.alerts import FINAL_KINDS, Alert, append_alert_once, final_kind, read_alerts

    try:
        if any(alert.kind in FINAL_KINDS for alert in read_alerts(run.path)):
            return  # the watchdog said it before it went
        kind = final_kind(status)
        said = reason or status
        message = f"the run's supervisor is gone; {said}" if status != "unknown" else f"ended with status unknown: {said}"
        last = last_log_event(run)
        append_alert_once(run.path, "supervisor-gone", Alert(
            kind, message, last.step if last else None, {"status": status, "failure_reason": reason,
                                            "concluded_by": "workbench (the supervisor left no record)"},
            run_id=run.run_id))
    except OSError:
        pass  # a read-only or damaged folder: the state still says how it ended


def last_log_event(run: RunFolder, tail_bytes: int = 65_536) -> Log | None:
    """The newest rank-0 `log` event (with the final step of a `run_end` after it), read from the file's
    tail only. Lines that are not events (damaged, of a newer format) are skipped."""
    events = [e for e in EventReader.from_end(run.events_path, tail_bytes).read_new() if e.rank == 0]
    last_log = next((e for e in reversed(events) if isinstance(e, Log) and e.step is not None), None)
    end = next((e for e in reversed(events) if isinstance(e, (Log, RunEnd)) and e.step is not None), None)
    if not isinstance(end, RunEnd):  # no end, or an earlier attempt's: the resumed run's logs came after it
        return last_log
    if last_log is None:  # the end alone: its step, its counts
        return Log(step=end.step, max_steps=end.max_steps, loss_scale=end.loss_scale,
                   overflow_count=end.overflow_count, skipped_steps=end.skipped_steps, time=end.time)
    return msgspec.structs.replace(last_log, step=end.step)  # the end has the final step; the log the last loss
