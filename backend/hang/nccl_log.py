"""The NCCL watchdog's own words, lined up (#39): its "last enqueued / last completed work" and timeout lines
from every rank's log, as one table per process group that names the rank that never issued the collective
the others wait in (ms-swift#10183: rank 3 enqueued 7220 and completed 7218, rank 2 enqueued only 7219).

The lines as PyTorch 2.x writes them (ProcessGroupNCCL.cpp), each possibly behind a `[rankN]:` prefix:
    [PG ID 0 PG GUID 0(default_pg) Rank 3] Timeout at NCCL work: 7220, last enqueued NCCL work: 7220, last completed NCCL work: 7218.
    [PG 1 Rank 0] Timeout at NCCL work: 7753, last enqueued NCCL work: 7755, last completed NCCL work: 7752.
    [PG ID 1 PG GUID 1 Rank 2]  failure detected by watchdog at work sequence id: 137429 PG status: last enqueued work: 137429, last completed work: 137428
    [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7220, OpType=BROADCAST, ..., Timeout(ms)=1800000) ran for 1800002 milliseconds before timing out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_PG = (r"\[PG(?: ID)? (?P<pg>\d+)(?: PG GUID \d*(?:\((?P<guid_name>[^)]*)\))?| \((?P<name>[^)]*)\))?"
       r"\s+Rank (?P<rank>\d+)\]")
_STATUS = re.compile(_PG + r".*?(?:at (?:NCCL )?work(?: sequence id)?:?\s*(?P<at>-?\d+))?[^\d-]*?"
                     r"last enqueued (?:NCCL )?work: (?P<enqueued>-?\d+), last completed (?:NCCL )?work: "
                     r"(?P<completed>-?\d+)")
_TIMEOUT = re.compile(r"\[Rank (?P<rank>\d+)\] Watchdog caught collective operation timeout: WorkNCCL\("
                      r"SeqNum=(?P<seq>\d+), OpType=(?P<op>[A-Z_]+).*?Timeout\(ms\)=(?P<timeout>\d+)\) "
                      r"ran for (?P<ran>\d+) milliseconds")


@dataclass
class WatchdogRow:
    """One rank's NCCL watchdog report in one process group."""

    pg: str
    rank: int
    enqueued: int
    completed: int
    timed_out_at: int | None = None
    op: str | None = None
    timeout_ms: int | None = None
    ran_ms: int | None = None


@dataclass
class WatchdogTable:
    pg: str
    rows: list[WatchdogRow] = field(default_factory=list)
    lagging: list[int] = field(default_factory=list)
    why: str = ""

    def render(self) -> str:
        lines = [f"NCCL watchdog, process group {self.pg}:",
                 f"  {'rank':>4}  {'op':<16}{'timed out at':>13}  {'last enqueued':>13}  {'last completed':>14}"]
        for row in self.rows:
            at = "" if row.timed_out_at is None else str(row.timed_out_at)
            lines.append(f"  {row.rank:>4}  {row.op or '':<16}{at:>13}  {row.enqueued:>13}  {row.completed:>14}")
        lines.append(f"  {self.why}")
        return "\n".join(lines)


def parse_watchdog_lines(text: str) -> list[WatchdogRow]:
    """Every rank's last status line per process group (a later line of the same rank and group wins)."""
    rows: dict[tuple[str, int], WatchdogRow] = {}
    ops: dict[tuple[int, int], tuple[str, int, int]] = {}  # (rank, seq) -> op type, timeout, ran for
    names: dict[str, str] = {}  # process group id -> its name (default_pg), where a line says it
    for line in text.splitlines():
        timeout = _TIMEOUT.search(line)
        if timeout:
            ops[(int(timeout["rank"]), int(timeout["seq"]))] = (timeout["op"], int(timeout["timeout"]),
                                                                int(timeout["ran"]))
        status = _STATUS.search(line)
        if status:
            pg = status["pg"]
            names[pg] = status["name"] or status["guid_name"] or names.get(pg, "")
            row = WatchdogRow(pg, int(status["rank"]), int(status["enqueued"]), int(status["completed"]),
                              int(status["at"]) if status["at"] is not None else None)
            rows[(pg, row.rank)] = row
    for row in rows.values():
        row.pg = f"{row.pg} ({names[row.pg]})" if names.get(row.pg) else row.pg
        op = ops.get((row.rank, row.timed_out_at if row.timed_out_at is not None else row.completed + 1))
        if op:
            row.op, row.timeout_ms, row.ran_ms = op
    return sorted(rows.values(), key=lambda r: (r.pg, r.rank))


def watchdog_tables(text: str, world_size: int | None = None) -> list[WatchdogTable]:
    """One table per process group, its lagging ranks named: those that enqueued fewer collectives than the
    others (they never issued the one the others wait in), and those of the world that wrote no line."""
    groups: dict[str, list[WatchdogRow]] = {}
    for row in parse_watchdog_lines(text):
        groups.setdefault(row.pg, []).append(row)
    return [_judge(WatchdogTable(pg, rows), world_size) for pg, rows in groups.items()]


def _judge(table: WatchdogTable, world_size: int | None) -> WatchdogTable:
    top = max(r.enqueued for r in table.rows)
    behind = [r for r in table.rows if r.enqueued < top]
    # the default group (0) holds every rank of the world; a subgroup's members are not known from its lines
    everyone = world_size if world_size and table.pg.split()[0] == "0" else None
    silent = sorted(set(range(everyone)) - {r.rank for r in table.rows}) if everyone else []
    parts = []
    if behind:
        low = min(r.enqueued for r in behind)
        table.lagging = [r.rank for r in behind]
        others = [r.rank for r in table.rows if r.enqueued == top]
        parts.append(f"lagging: {_ranks(table.lagging)} never issued collective {low + 1} (last enqueued {low}); "
                     f"{_ranks(others)} did (last enqueued {top}) and {'waits' if len(others) == 1 else 'wait'} for it")
    if silent:
        table.lagging += silent
        parts.append(f"{_ranks(silent)} of the {world_size} wrote no watchdog line (the process may have died "
                     "first, or its log is not here)")
    if not parts:
        parts.append(f"every rank enqueued {top} and none completed it: no rank is behind in issuing "
                     "collectives; the collective itself is stuck (the network, NCCL, or a GPU)")
    table.why = "; ".join(parts)
    return table


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))
