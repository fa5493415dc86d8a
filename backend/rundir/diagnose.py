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
    kind: str  # oom | disk_full | nan | ddp_reentrant | port_in_use | bad_argument | hub | nccl | cuda | signal | exception
    line: str  # the log line that shows it
    summary: str  # one line for the user
    suggestion: str
    line_number: int | None = None  # 1-based, in the text given (or the log file, with first_line)


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
    _Pattern("disk_full", re.compile(r"No space left on device|ENOSPC|Disk quota exceeded"),
             "the disk is full",
             "Free space where the run writes (its folder and output_dir), or lower save_total_limit."),
    _Pattern("bad_argument", re.compile(r"^[\w.-]+: error: .*|error: (?:argument |unrecognized arguments)"),
             "swift rejected an argument",
             "Check the value named in the line against `workbench schema --swift`; a value starting with "
             "'-' is read as a flag."),
    _Pattern("hub", re.compile(r"ReadTimeout|ConnectTimeout|Max retries exceeded|Temporary failure in name "
                               r"resolution|LocalEntryNotFoundError|couldn't connect to '?https?://"),
             "the model hub could not be reached",
             "Use a model and dataset already on disk (local folder or cache), or set HF_ENDPOINT / "
             "HF_HUB_OFFLINE=1 as your site needs."),
    _Pattern("nccl", re.compile(r"NCCL error|ncclInternalError|ncclSystemError|ncclUnhandledCudaError|NCCL timeout"),
             "NCCL (the GPUs' communication) failed",
             "Run with NCCL_DEBUG=INFO; check that every GPU is visible and the network interface "
             "(NCCL_SOCKET_IFNAME) is right."),
    _Pattern("cuda", re.compile(r"CUDA error: .*|CUDA driver version is insufficient"),
             "a CUDA error",
             "Rerun with CUDA_LAUNCH_BLOCKING=1 to see the failing operation; check the driver with nvidia-smi."),
    _Pattern("signal", re.compile(r"died with <Signals\.(SIG\w+)|exitcode\s*:\s*-(\d+)|Signal (\d+) \((SIG\w+)\)"),
             "a training process was killed by a signal",
             "If nobody stopped it, SIGKILL usually means the kernel's OOM killer: host RAM ran out "
             "(lower batch size, dataloader_num_workers, or turn off cpu offload)."),
]
EXCEPTION_LINE = re.compile(r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt)\b:?.*$")
# exceptions that only wrap the real one, raised by launchers around a failed child
WRAPPER_EXCEPTIONS = re.compile(r"CalledProcessError|ChildFailedError|SystemExit")


def diagnose_log(text: str, first_line: int = 1) -> list[Diagnosis]:
    """Every recognised problem in a log text, in the order they appear (last one wins).
    `first_line` is the number of the text's first line in the log file."""
    found: list[tuple[int, Diagnosis]] = []
    lines = [_shown(line) for line in text.split("\n")]  # "\n" only: the file's line numbers count these
    for number, line in enumerate(lines):
        for pattern in PATTERNS:
            match = pattern.regex.search(line)
            if match:
                found.append((number, Diagnosis(pattern.kind, _excerpt(line, match.start(), match.end()),
                                                pattern.summary, pattern.suggestion, first_line + number)))
                break
    if "Traceback (most recent call last)" in text:
        exceptions = [n for n, ln in enumerate(lines) if EXCEPTION_LINE.match(ln)]
        real = [n for n in exceptions if not WRAPPER_EXCEPTIONS.search(lines[n])]
        chosen = (real or exceptions)[-1:]
        for number in chosen:
            last = lines[number]
            line = _excerpt(last, 0, len(last.split(":")[0]) + 1)
            found.append((number, Diagnosis("exception", line, line, "Read the traceback above this line in the log.",
                                            first_line + number)))
    found.sort(key=lambda item: item[0])
    return [diagnosis for _, diagnosis in found]


def _shown(line: str) -> str:
    """What a terminal shows of a line: after its last carriage return (a progress bar redraws itself
    with "\r" on one line of the file), a CRLF's "\r" dropped."""
    return line.rstrip("\r").rsplit("\r", 1)[-1]


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


def _where(diagnosis: Diagnosis, log_name: str) -> str:
    return f" ({log_name} line {diagnosis.line_number})" if diagnosis.line_number else ""


def describe_exit(code: int, log_tail: str, stop_requested: bool, first_line: int = 1,
                  log_name: str = "output.log") -> tuple[str, str | None, str | None]:
    """(status, failure reason, signal name) for a launcher that exited with `code`.
    The reason is the real error line of the log (with its line number), not a launcher's wrapper."""
    if stop_requested:
        return "stopped", None, _signal_name(-code) if code < 0 else None
    if code == 0:
        return "finished", None, None
    sig = _signal_name(-code) if code < 0 else None
    diagnoses = diagnose_log(log_tail, first_line)
    signalled = next((d for d in reversed(diagnoses) if d.kind == "signal"), None)
    if sig is None and signalled is not None:
        match = next(p for p in PATTERNS if p.kind == "signal").regex.search(signalled.line)
        if match:
            name = match.group(1) or match.group(4)
            sig = name or _signal_name(int(match.group(2) or match.group(3)))
    specific = next((d for d in reversed(diagnoses) if d.kind not in ("signal", "exception")), None)
    if specific is not None:
        return "failed", f"{specific.summary}: {specific.line}{_where(specific, log_name)}", sig
    if sig is not None:
        hint = " (nobody asked it to stop: often the kernel's OOM killer)" if sig == "SIGKILL" else ""
        return "failed", f"killed by {sig}{hint}", sig
    exception = next((d for d in reversed(diagnoses) if d.kind == "exception"), None)
    if exception is not None:
        return "failed", f"{exception.line}{_where(exception, log_name)}", None
    return "failed", f"exited with code {code}", None
