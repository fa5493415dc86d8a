"""How a run ended, from evidence only: the supervisor's record, else the events and the checkpoints
on disk, else "unknown". Never an invented exit code.

- `judge_exit`: the supervisor saw the launcher exit with a code; a "finished" run that trained
  nothing (swift printed its help, 0 steps, a loss that is not a number) is `failed`, with why.
- `judge_lost`: the supervisor is gone without a record and no process of the run is left.

Stdlib + pydantic only (the supervisor imports this).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from backend.contract.events import EventReader, Log, RunBegin, RunEnd
from backend.core.tail import first_lines
from backend.rundir.checkpoint_verdict import choose_resume_checkpoint
from backend.rundir.diagnose import describe_exit
from backend.rundir.layout import RunFolder, RunState

EVENTS_SCAN_BYTES = 4 * 2**20  # the facts below come from the start and the end of events.jsonl
# argparse's help: a usage line, and (after hundreds of wrapped usage lines for swift) the options heading
HELP_USAGE = re.compile(r"^usage: ", re.MULTILINE)
HELP_OPTIONS = re.compile(r"^(?:options|optional arguments):\s*$", re.MULTILINE)


@dataclass
class Evidence:
    """What events.jsonl says (bounded read: its first and last few MiB)."""

    began: bool = False
    scaler: str | None = None  # run_begin's loss scaler (fp16); None: a non-finite gradient is never skipped
    all_zero: bool = True  # every logged step so far had a loss and a grad norm of exactly 0.0
    log_steps: list[int] = field(default_factory=list)
    last_log: Log | None = None
    recent_logs: list[Log] = field(default_factory=list)
    end: RunEnd | None = None
    bad_lines: int = 0

    @property
    def last_step(self) -> int | None:
        steps = [s for s in (self.end.step if self.end else None, *(self.log_steps[-1:])) if s is not None]
        return max(steps) if steps else None


def read_evidence(path: Path) -> Evidence:
    evidence = Evidence()
    try:
        size = path.stat().st_size
    except OSError:
        return evidence
    readers = [EventReader(path)]
    if size > 2 * EVENTS_SCAN_BYTES:  # the end, from its first whole line (a cut line is not damaged)
        readers.append(EventReader.from_end(path, EVENTS_SCAN_BYTES))
    for reader in readers:
        events = reader.read_new(max_bytes=EVENTS_SCAN_BYTES)
        evidence.bad_lines += reader.bad_lines
        for event in events:
            if event.rank != 0:
                continue
            if isinstance(event, RunBegin):
                evidence.began, evidence.scaler = True, event.scaler
            elif isinstance(event, Log) and event.step is not None:
                evidence.all_zero = evidence.all_zero and event.loss == 0.0 and event.grad_norm == 0.0
                evidence.log_steps.append(event.step)
                evidence.last_log = event
                evidence.recent_logs = (evidence.recent_logs + [event])[-3:]
            elif isinstance(event, RunEnd):
                evidence.end = event
    return evidence


def _not_finite(event: Log, name: str) -> bool:
    value = getattr(event, name)
    return name in event.nonfinite or (value is not None and not math.isfinite(value))


def _log_head(run: RunFolder, max_bytes: int = 65_536) -> str:
    return first_lines(run.log_path, max_bytes).text


def trained_nothing(run: RunFolder, log_tail: str, evidence: Evidence | None = None) -> str | None:
    """Why a run that exited 0 did not really train, or None when it did."""
    evidence = evidence or read_evidence(run.events_path)
    head = _log_head(run)
    if not evidence.began and HELP_USAGE.search(head + log_tail) and HELP_OPTIONS.search(head + log_tail):
        return ("swift printed its help instead of training (a value starting with '-', such as "
                "model.source = '--help', is read as a flag); nothing was trained")
    if not evidence.log_steps and not (evidence.last_step or 0) > 0:
        return "trained nothing: 0 steps (no training step was logged)"
    last = evidence.last_log
    if last is not None and _not_finite(last, "loss"):
        return f"the loss was not a finite number at step {last.step} (NaN/inf weights); the result is unusable"
    recent = evidence.recent_logs
    overflows = [e.overflow_count for e in recent]
    scaler_skipping = len(set(o for o in overflows if o is not None)) > 1  # fp16: a skipped step is normal
    if len(recent) == 3 and all(_not_finite(e, "grad_norm") for e in recent) and not scaler_skipping:
        return (f"the gradients were not finite numbers for the last {len(recent)} logged steps "
                f"(up to step {recent[-1].step}): the weights are NaN/inf; the result is unusable")
    if last is not None and _not_finite(last, "grad_norm") and evidence.scaler is None and not scaler_skipping:
        return (f"the gradient norm was not a finite number at the last logged step {last.step}, and no loss "
                "scaler skipped that step: the weights are NaN/inf (a learning rate far too large?); "
                "the result is unusable")
    if evidence.all_zero and last is not None:
        return (f"trained nothing: the loss and the gradient norm were 0.0 from the first logged step to step "
                f"{last.step} (no token of any row was trained on)")
    return None


def judge_exit(run: RunFolder, code: int, stop_requested: bool) -> tuple[str, str | None, str | None]:
    """(status, reason, signal) for a launcher that exited with `code`, checked against the evidence."""
    tail, first_line = run.numbered_log_tail()
    status, reason, sig = describe_exit(code, tail, stop_requested=stop_requested, first_line=first_line)
    if status == "finished":
        end = read_evidence(run.events_path).end
        if end is not None and end.status == "stopped":  # saved and stopped when asked (#27)
            return "stopped", end.reason or "saved and stopped when asked", None
        why = trained_nothing(run, tail)
        if why:
            return "failed", why, None
        return status, reason, sig
    finished = finished_by_evidence(run)
    if finished is not None and trained_nothing(run, tail) is None:
        # the training had ended and saved its last checkpoint: a signal at the launcher's shutdown changes nothing
        how = f"killed by {sig}" if sig else f"exited with code {code}"
        return "finished", f"{finished}; the launcher was then {how} during its shutdown", None
    return status, reason, sig


def finished_by_evidence(run: RunFolder, evidence: Evidence | None = None) -> str | None:
    """'finished at step 12 of 12 (run_end, checkpoint-12 complete)' when the newest run_end says finished and
    the newest complete checkpoint is of its step, else None."""
    end = (evidence or read_evidence(run.events_path)).end
    if end is None or end.status != "finished" or end.step is None:
        return None
    checkpoint, _ = last_complete_checkpoint(run)
    if checkpoint is None or checkpoint.name != f"checkpoint-{end.step}":
        return None
    of = f" of {end.max_steps}" if end.max_steps else ""
    return f"finished at step {end.step}{of} (run_end, {checkpoint.name} complete)"


def last_complete_checkpoint(run: RunFolder) -> tuple[Path | None, list[str]]:
    """The newest usable checkpoint, and why each newer one is not."""
    choice = choose_resume_checkpoint(run.checkpoints(), run.world_size())
    return choice.checkpoint, [v.problem or "" for v in choice.skipped]


def judge_lost(run: RunFolder, state: RunState) -> tuple[str, str | None, str | None]:
    """No supervisor record and no process left: conclude only what the files prove."""
    tail, first_line = run.numbered_log_tail()
    if state.stop_requested:
        return "stopped", None, None
    evidence = read_evidence(run.events_path)
    checkpoint, skipped = last_complete_checkpoint(run)
    end = evidence.end
    finished = end is not None and end.status == "finished"
    if end is not None and end.status == "stopped" and checkpoint is not None:  # saved and stopped when asked
        return "stopped", f"{end.reason or 'saved and stopped when asked'} (the supervisor left no record)", None
    if end is not None and finished and checkpoint is not None:
        why = trained_nothing(run, tail, evidence)
        if why:
            return "failed", why, None
        return ("finished", f"the supervisor left no record; finished by the evidence: run_end at step "
                            f"{end.step} and {checkpoint.name} complete", None)
    status, reason, sig = describe_exit(1, tail, stop_requested=False, first_line=first_line)
    if reason and not reason.startswith("exited with code"):  # the log names a real error
        return "failed", f"{reason} (the supervisor left no record)", sig
    known = [f"last step {evidence.last_step}" if evidence.last_step is not None else "no step logged",
             f"last complete checkpoint {checkpoint.name}" if checkpoint else "no complete checkpoint", *skipped[:1]]
    if finished:
        known.insert(0, "run_end says finished but no complete checkpoint is on disk")
    return "unknown", ("lost: the supervisor and every process of the run are gone without recording how it "
                       f"ended; {'; '.join(known)}"), None
