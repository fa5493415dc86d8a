"""The hang report (#39): every rank's place (its progress record), the call its training thread is in (its
stack), grouped ("ranks 0-6 wait in all_reduce in step 7219; rank 7 is in the data loader in step 7218"), the
lagging rank named and why, and the NCCL watchdog's lines lined up. Written into the run folder
(`<run>/watch/hang-report.txt`, the latest hang); its one-line summary goes with the alert."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.contract.heartbeat import RankProgress
from backend.core.fs import write_text_atomic
from backend.hang.flight_recorder import FlightReport
from backend.hang.nccl_log import WatchdogTable
from backend.hang.stack_text import Call, call_of

REPORT_NAME = "hang-report.txt"


@dataclass
class RankPlace:
    rank: int
    pid: int | None
    place: str  # "in step 7", "after step 6"; "unknown" without a progress record
    step: int | None
    quiet_seconds: float | None  # since its last sign of life
    call: Call
    stack: str


@dataclass
class HangReport:
    ranks: list[RankPlace]
    lagging: list[int]
    why: str
    groups: list[str]
    tables: list[WatchdogTable] = field(default_factory=list)
    others: dict[str, str] = field(default_factory=dict)  # pid -> stack of the run's processes that are no rank
    flight: FlightReport | None = None

    def summary(self) -> str:
        """One line for the alert, the monitor and the webhook: who lags, then the groups."""
        if not self.ranks and not self.tables and self.flight is None:
            return ""  # nothing by rank to say (a run older than the rank records): the alert stays as it was
        said = "; ".join(self.groups) if self.groups else "no rank reported its progress"
        return f"{self.why} {said}." if self.why else f"{said}."

    def evidence(self) -> dict[str, Any]:
        return {"summary": self.summary(), "lagging_ranks": self.lagging,
                "ranks": [{"rank": r.rank, "pid": r.pid, "place": r.place, "step": r.step,
                           "quiet_seconds": r.quiet_seconds, "call": r.call.describe(),
                           "waiting": r.call.waiting} for r in self.ranks],
                "nccl": [{"pg": t.pg, "lagging": t.lagging, "why": t.why} for t in self.tables],
                "flight_recorder": self.flight.lines if self.flight else None}

    def render(self, title: str) -> str:
        lines = [title, "", self.summary(), ""]
        lines.append(f"  {'rank':>4}  {'pid':>8}  {'place':<24}{'quiet':>8}  call")
        for r in self.ranks:
            quiet = "" if r.quiet_seconds is None else f"{r.quiet_seconds:.0f} s"
            lines.append(f"  {r.rank:>4}  {r.pid or '':>8}  {r.place:<24}{quiet:>8}  {_one(r.call.describe(one=True))}")
        if self.flight is not None:
            lines += ["", self.flight.render()]
        for table in self.tables:
            lines += ["", table.render()]
        for r in self.ranks:
            lines += ["", f"--- rank {r.rank} (pid {r.pid}) ---", r.stack.rstrip() or "(no stack)"]
        for pid, stack in self.others.items():
            lines += ["", f"--- pid {pid} (the launcher, not a rank) ---", stack.rstrip() or "(no stack)"]
        return "\n".join(lines) + "\n"


def build_report(progress: dict[int, RankProgress], stacks: dict[str, str], tables: list[WatchdogTable],
                 now: float | None = None, flight: FlightReport | None = None) -> HangReport:
    now = time.time() if now is None else now
    by_pid = {str(p.pid): p for p in progress.values()}
    ranks = [RankPlace(p.rank, p.pid, p.place(), p.step, round(now - p.time, 1),
                       call_of(stacks.get(str(p.pid), "no stack: the process was not found")),
                       stacks.get(str(p.pid), "")) for p in sorted(progress.values(), key=lambda p: p.rank)]
    others = {pid: text for pid, text in stacks.items() if pid not in by_pid}
    lagging, why = _lagging(ranks, tables, flight)
    return HangReport(ranks, lagging, why, _groups(ranks), tables, others, flight)


def write_report(run_dir: Path, report: HangReport, title: str) -> Path:
    path = Path(run_dir) / "watch" / REPORT_NAME
    write_text_atomic(path, report.render(title))
    return path


def _groups(ranks: list[RankPlace]) -> list[str]:
    """"ranks 0-6 wait in all_reduce (...) in step 7219", one per (call, place), the largest group first."""
    grouped: dict[tuple[str, str], list[RankPlace]] = {}
    for r in ranks:
        grouped.setdefault((r.call.describe(), r.place), []).append(r)
    ordered = sorted(grouped.values(), key=lambda members: (-len(members), members[0].rank))
    return [f"{rank_list([m.rank for m in members])} {members[0].call.describe(one=len(members) == 1)}, "
            f"{members[0].place}" for members in ordered]


def _lagging(ranks: list[RankPlace], tables: list[WatchdogTable],
             flight: FlightReport | None) -> tuple[list[int], str]:
    """Who the others wait for, from the strongest evidence: a rank behind in steps, a rank outside any
    collective while others wait in one, a rank the NCCL watchdog's lines show behind."""
    if not ranks and not tables:
        return [], "No rank wrote its progress record and no NCCL watchdog line was found: the lagging rank is unknown."
    if len(ranks) == 1 and not tables:
        return [], ""  # one rank: where it is is the whole story
    steps = {r.rank: r.step for r in ranks if r.step is not None}
    if steps and len(set(steps.values())) > 1:
        low = min(steps.values())
        behind = [k for k, s in steps.items() if s == low]
        return behind, (f"Lagging: {rank_list(behind)}, at step {low} while the others reached step "
                        f"{max(steps.values())}.")
    waiting = [r.rank for r in ranks if r.call.waiting]
    working = [r.rank for r in ranks if not r.call.waiting and r.call.kind != "none"]
    if waiting and working:
        return working, (f"Lagging: {rank_list(working)}, not in a collective while {rank_list(waiting)} "
                         f"{'waits' if len(waiting) == 1 else 'wait'} in one.")
    if flight is not None and flight.missing:
        return flight.missing, f"Lagging: {rank_list(flight.missing)}, by the flight recorder (below)."
    named = sorted({k for t in tables for k in t.lagging})
    if named:
        return named, f"Lagging: {rank_list(named)}, by the NCCL watchdog's lines (below)."
    if waiting and len(waiting) == len(ranks):
        return [], ("Every rank waits in a collective: none is visibly behind; the flight recorder's dump or the "
                    "NCCL watchdog's lines say which collective they part at.")
    return [], "No rank is visibly behind the others (same step, same kind of call)."


def rank_list(ranks: list[int]) -> str:
    """[0, 1, 2, 3, 5] -> "ranks 0-3, 5"; [4] -> "rank 4"."""
    spans: list[list[int]] = []
    for k in sorted(ranks):
        if spans and k == spans[-1][-1] + 1:
            spans[-1].append(k)
        else:
            spans.append([k])
    text = ", ".join(str(s[0]) if len(s) == 1 else f"{s[0]}-{s[-1]}" for s in spans)
    return f"{_rank_word(ranks)} {text}"


def _rank_word(ranks: list[int]) -> str:
    return "rank" if len(ranks) == 1 else "ranks"


def _one(text: str) -> str:
    return text.replace("\n", " ")
