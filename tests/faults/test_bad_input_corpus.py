"""Every file of the bad-input corpus through validate, show, runs, status and delete: exit code 0, 1
or 2 only, never a traceback, a failure names the file or the field, and the good run beside the
damaged one is always listed (one bad file never hides another run)."""

from __future__ import annotations

import pytest

from tests.faults.corpus import run_corpus, tally
from tests.faults.make_bad_inputs import write_corpus


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory, warm_oracle_for_module: None):  # type: ignore[no-untyped-def]
    folder = tmp_path_factory.mktemp("bad_inputs")
    write_corpus(folder)
    return run_corpus(folder)


def test_the_corpus_is_large_and_reaches_every_command(outcomes) -> None:  # type: ignore[no-untyped-def]
    figures = tally(outcomes)
    assert figures["files"] >= 50 and figures["invocations"] == 5 * figures["files"]


def test_no_traceback_and_only_meaningful_exit_codes(outcomes) -> None:  # type: ignore[no-untyped-def]
    bad = [f"{o.file} {o.command}: {o.traceback or o.exit_code}" for o in outcomes
           if o.traceback or o.exit_code not in (0, 1, 2)]
    assert bad == []


def test_every_refusal_names_the_file_or_the_field(outcomes) -> None:  # type: ignore[no-untyped-def]
    unnamed = [f"{o.file} {o.command}: {o.output.strip()[-200:]}" for o in outcomes if not o.names_it]
    assert unnamed == []


def test_one_bad_file_never_hides_the_good_run(outcomes) -> None:  # type: ignore[no-untyped-def]
    assert [o.file for o in outcomes if o.good_listed is False] == []


def test_damaged_run_files_are_shown_as_damaged_with_the_file(outcomes) -> None:  # type: ignore[no-untyped-def]
    by = {(o.file, o.command): o for o in outcomes}
    assert "damaged: state.json is empty" in by["empty.state.json", "runs"].output
    assert "damaged: state.json: not UTF-8 text (byte 128)" in by["binary.state.json", "status"].output
    assert "damaged: state.json: field created_at" in by["nan-times.state.json", "runs"].output
    index_lines = by["bad-lines.index.jsonl", "runs"].output
    assert "runs.jsonl line 1: not JSON; skipped" in index_lines
    assert "runs.jsonl line 2: its path is not a folder path; skipped" in index_lines


def test_text_from_files_never_reaches_the_terminal_raw(outcomes) -> None:  # type: ignore[no-untyped-def]
    by = {(o.file, o.command): o for o in outcomes}
    for command in ("runs", "status"):
        shown = by["escape-profile-name.state.json", command].output
        assert "\x1b" not in shown and "\u202e" not in shown and "\x07" not in shown
        assert r"x\x1b]0;pwned\x07\x1b[2J\u202eevil\nrow" in shown
    assert "[bold red]x[/][/]" in by["markup-profile-name.state.json", "status"].output
