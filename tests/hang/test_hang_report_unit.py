"""The hang report from hand-written evidence: progress records and stack dumps (faulthandler's and py-spy's
text) grouped by rank, the lagging rank named and why."""

from __future__ import annotations

from backend.contract.heartbeat import RankProgress
from backend.hang.nccl_log import watchdog_tables
from backend.hang.report import build_report, rank_list
from backend.hang.stack_text import call_of

SITE = "/opt/venv/lib/python3.11/site-packages"

WAITING_IN_BACKWARD = f"""\
Thread 0x00007f3a1c7fe640 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 324 in wait
  File "{SITE}/tqdm/_monitor.py", line 60 in run
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Current thread 0x00007f3a2a1b4740 (most recent call first):
  File "{SITE}/torch/autograd/graph.py", line 829 in _engine_run_backward
  File "{SITE}/torch/autograd/__init__.py", line 347 in backward
  File "{SITE}/torch/_tensor.py", line 648 in backward
  File "{SITE}/accelerate/accelerator.py", line 2734 in backward
  File "{SITE}/transformers/trainer.py", line 4020 in training_step
  File "{SITE}/transformers/trainer.py", line 2530 in _inner_training_loop
  File "{SITE}/transformers/trainer.py", line 2245 in train
"""

SLEEPING_IN_THE_LOSS = f"""\
Current thread 0x00007f11aa1b4740 (most recent call first):
  File "/src/backend/plugin/fault_hooks.py", line 36 in injected_hang
  File "/src/backend/plugin/fault_hooks.py", line 71 in hanging_loss
  File "{SITE}/transformers/trainer.py", line 3990 in training_step
  File "{SITE}/transformers/trainer.py", line 2530 in _inner_training_loop
"""

PYSPY_ALL_REDUCE = f"""\
Process 4242: python -m swift.cli.sft
Python v3.11.9 (/usr/bin/python3.11)

Thread 4242 (idle): "MainThread"
    all_reduce ({SITE}/torch/distributed/distributed_c10d.py:2806)
    wrapper ({SITE}/torch/distributed/c10d_logger.py:81)
    take ({SITE}/../backend/plugin/save_asks.py:60)
    _inner_training_loop ({SITE}/transformers/trainer.py:2560)
Thread 4250 (idle): "Thread-3 (_monitor)"
    wait (threading.py:324)
"""

PYSPY_DATA_LOADER = f"""\
Thread 4243 (active): "MainThread"
    _next_data ({SITE}/torch/utils/data/dataloader.py:757)
    __next__ ({SITE}/torch/utils/data/dataloader.py:701)
    _inner_training_loop ({SITE}/transformers/trainer.py:2480)
"""


def _progress(rank: int, step: int, where: str = "step", quiet: float = 40.0) -> RankProgress:
    return RankProgress(rank=rank, pid=1000 + rank, host="node", step=step, where=where, since=100.0,
                        time=1000.0 - quiet)


def test_the_rank_outside_the_collective_is_named_with_its_call() -> None:
    report = build_report({0: _progress(0, 6), 1: _progress(1, 6)},
                          {"1000": WAITING_IN_BACKWARD, "1001": SLEEPING_IN_THE_LOSS, "77": "launcher stack"}, [],
                          now=1000.0)
    assert report.lagging == [1]
    assert report.summary() == (
        "Lagging: rank 1, not in a collective while rank 0 waits in one. "
        "rank 0 waits in backward (torch/autograd/__init__.py:347) for DDP's gradient all-reduce, in step 6; "
        "rank 1 is in injected_hang (backend/plugin/fault_hooks.py:36), in step 6.")
    text = report.render("Hang report")
    assert "     1      1001  in step 6                   40 s  is in injected_hang (backend/plugin/fault_hooks.py:36)" in text
    assert "--- rank 1 (pid 1001) ---" in text and "hanging_loss" in text
    assert "--- pid 77 (the launcher, not a rank) ---" in text


def test_many_ranks_in_one_collective_are_one_group_and_the_rank_behind_lags() -> None:
    progress = {k: _progress(k, 7219) for k in range(7)} | {7: _progress(7, 7218, "after_step")}
    stacks = {str(1000 + k): PYSPY_ALL_REDUCE for k in range(7)} | {"1007": PYSPY_DATA_LOADER}
    report = build_report(progress, stacks, [], now=1000.0)
    assert report.lagging == [7]
    assert report.groups == [
        "ranks 0-6 wait in all_reduce (torch/distributed/distributed_c10d.py:2806), in step 7219",
        "rank 7 is in the data loader, _next_data (torch/utils/data/dataloader.py:757), after step 7218"]
    assert report.why == "Lagging: rank 7, at step 7218 while the others reached step 7219."


def test_every_rank_waiting_defers_to_the_nccl_lines() -> None:
    log = "\n".join(f"[rank{k}]:[E1 ProcessGroupNCCL.cpp:1834] [PG ID 0 PG GUID 0(default_pg) Rank {k}] Timeout at "
                    f"NCCL work: {w}, last enqueued NCCL work: {w}, last completed NCCL work: 7218."
                    for k, w in ((0, 7220), (1, 7219)))
    report = build_report({0: _progress(0, 9), 1: _progress(1, 9)}, {"1000": PYSPY_ALL_REDUCE,
                                                                       "1001": PYSPY_ALL_REDUCE},
                          watchdog_tables(log, 2), now=1000.0)
    assert report.lagging == [1]
    assert report.why == "Lagging: rank 1, by the NCCL watchdog's lines (below)."
    assert "lagging: rank 1 never issued collective 7220" in report.render("t")


def test_no_evidence_says_unknown() -> None:
    report = build_report({}, {}, [], now=1.0)
    assert report.lagging == []
    assert "the lagging rank is unknown" in report.why and report.summary() == ""


DDP_BUFFER_BROADCAST = f"""\
Current thread 0x00007f1351a11b80 (most recent call first):
  File "{SITE}/torch/nn/parallel/distributed.py", line 2363 in _distributed_broadcast_coalesced
  File "{SITE}/torch/nn/parallel/distributed.py", line 2451 in _default_broadcast_coalesced
  File "{SITE}/torch/nn/parallel/distributed.py", line 1782 in _pre_forward
"""


def test_calls_and_rank_lists() -> None:
    assert call_of(DDP_BUFFER_BROADCAST).describe(one=True) == (
        "waits in _distributed_broadcast_coalesced (torch/nn/parallel/distributed.py:2363)")
    assert call_of("py-spy failed: Permission denied").describe(one=True) == (
        "has no stack (py-spy failed: Permission denied)")
    assert not call_of(SLEEPING_IN_THE_LOSS).waiting and call_of(PYSPY_ALL_REDUCE).waiting
    assert rank_list([5, 0, 1, 2, 3, 9, 10]) == "ranks 0-3, 5, 9-10" and rank_list([4]) == "rank 4"

