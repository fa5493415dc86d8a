"""How swift's dataset answers read: the report (rows, drops, lengths, truncation, steps) and the
trained-token view of one row. Both as Rich `Text` (terminal, TUI) and as plain text with markers.

The trained-token view is the row exactly as the template renders it: tokens whose loss counts
(labels != -100) are highlighted (plain: inside ⟦ ⟧), the rest (system, user, tool parts, the
template's own scaffolding) is dimmed, special tokens stand out, and the `max_length` cut is marked.
Text from the data is always appended as plain text, never parsed as markup, and its control characters
are shown as escapes (`\\x1b`): a row or a reason never acts on the terminal (safe_text).
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from backend.core.safe_text import visible, visible_lines

TRAINED = "bold green"
CONTEXT = "dim"
SPECIAL = "magenta"
LOST = "dim red strike"
TRAINED_OPEN, TRAINED_CLOSE = "⟦", "⟧"
NEWLINE_MARK = "↵"
LEGEND = (f"legend: {TRAINED_OPEN}…{TRAINED_CLOSE} trained (labels != -100, loss counts) · the rest is context "
          f"(no loss) · {NEWLINE_MARK} a trained newline · ✂ the max_length cut")


# ---------------------------------------------------------------- the trained-token view


def legend(markers: bool) -> Text:
    if markers:
        return Text(LEGEND + "\n", style="dim")
    return Text.assemble(("legend: ", "dim"), ("trained", TRAINED), (" (labels != -100, loss counts) · ", "dim"),
                         ("context", CONTEXT), (" (no loss) · ", "dim"), ("<|special|>", SPECIAL),
                         (" · ↵ a trained newline · ", "dim"), ("✂", "bold red"), (" the max_length cut\n", "dim"))


def row_header(answer: dict[str, Any]) -> str:
    tokens, trained = answer.get("tokens", 0), answer.get("trained_tokens", 0)
    share = f"{100 * trained / tokens:.1f} %" if tokens else "0 %"
    line = f", line {answer['line']}" if answer.get("line") else ""
    ref, template = visible(answer.get("ref")), visible(answer.get("template"))
    return (f"row {answer.get('row')} of {ref}{line} · template {template} · "
            f"{tokens} tokens, {trained} trained ({share}) · max_length {answer.get('max_length')}")


def cut_note(answer: dict[str, Any]) -> str | None:
    if not answer.get("over_max_length"):
        return None
    max_length, tokens = answer.get("max_length"), answer.get("tokens", 0)
    strategy = answer.get("truncation_strategy")
    if answer.get("deleted"):
        return (f"✂ max_length {max_length}: this row has {tokens} tokens; swift deletes it "
                f"(truncation_strategy {strategy}): nothing of it is trained")
    kept_from, kept_to = answer.get("kept", [0, tokens])
    side = "before" if strategy == "left" else "after"
    return (f"✂ max_length {max_length}: swift cuts here (truncation_strategy {strategy}); "
            f"{tokens - (kept_to - kept_from)} tokens {side} it are not trained")


def row_text(answer: dict[str, Any], *, markers: bool = False) -> Text:
    """The trained-token view of one row (`ask_row`'s answer). `markers`: plain-text markers too
    (for a pipe or a file, where colour does not show)."""
    text = Text()
    if answer.get("error"):
        where = f"row {answer.get('row')} of {answer.get('ref')}" if answer.get("row") else str(answer.get("ref"))
        text.append(visible_lines(f"{where}: {answer['error']}"), style="red")
        return text
    text.append(row_header(answer) + "\n", style="bold")
    text.append_text(legend(markers))
    note = cut_note(answer)
    run: list[dict[str, Any]] = []  # consecutive trained segments, shown as one highlighted run
    for item in _with_cut(answer, note):
        if item is not None and item.get("trained"):
            run.append(item)
            continue
        if run:
            _append_trained_run(text, run, markers)
            run = []
        if item is None:
            if text.plain and not text.plain.endswith("\n"):
                text.append("\n")
            text.append(f"{note}\n", style="bold red")
        else:
            _append_segment(text, item)
    if run:
        _append_trained_run(text, run, markers)
    return text


def _with_cut(answer: dict[str, Any], note: str | None) -> list[dict[str, Any] | None]:
    """The segments, with None where the max_length cut falls (when the row is over it)."""
    items: list[dict[str, Any] | None] = []
    kept_from, kept_to = answer.get("kept", [0, answer.get("tokens", 0)])
    boundary = kept_from if answer.get("truncation_strategy") == "left" else kept_to
    position, marked = 0, note is None
    for segment in answer.get("segments", []):
        if not marked and position >= boundary:
            items.append(None)
            marked = True
        items.append(segment)
        position += segment.get("tokens", 0)
    if not marked:
        items.append(None)
    return items


def _style(segment: dict[str, Any]) -> str:
    if segment.get("lost"):
        return LOST
    if segment.get("trained"):
        return f"{TRAINED} underline" if segment.get("special") else TRAINED
    return SPECIAL if segment.get("special") else CONTEXT


def _piece(segment: dict[str, Any]) -> str:
    piece = visible_lines(segment.get("text", ""))
    return "<special>" if segment.get("special") and not piece else piece


def _append_segment(text: Text, segment: dict[str, Any]) -> None:
    text.append(_piece(segment), style=_style(segment))


def _append_trained_run(text: Text, run: list[dict[str, Any]], markers: bool) -> None:
    """Trained text, newlines made visible (↵); a newline that ends the run goes after the marker."""
    if markers:
        text.append(TRAINED_OPEN, style=TRAINED)
    trailing = False
    for index, segment in enumerate(run):
        piece = _piece(segment)
        if index == len(run) - 1 and piece.endswith("\n"):
            piece, trailing = piece[:-1], True
        text.append(piece.replace("\n", NEWLINE_MARK + "\n") + (NEWLINE_MARK if trailing else ""),
                    style=_style(segment))
    if markers:
        text.append(TRAINED_CLOSE, style=TRAINED)
    if trailing:
        text.append("\n")


# ---------------------------------------------------------------- the report


def _percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f} %" if whole else "0 %"


def dataset_text(data: dict[str, Any], *, listed: int = 5) -> Text:
    """One dataset entry of swift's report."""
    text = Text()
    text.append(visible(data.get("ref")), style="bold")
    status = data.get("status")
    if status == "hub":
        text.append(f"\n  {visible(data.get('note'))}\n", style="dim")
        return text
    if status == "unreadable":
        text.append(f"\n  ✗ {visible(data.get('error'))}\n", style="red")
        for bad in data.get("bad_lines", [])[:listed]:
            text.append(f"    line {bad['line']}: {visible(bad['reason'])}\n", style="red")
        return text
    sample = "  (#N sample)" if data.get("sampled_ref") else ""
    text.append(f"{sample}\n  swift keeps {data.get('rows', 0):,} of {data.get('rows_in_file', 0):,} rows")
    if data.get("dropped"):
        text.append(f"; drops {data['dropped']:,}", style="bold red")
    text.append("\n")
    for bad in data.get("dropped_rows", [])[:listed]:
        where = f"line {bad['line']}" if bad.get("line") else f"row {bad['row']}"
        text.append(f"    ✗ {where}: {visible(bad['reason'])}\n", style="red")
    if data.get("dropped", 0) > listed:
        text.append(f"    … and {data['dropped'] - listed:,} more\n", style="red")
    if status == "empty":
        text.append(f"  ✗ {visible(data.get('error'))}\n", style="red")
        return text
    if data.get("note"):
        text.append(f"  {visible(data['note'])}\n", style="dim")
    if "token_lengths" not in data:
        return text
    lengths = data["token_lengths"]
    sampled = (f" (a random sample of {data['encoded']:,} rows; the dataset has more than "
               f"{data['sample_limit']:,})") if data.get("sampled") else ""
    text.append(f"  tokens per row: p50 {lengths['p50']:,} · p90 {lengths['p90']:,} · p99 {lengths['p99']:,} · "
                f"max {lengths['max']:,}{sampled}\n")
    text.append(f"  trained tokens: {data.get('trained_tokens', 0):,} of {data.get('tokens', 0):,} "
                f"({_percent(data.get('trained_tokens', 0), data.get('tokens', 0))})\n")
    if data.get("truncated_rows"):
        verb = "deleted by swift" if data.get("truncation_strategy") == "delete" else "truncated"
        rows = ", ".join(map(str, data.get("truncated_row_numbers", [])[:10]))
        text.append(f"  ⚠ {data['truncated_rows']:,} rows over max_length {data.get('max_length')} "
                    f"({verb}, truncation_strategy {data.get('truncation_strategy')}); {data.get('tokens_lost', 0):,} "
                    f"tokens lost; rows {rows}\n", style="yellow")
    if data.get("zero_trained_rows"):
        rows = ", ".join(map(str, data.get("zero_trained_row_numbers", [])[:10]))
        text.append(f"  ⚠ {data['zero_trained_rows']:,} rows train no token at all: rows {rows}\n", style="yellow")
    if data.get("encode_errors"):
        text.append(f"  ✗ {data['encode_errors']:,} rows swift's template cannot encode (swift drops them):\n",
                    style="red")
        for bad in data.get("encode_error_rows", [])[:listed]:
            where = f"line {bad['line']}" if bad.get("line") else f"row {bad['row']}"
            text.append(f"    ✗ {where}: {visible(bad['reason'])}\n", style="red")
    return text


def report_text(report: dict[str, Any]) -> Text:
    """swift's whole report on a profile's datasets, with the steps per epoch."""
    text = Text()
    choice = report.get("model_choice")
    if choice:  # swift cannot encode a row until the user sets model_type / template
        text.append(f"⚠ {visible(choice['message'])}: rows are loaded, not encoded.\n", style="bold yellow")
        text.append(f"  {visible(choice['fix'])}\n", style="yellow")
    for data in report.get("datasets", []):
        text.append_text(dataset_text(data))
    steps = report.get("steps_per_epoch")
    batch = report.get("batch", {})
    if steps is not None:
        estimated = " (estimated from a sample)" if report.get("steps_estimated") else ""
        packing = ", packed" if batch.get("packing") else ""
        text.append(f"steps per epoch: {steps:,}{estimated}  ({report.get('train_rows', 0):,} rows, batch "
                    f"{batch.get('per_device_train_batch_size')} × accumulation "
                    f"{batch.get('gradient_accumulation_steps')} × {batch.get('world_size')} processes{packing})\n",
                    style="bold")
    if report.get("template_note") and not choice:
        text.append(f"{visible(report['template_note'])}\n", style="dim")
    return text
