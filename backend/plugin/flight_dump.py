"""Inside each rank (loaded by workbench_callback.py): the flight recorder's dump when the watchdog asks (#39).

A daemon thread waits on the FIFO `<run>/watch/flight_recorder_asked/<rank>`; a write to it makes the thread dump
PyTorch's flight recorder (JSON, without C++ stacks: symbolising them takes seconds) to `rank_<rank>.json` beside it. A thread,
not a signal handler: Python runs handlers only in the main thread between bytecodes, and a rank stuck in a
collective is inside one C call. Nothing starts unless the launch turned the recorder on."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from backend.contract.flight_recorder import ask_path, asked_dump_path
from backend.core.fs import write_bytes_atomic


def start_dump_listener(run_dir: Path, rank: int) -> threading.Thread | None:
    if int(os.environ.get("TORCH_FR_BUFFER_SIZE", "0") or 0) <= 0:
        return None
    fifo = ask_path(run_dir, rank)
    try:
        fifo.parent.mkdir(parents=True, exist_ok=True)
        if fifo.exists() or fifo.is_symlink():
            fifo.unlink()
        os.mkfifo(fifo, 0o600)
    except OSError:  # a read-only run folder: no dumps on demand, training goes on
        return None
    thread = threading.Thread(target=_listen, args=(fifo, asked_dump_path(run_dir, rank)), daemon=True,
                              name="workbench-flight-recorder")
    thread.start()
    return thread


def _listen(fifo: Path, out: Path) -> None:
    import torch.distributed as dist
    from torch._C._distributed_c10d import _dump_fr_trace_json  # type: ignore[attr-defined]

    while True:
        try:
            with open(fifo, "rb") as asked:  # blocks until the watchdog opens it for writing
                asked.read(64)
            if dist.is_available() and dist.is_initialized():
                write_bytes_atomic(out, _dump_fr_trace_json(True, False))
        except Exception:  # never disturb training: the report says the dump is missing
            return
