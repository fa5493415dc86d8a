"""PyTorch's flight recorder for a run (#39): the variables the launch sets, where the dumps go, and how the
watchdog asks a rank for one. Stdlib only: the launch, the trainer (backend.plugin) and the watchdog import it.

    <run>/watch/flight_recorder/rank_<R>        torch's own dump on an NCCL watchdog timeout (pickle; read by
                                                torch.distributed.flight_recorder.fr_trace, GPU runs)
    <run>/watch/flight_recorder_asked/<R>       each rank's FIFO: a thread in the rank waits on it (whatever its main
                                                thread is blocked in) and dumps when the watchdog writes to it
    <run>/watch/flight_recorder_asked/rank_<R>.json   that dump (JSON; gloo and NCCL both record in PyTorch 2.13);
                                                a folder of its own, since torch's analyser reads every rank_* file

The names were read in the installed torch (2.13): TORCH_FR_BUFFER_SIZE (older TORCH_NCCL_TRACE_BUFFER_SIZE) and
TORCH_FR_DUMP_TEMP_FILE (older TORCH_NCCL_DEBUG_INFO_TEMP_FILE) in libtorch_cpu and distributed_c10d.py;
TORCH_NCCL_DUMP_ON_TIMEOUT is NCCL's (libtorch_cuda, not in a CPU build: its name is PyTorch's documented one).
"""

from __future__ import annotations

from pathlib import Path

BUFFER_ENTRIES = 2000  # per rank: PyTorch's documented advice for a trace buffer; a few hundred kB
DUMP_PREFIX = "rank_"


def flight_recorder_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "watch" / "flight_recorder"


def flight_recorder_env(run_dir: Path) -> dict[str, str]:
    """The launch's variables: record every rank's last collectives, dump them on an NCCL timeout into the run."""
    prefix = str(flight_recorder_dir(run_dir) / DUMP_PREFIX)
    return {"TORCH_FR_BUFFER_SIZE": str(BUFFER_ENTRIES), "TORCH_NCCL_TRACE_BUFFER_SIZE": str(BUFFER_ENTRIES),
            "TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "TORCH_FR_DUMP_TEMP_FILE": prefix,
            "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": prefix}


def asked_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "watch" / "flight_recorder_asked"


def ask_path(run_dir: Path, rank: int) -> Path:
    return asked_dir(run_dir) / str(rank)


def asked_dump_path(run_dir: Path, rank: int) -> Path:
    return asked_dir(run_dir) / f"{DUMP_PREFIX}{rank}.json"
