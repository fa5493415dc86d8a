"""PyTorch's flight recorder at a hang (#39): ask every rank for its dump (backend.contract.flight_recorder), read
the dumps, and say the first collective where the ranks part and who is missing from it. torch's own dumps at an
NCCL watchdog timeout (pickles, GPU runs) go to torch's analyser (torch.distributed.flight_recorder.fr_trace) in a
child process: its analyser assumes NCCL's process-group records, which gloo's dumps lack (a KeyError on them in
torch 2.13), so the JSON dumps asked for here are read by this module."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.contract.flight_recorder import DUMP_PREFIX, ask_path, asked_dir, asked_dump_path, flight_recorder_dir


@dataclass
class FlightReport:
    lines: list[str] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)  # ranks that never issued the collective the others wait in

    def render(self) -> str:
        return "\n".join(["Flight recorder:", *(f"  {line}" for line in self.lines)])


def ask_dumps(run_dir: Path, ranks: list[int], wait: float = 5.0) -> dict[int, str]:
    """Ask each rank's listener for a dump; {rank: "dumped" / why not}, after at most `wait` seconds."""
    asked_at, status, waiting = time.time(), {}, []
    for rank in ranks:
        try:
            fd = os.open(ask_path(run_dir, rank), os.O_WRONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            status[rank] = "no flight recorder listener (the recorder is off for this run)"
            continue
        except OSError as err:
            status[rank] = ("its listener is not there (the process ended?)" if err.errno == errno.ENXIO
                            else f"could not ask: {err.strerror}")
            continue
        try:
            os.write(fd, b"dump\n")
            waiting.append(rank)
        finally:
            os.close(fd)
    deadline = time.monotonic() + wait
    while waiting and time.monotonic() < deadline:
        time.sleep(0.1)
        for rank in list(waiting):
            if _mtime(asked_dump_path(run_dir, rank)) >= asked_at:
                status[rank] = "dumped"
                waiting.remove(rank)
    status.update({rank: f"no dump within {wait:.0f} s" for rank in waiting})
    return status


def read_asked_dumps(run_dir: Path) -> dict[int, dict[str, Any]]:
    dumps = {}
    for path in sorted(asked_dir(run_dir).glob(f"{DUMP_PREFIX}*.json")):
        try:
            dumps[int(path.name[len(DUMP_PREFIX):-len(".json")])] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
    return dumps


def analyse(dumps: dict[int, dict[str, Any]]) -> FlightReport:
    """Per process group: each rank's last enqueued and completed collective; the ranks that enqueued fewer never
    issued the next one, which the others wait in (named with its op and sizes from a rank that issued it)."""
    report = FlightReport()
    groups = sorted({pg for dump in dumps.values() for pg in (dump.get("pg_status") or {})})
    for pg in groups:
        status = {rank: dump["pg_status"][pg] for rank, dump in sorted(dumps.items()) if pg in dump.get("pg_status", {})}
        enqueued = {rank: int(s.get("last_enqueued_collective", -1)) for rank, s in status.items()}
        completed = {rank: int(s.get("last_completed_collective", -1)) for rank, s in status.items()}
        top = max(enqueued.values())
        behind = sorted(rank for rank, n in enqueued.items() if n < top)
        cells = ", ".join(f"rank {r} {enqueued[r]}/{completed[r]}" for r in status)
        report.lines.append(f"process group {pg}: last enqueued/completed collective: {cells}")
        if behind:
            first = min(enqueued[r] for r in behind) + 1
            ahead = [r for r in status if enqueued[r] >= first]
            op = _entry(dumps[ahead[0]], pg, first)
            report.missing += [r for r in behind if r not in report.missing]
            report.lines.append(f"the ranks part at collective {first}{op}: {_ranks(behind)} never issued it; "
                                f"{_ranks(ahead)} did and {'waits' if len(ahead) == 1 else 'wait'} in it")
        elif top > max(completed.values()):
            report.lines.append(f"every rank issued collective {top}{_entry(next(iter(dumps.values())), pg, top)} "
                                "and none completed it: the collective itself is stuck, not a rank")
    if not groups:
        report.lines.append("the dumps hold no process group")
    return report


def torch_analysis(run_dir: Path, timeout: float = 120.0) -> str | None:
    """torch's analyser on torch's own dumps (an NCCL timeout on a GPU run), in a child; None without such dumps."""
    folder = flight_recorder_dir(run_dir)
    if not any(folder.glob(f"{DUMP_PREFIX}*")):
        return None
    argv = [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(folder), "--prefix", DUMP_PREFIX]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"torch's flight recorder analyser failed: {err}"
    text = (result.stdout + result.stderr).strip()
    return text[-8000:] if result.returncode == 0 else f"torch's flight recorder analyser failed:\n{text[-4000:]}"


def _entry(dump: dict[str, Any], pg: str, seq: int) -> str:
    """" (gloo:all_reduce, [[4]], scheduled)" for a collective of a dump, or "" when the dump does not hold it."""
    for entry in dump.get("entries") or []:
        if str(entry.get("pg_id")) == pg and entry.get("collective_seq_id") == seq and not entry.get("is_p2p"):
            return f" ({entry.get('profiling_name')}, sizes {entry.get('input_sizes')}, {entry.get('state')})"
    return ""


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
