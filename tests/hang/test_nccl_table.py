"""The NCCL watchdog's lines from every rank's log, lined up into one table that names the lagging rank.
The log text is written by hand after ms-swift#10183 (a BROADCAST timeout after 50 min: rank 3's log says
last enqueued/completed 7220/7218, rank 2's 7219) and the line shapes of ms-swift#5409 / LlamaFactory#6269."""

from __future__ import annotations

from backend.hang.nccl_log import watchdog_tables

LOG_10183 = """\
{'loss': 0.7431, 'grad_norm': 0.52, 'learning_rate': 8.1e-05, 'epoch': 0.2}
[rank3]:[E1108 14:21:07.112233445 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7220, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=3000000) ran for 3000051 milliseconds before timing out.
[rank3]:[E1108 14:21:07.112301000 ProcessGroupNCCL.cpp:2271] [PG ID 0 PG GUID 0(default_pg) Rank 3]  failure detected by watchdog at work sequence id: 7220 PG status: last enqueued work: 7220, last completed work: 7218
[rank3]:[E1108 14:21:07.112350000 ProcessGroupNCCL.cpp:670] Stack trace of the failed collective not found, potentially because FlightRecorder is disabled. You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value.
[rank2]:[E1108 14:21:07.201000000 ProcessGroupNCCL.cpp:632] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7219, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=3000000) ran for 3000044 milliseconds before timing out.
[rank2]:[E1108 14:21:07.201100000 ProcessGroupNCCL.cpp:2271] [PG ID 0 PG GUID 0(default_pg) Rank 2]  failure detected by watchdog at work sequence id: 7219 PG status: last enqueued work: 7219, last completed work: 7218
[rank0]:[E1108 14:21:07.301000000 ProcessGroupNCCL.cpp:1834] [PG ID 0 PG GUID 0(default_pg) Rank 0] Timeout at NCCL work: 7220, last enqueued NCCL work: 7220, last completed NCCL work: 7218.
[rank1]:[E1108 14:21:07.302000000 ProcessGroupNCCL.cpp:1834] [PG ID 0 PG GUID 0(default_pg) Rank 1] Timeout at NCCL work: 7220, last enqueued NCCL work: 7220, last completed NCCL work: 7218.
"""


def test_the_rank_that_never_issued_the_collective_is_named() -> None:
    [table] = watchdog_tables(LOG_10183, world_size=4)
    assert table.pg == "0 (default_pg)"
    assert table.lagging == [2]
    assert table.render() == (
        "NCCL watchdog, process group 0 (default_pg):\n"
        "  rank  op               timed out at  last enqueued  last completed\n"
        "     0                           7220           7220            7218\n"
        "     1                           7220           7220            7218\n"
        "     2  ALLREDUCE                7219           7219            7218\n"
        "     3  BROADCAST                7220           7220            7218\n"
        "  lagging: rank 2 never issued collective 7220 (last enqueued 7219); ranks 0, 1, 3 did "
        "(last enqueued 7220) and wait for it")


def test_a_rank_of_the_world_with_no_line_is_named_too() -> None:
    two_ranks = "\n".join(line for line in LOG_10183.splitlines() if "Rank 0]" not in line and "Rank 1]" not in line)
    [table] = watchdog_tables(two_ranks, world_size=4)
    assert table.lagging == [2, 0, 1]
    assert table.why.endswith("ranks 0, 1 of the 4 wrote no watchdog line (the process may have died first, "
                              "or its log is not here)")


def test_every_rank_at_the_same_work_blames_the_collective_not_a_rank() -> None:
    log = "\n".join(f"[rank{k}]:[E1206 18:44:16.99 ProcessGroupNCCL.cpp:1709] [PG 1 Rank {k}] Timeout at NCCL work: "
                    f"7753, last enqueued NCCL work: 7755, last completed NCCL work: 7752." for k in range(2))
    [table] = watchdog_tables(log, world_size=2)
    assert table.pg == "1" and table.lagging == []
    assert table.why.startswith("every rank enqueued 7755 and none completed it")


def test_a_log_without_watchdog_lines_gives_no_table() -> None:
    assert watchdog_tables("{'loss': 0.5}\nTraining finished\n", world_size=2) == []
