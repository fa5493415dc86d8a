"""A verdict applied: the run's profile with the verdict's change, written beside the run's own profile and queued as
a new run; once that run has steps, the doctor compares the two (same model and data: time per real token, padding,
data wait, MFU) and says what the change really gained. The pairs are kept in the first run's `doctor-applied.json`."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.core.fs import write_text_atomic
from backend.doctor.report import Diagnosis, diagnose
from backend.doctor.verdicts import Verdict
from backend.profile import LaunchProfile, save_profile
from backend.queue.add import add_profiles
from backend.queue.keeper import ensure_keeper
from backend.queue.store import read_queue
from backend.rundir.layout import RunFolder
from backend.rundir.world import launch_base_dir

APPLIED_FILE = "doctor-applied.json"


class ApplyRefused(ValueError):
    """The verdict cannot be applied (said to the user as is)."""


@dataclass(frozen=True)
class Applied:
    verdict: Verdict
    profile_file: Path
    entry_id: str


def changed_profile(profile: LaunchProfile, change: dict[str, Any]) -> LaunchProfile:
    """The profile with the dotted keys set ("training.dataloader_num_workers", "extra_swift_args.packing")."""
    data = profile.model_dump()
    for dotted, value in change.items():
        *tables, key = dotted.split(".")
        table = data
        for name in tables:
            table = table.setdefault(name, {})
        table[key] = value
    return LaunchProfile.model_validate(data)


def apply_verdict(run: RunFolder, diagnosis: Diagnosis, number: int) -> Applied:
    """Write the changed profile beside the run's (`profile.doctor-<verdict>.toml`, the run's file's layout kept)
    and queue it; ApplyRefused when there is no such verdict."""
    choices = diagnosis.applicable()
    if not 1 <= number <= len(choices):
        have = f"1 to {len(choices)}" if choices else "none with a profile change"
        raise ApplyRefused(f"--apply {number}: the doctor's verdicts on run {run.run_id} that change the profile "
                           f"are numbered {have}")
    verdict = choices[number - 1]
    profile = changed_profile(run.read_profile(), verdict.change)
    target = run.path / f"profile.doctor-{verdict.code}.toml"
    save_profile(profile, target, layout=run.profile_path)
    base_dir = launch_base_dir(run.world_path) or run.path
    entry = add_profiles([(profile, base_dir)])[0]
    ensure_keeper()
    _record(run, {"verdict": verdict.code, "change": verdict.change, "profile": str(target), "entry": entry.id,
                  "time": time.time()})
    return Applied(verdict, target, entry.id)


def applied_records(run: RunFolder) -> list[dict[str, Any]]:
    try:
        records = json.loads((run.path / APPLIED_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return []
    return [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []


def _record(run: RunFolder, record: dict[str, Any]) -> None:
    write_text_atomic(run.path / APPLIED_FILE, json.dumps([*applied_records(run), record], indent=1))


def comparisons(run: RunFolder, before: Diagnosis) -> list[str]:
    """One paragraph per applied verdict: where its run is, and once it has steps, what the change gained."""
    records = applied_records(run)
    if not records:
        return []
    entries = {e.id: e for e in read_queue().entries}
    out = ["  applied:"]
    for record in records:
        entry = entries.get(str(record.get("entry")))
        change = ", ".join(f"{k} = {json.dumps(v)}" for k, v in (record.get("change") or {}).items())
        head = f"    {record.get('verdict')} ({change}) as queue entry {record.get('entry')}"
        if entry is None or not entry.run_dir:
            out.append(f"{head}: {entry.state if entry else 'no longer in the queue'}, not run yet")
            continue
        after = diagnose(RunFolder(entry.run_dir))
        out.append(f"{head} -> run {after.run_id} ({entry.outcome or entry.state})")
        out += [f"      {line}" for line in compare(before, after)]
    return out


def per_real_token(diagnosis: Diagnosis) -> float | None:
    lead = diagnosis.lead
    return lead.wall / lead.real_tokens if lead and lead.real_tokens else None


def compare(before: Diagnosis, after: Diagnosis) -> list[str]:
    """What the change gained: run A vs run B, time per real token over the whole loop (stalls included)."""
    a, b = per_real_token(before), per_real_token(after)
    if a is None or b is None:
        return [f"run {after.run_id} has no timed steps yet"]
    lines = [f"time per real token: {a * 1e3:.3f} ms (run {before.run_id}) -> {b * 1e3:.3f} ms (run {after.run_id})"
             f", {a / b - 1:+.0%} real tokens per second",
             f"real tokens: {before.measured.real_tokens:,} -> {after.measured.real_tokens:,}"
             + ("" if before.measured.real_tokens == after.measured.real_tokens else " (not the same work: compare "
                                                                                       "per token)"),
             f"padding: {before.measured.padding_share or 0:.1%} -> {after.measured.padding_share or 0:.1%}; "
             f"waiting for data: {before.measured.share('data_wait'):.1%} -> {after.measured.share('data_wait'):.1%}"]
    mfu_a, mfu_b = before.mfu()[0], after.mfu()[0]
    if mfu_a is not None and mfu_b is not None:
        lines.append(f"MFU: {mfu_a:.1%} -> {mfu_b:.1%}")
    return lines
