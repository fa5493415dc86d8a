"""backend/rundir/diagnose.py against made-up logs, one per pattern, with the expected text written by
hand (never computed by the code under test)."""

from __future__ import annotations

import pytest

from backend.rundir.diagnose import Diagnosis, describe_exit, diagnose_log

ACCELERATE_WRAPPER = (
    "Traceback (most recent call last):\n"
    '  File "/venv/bin/accelerate", line 8, in <module>\n'
    "subprocess.CalledProcessError: Command '['/venv/bin/python', '-m', 'swift.cli.sft']' returned non-zero "
    "exit status 1.\n")


@pytest.mark.parametrize("log, kind, line, summary, number", [
    ("step 3\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
     "oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "CUDA out of memory", 2),
    ("{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-4}\n",
     "nan", "{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-4}", "the loss became NaN", 1),
    ("a\nb\nRuntimeError: Expected to mark a variable ready only once. This error is caused by ...\n",
     "ddp_reentrant", "RuntimeError: Expected to mark a variable ready only once. This error is caused by ...",
     "DDP and reentrant gradient checkpointing clash", 3),
    ("[W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in "
     "use).\n", "port_in_use", "[W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29500 "
     "(errno: 98 - Address already in use).", "the rendezvous port is taken", 1),
    ("saving\nOSError: [Errno 28] No space left on device\n", "disk_full",
     "OSError: [Errno 28] No space left on device", "the disk is full", 2),
    ("usage: sft.py [-h] [--system SYSTEM]\nsft.py: error: argument --system: expected one argument\n",
     "bad_argument", "sft.py: error: argument --system: expected one argument", "swift rejected an argument", 2),
    ("requests.exceptions.ReadTimeout: HTTPSConnectionPool(host='huggingface.co', port=443): Read timed out.\n",
     "hub", "requests.exceptions.ReadTimeout: HTTPSConnectionPool(host='huggingface.co', port=443): Read timed out.",
     "the model hub could not be reached", 1),
    ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1275, unhandled system error\n",
     "nccl", "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1275, unhandled system error",
     "NCCL (the GPUs' communication) failed", 1),
    ("RuntimeError: CUDA error: an illegal memory access was encountered\n", "cuda",
     "RuntimeError: CUDA error: an illegal memory access was encountered", "a CUDA error", 1),
    ("torch.distributed.elastic.multiprocessing.api: failed (exitcode: -9) local_rank: 0 (pid: 4242)\n", "signal",
     "torch.distributed.elastic.multiprocessing.api: failed (exitcode: -9) local_rank: 0 (pid: 4242)",
     "a training process was killed by a signal", 1),
])
def test_each_pattern_on_its_own_made_up_log(log: str, kind: str, line: str, summary: str, number: int) -> None:
    found = diagnose_log(log)
    assert [(d.kind, d.line, d.summary, d.line_number) for d in found] == [(kind, line, summary, number)]


def test_the_real_exception_not_the_launchers_wrapper() -> None:
    log = ("Traceback (most recent call last):\n"
           '  File "/venv/lib/python3.11/site-packages/swift/llm/dataset/loader.py", line 12, in load\n'
           "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe9 in position 7: invalid continuation byte\n"
           + ACCELERATE_WRAPPER)
    assert diagnose_log(log) == [Diagnosis(
        "exception", "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe9 in position 7: invalid continuation byte",
        "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe9 in position 7: invalid continuation byte",
        "Read the traceback above this line in the log.", 3)]


def test_line_numbers_count_from_the_start_of_the_log_file() -> None:
    assert diagnose_log("x\nOSError: [Errno 28] No space left on device\n", first_line=101)[0].line_number == 102


def test_a_progress_bar_is_one_line_of_the_file() -> None:
    """tqdm redraws its bar with carriage returns: one line of the file, which `splitlines()` made three."""
    log = ("loading\n"
           " 10%|#         | 1/10 [00:01<00:09]\r 20%|##        | 2/10 [00:02<00:08]\r 30%|###       | 3/10\n"
           "Traceback (most recent call last):\r\n"
           '  File "x", line 1\n'
           "RuntimeError: CUDA error: an illegal memory access was encountered\n" + ACCELERATE_WRAPPER)
    assert describe_exit(1, log, stop_requested=False, first_line=41) == (
        "failed", "a CUDA error: RuntimeError: CUDA error: an illegal memory access was encountered (output.log line 45)",
        None)


@pytest.mark.parametrize("code, log, expected", [
    (1, "loading\nOSError: [Errno 28] No space left on device\n" + ACCELERATE_WRAPPER,
     ("failed", "the disk is full: OSError: [Errno 28] No space left on device (output.log line 2)", None)),
    (2, "usage: sft.py [-h]\nsft.py: error: argument --system: expected one argument\n" + ACCELERATE_WRAPPER,
     ("failed", "swift rejected an argument: sft.py: error: argument --system: expected one argument "
                "(output.log line 2)", None)),
    (1, "Traceback (most recent call last):\n  File \"x\", line 1\nKeyError: 'messages'\n" + ACCELERATE_WRAPPER,
     ("failed", "KeyError: 'messages' (output.log line 3)", None)),
    (1, "Traceback (most recent call last):\n" + ACCELERATE_WRAPPER.split("\n", 1)[1],
     ("failed", "subprocess.CalledProcessError: Command '['/venv/bin/python', '-m', 'swift.cli.sft']' returned "
                "non-zero exit status 1. (output.log line 3)", None)),
    (-9, "step 40\n", ("failed", "killed by SIGKILL (nobody asked it to stop: often the kernel's OOM killer)",
                       "SIGKILL")),
    (1, "torch.distributed.elastic.multiprocessing.api: failed (exitcode: -9) local_rank: 0\n",
     ("failed", "killed by SIGKILL (nobody asked it to stop: often the kernel's OOM killer)", "SIGKILL")),
    (-2, "step 40\n", ("stopped", None, "SIGINT")),
    (0, "done\n", ("finished", None, None)),
    (3, "nothing useful\n", ("failed", "exited with code 3", None)),
])
def test_describe_exit_names_the_real_error_line(code: int, log: str, expected: tuple) -> None:
    assert describe_exit(code, log, stop_requested=code == -2) == expected
