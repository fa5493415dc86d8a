"""Read a training log like an experienced user would: what went wrong, and what to do.

Used for a run's failure reason (state.json) and by the monitor to pick errors out of the
log tail. Pure text matching, no imports beyond the stdlib.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass


@dataclass(frozen=True)
class Diagnosis:
    kind: str  # oom | host_oom | nan | ddp_reentrant | port_in_use | signal | exception
    line: str  # the log line that shows it
    summary: str  # one line for the user
    suggestion: str


@dataclass(frozen=True)
class _Pattern:
    kind: str
    regex: re.Pattern[str]
    summary: str
    suggestion: str


PATTERNS = [
    _Pattern("oom", re.compile(r"CUDA out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED"),
             "CUDA out of memory",
             "Lower per_device_train_batch_size or max_length, turn on gradient_checkpointing, "
             "or shard/offload (FSDP FULL_SHARD + cpu_offload, ZeRO-3) or use QLoRA."),
    # only the loss: a NaN/inf gradient norm is also what an fp16 step skipped by the scaler logs
    _Pattern("nan", re.compile(r"(?i)loss[\"']?\s*[:=]\s*[\"']?nan|nan loss|Loss is NaN"),
             "the loss became NaN",
             "Lower learning_rate, add warmup, use bf16 instead of fp16, or check the data for empty rows."),
    _Pattern("ddp_reentrant", re.compile(r"Expected to mark a variable ready only once"),
             "DDP and reentrant gradient checkpointing clash",
             "Set training.gradient_checkpointing_use_reentrant = false, or use DeepSpeed."),
    _Pattern("port_in_use", re.compile(r"Address already in use|EADDRINUSE"),
             "the rendezvous port is taken",
             "Choose another distribution.main_process_port, or stop the run that holds it."),
    _Pattern("signal", re.compile(r"died with <Signals\.(SIG\w+)|exitcode\s*:\s*-(\d+)|Signal (\d+) \((SIG\w+)\)"),
             "a training process was killed by a signal",
             "If nobody stopped it, SIGKILL usually means the kernel's OOM killer: host RAM ran out "
             "(lower batch size, dataloader_num_workers, or turn off cpu offload)."),
]
EXCEPTION_LINE = re.compile(r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt)\b:?.*$")


def diagnose_log(text: str) -> list[Diagnosis]:
    """Every recognised problem in a log text, in the order they appear (last one wins)."""
    found: list[tuple[int, Diagnosis]] = []
    lines = text.splitlines()
    for number, line in enumerate(lines):
        for pattern in PATTERNS:
            match = pattern.regex.search(line)
            if match:
                found.append((number, Diagnosis(pattern.kind, _excerpt(line, match.start(), match.end()),
                                                pattern.summary, pattern.suggestion)))
                break
    if "Traceback (most recent call last)" in text:
        last = next((ln for ln in reversed(lines) if EXCEPTION_LINE.match(ln)), None)
        if last:
            line = _excerpt(last, 0, len(last.split(":")[0]) + 1)
            found.append((lines.index(last), Diagnosis("exception", line, line,
                                                       "Read the traceback above this line in the log.")))
    found.sort(key=lambda item: item[0])
    return [diagnosis for _, diagnosis in found]


def _excerpt(line: str, start: int, end: int, width: int = 240) -> str:
    """The line, shortened around [start, end) when it is long (a command line can be 2 kB),
    keeping its start and the part that matched."""
    line = line.strip()
    if len(line) <= width:
        return line
    head = line[: width // 3]
    tail_start = max(start - width // 3, len(head))
    return f"{head} … {line[tail_start:end + width // 3]}".rstrip()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def describe_exit(code: int, log_tail: str, stop_requested: bool) -> tuple[str, str | None, str | None]:
    """(status, failure reason, signal name) for a launcher that exited with `code`."""
    if stop_requested:
        return "stopped", None, _signal_name(-code) if code < 0 else None
    if code == 0:
        return "finished", None, None
    sig = _signal_name(-code) if code < 0 else None
    diagnoses = diagnose_log(log_tail)
    signalled = next((d for d in reversed(diagnoses) if d.kind == "signal"), None)
    if sig is None and signalled is not None:
        match = PATTERNS[-1].regex.search(signalled.line)
        if match:
            name = match.group(1) or match.group(4)
            sig = name or _signal_name(int(match.group(2) or match.group(3)))
    specific = next((d for d in reversed(diagnoses) if d.kind not in ("signal", "exception")), None)
    if specific is not None:
        return "failed", f"{specific.summary}: {specific.line}", sig
    if sig is not None:
        hint = " (nobody asked it to stop: often the kernel's OOM killer)" if sig == "SIGKILL" else ""
        return "failed", f"killed by {sig}{hint}", sig
    exception = next((d for d in reversed(diagnoses) if d.kind == "exception"), None)
    if exception is not None:
        return "failed", exception.line, None
    return "failed", f"exited with code {code}", None
