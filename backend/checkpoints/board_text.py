"""The scoreboard as text: the cells of each row, the header, the one-line summary and the table (the CLI
prints these; the monitor's panel draws the same cells)."""

from __future__ import annotations

from dataclasses import replace

from backend.checkpoints.scoreboard import Row, Scoreboard

HEADERS = ("", "checkpoint", "train loss", "loss EMA", "{metric}", "size", "pinned", "state")


def cells(board: Scoreboard, row: Row) -> tuple[str, ...]:
    """The texts of one row, in HEADERS' order (the CLI table and the monitor's panel both draw these)."""
    golden = (row.golden or "-",) if board.golden_prompts is not None else ()  # after the metric, when answered
    evaluated = (row.swift_eval or "-",) if board.swift_eval_shown else ()
    return ("*" if row.best else "", row.name, row.train_text(), row.ema_text(), row.eval_text(), *golden, *evaluated,
            row.size_text(), ("pinned (only copy)" if row.pinned_only else "pinned") if row.pinned else "",
            row.state_text())


def headers(board: Scoreboard) -> tuple[str, ...]:
    named = [h.format(metric=board.metric.label) for h in HEADERS]
    if board.golden_prompts is not None:  # only for a run with golden answers
        named.insert(5, "golden")
    if board.swift_eval_shown:  # only for a run with `workbench eval` results
        named.insert(6 if board.golden_prompts is not None else 5, "swift eval")
    return tuple(named)


def summary(board: Scoreboard) -> str:
    """One line: which checkpoint is best and why, or why none is (after the run's OOM retry link, if any)."""
    if board.attempt:
        return f"{board.attempt} · {summary(replace(board, attempt=''))}"
    if board.swift_eval_base:
        return f"{summary(replace(board, swift_eval_base=None))} · swift eval: {board.swift_eval_base}"
    best = board.best
    if best is not None:
        return f"best: {board.reason(best)}"
    if not board.rows:
        return "no checkpoint yet (checkpoints appear every training.save_steps steps and at the end)"
    return "no best checkpoint: no complete checkpoint has a train or eval loss recorded"


def table_lines(board: Scoreboard) -> list[str]:
    """The table alone: the header line, then one line per row (columns padded to their widest cell)."""
    table = [headers(board), *(cells(board, row) for row in board.rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in table]


def text_lines(board: Scoreboard) -> list[str]:
    """The scoreboard as plain text lines: the summary, the table, what else is worth knowing."""
    lines = [summary(board), "", *table_lines(board)]
    if board.gone_steps:
        steps = ", ".join(str(s) for s in board.gone_steps)
        lines.append(f"saved earlier, deleted since (save_total_limit's rotation, or by hand): step {steps}")
    lines += board.problems
    return lines
