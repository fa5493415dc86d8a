"""Issue #29, High 2: text from files never acts on the terminal. A dataset row, a log line, a script or a
system prompt holding `ESC [2J` (clear the screen) or `ESC ]0;TITLE BEL` (set the window title) is shown
with its control characters as escapes in the Data tab, `data show|inspect`, the monitor's diagnosis
line, `workbench show` and `workbench import`; `show` quotes them as bash `$'...'` so the line pastes
exactly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from textual.app import App, ComposeResult

from backend.core.paths import SHIPPED_PROFILES_DIR
from backend.core.shell_words import quote
from backend.data.first_look import inspect_ref
from backend.data.view import report_text as swift_report_text
from backend.data.view import row_text
from backend.launch.command import build_launch
from backend.profile import load_profile
from backend.rundir.diagnose import Diagnosis
from tests.fakes import CPU_BOX
from tests.timing import scaled
from tests.tui.conftest import shown, until_shown
from tui.widgets.dataset_details import DataQuery, DatasetSummary, report_text
from tui.widgets.log_tail import LogTail

CLEAR, TITLE = "\x1b[2J", "\x1b]0;TITLE\x07"
CLEAR_SHOWN, TITLE_SHOWN = "\\x1b[2J", "\\x1b]0;TITLE\\x07"


def _raw(text: str) -> bool:
    return "\x1b" in text or "\x07" in text


def test_the_data_tab_preview_shows_a_rows_escapes(tmp_path: Path) -> None:
    data = tmp_path / "evil.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": f"hi {CLEAR} there"},
                                             {"role": "assistant", "content": f"ok {TITLE}"}]}) + "\n")
    shown_text = report_text(inspect_ref(str(data))).plain
    assert not _raw(shown_text)
    # the first look shows the record's JSON, where JSON itself escapes control characters
    assert '"content": "hi \\u001b[2J there"' in shown_text and '"content": "ok \\u001b]0;TITLE\\u0007"' in shown_text


class _DataTab(App[None]):
    def compose(self) -> ComposeResult:
        yield DatasetSummary()


async def test_the_data_tab_draws_a_bidi_override_and_a_c1_control_as_escapes(tmp_path: Path) -> None:
    """JSON escapes C0 controls by itself; U+202E (right-to-left override: the rest of the line reversed)
    and U+009B (the one-byte CSI of C1 terminals) it leaves as they are, so the Data tab must escape them."""
    data = tmp_path / "bidi.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "abc\u202edef"},
                                             {"role": "assistant", "content": "x\u009b2Jy"}]},
                               ensure_ascii=False) + "\n", encoding="utf-8")
    app = _DataTab()
    async with app.run_test(size=(160, 20)) as pilot:
        summary = app.query_one(DatasetSummary)
        summary.question = DataQuery((str(data),), tmp_path)
        drawn = await until_shown(pilot, summary, "record 1:", timeout=30)
        assert '"content": "abc\\u202edef"' in drawn and '"content": "x\\x9b2Jy"' in drawn
        for strip in summary.render_lines(summary.region.reset_offset):
            assert "\u202e" not in strip.text and "\x9b" not in strip.text


def test_data_show_and_inspect_show_escapes() -> None:
    answer = {"row": 1, "ref": "evil.jsonl", "template": "qwen", "tokens": 4, "trained_tokens": 2, "max_length": 64,
              "segments": [{"text": f"<|im_start|>user\nhi {CLEAR}\n", "tokens": 2, "trained": False},
                           {"text": f"ok {TITLE}", "tokens": 2, "trained": True}]}
    for markers in (False, True):
        text = row_text(answer, markers=markers).plain
        assert not _raw(text)
        assert f"user\nhi {CLEAR_SHOWN}\n" in text and f"ok {TITLE_SHOWN}" in text  # line breaks stay breaks
    report = {"datasets": [{"ref": f"evil{TITLE}.jsonl", "status": "unreadable", "error": f"bad {CLEAR}",
                            "bad_lines": [{"line": 3, "reason": f"not JSON: {CLEAR}"}]}]}
    text = swift_report_text(report).plain
    assert not _raw(text)
    assert f"evil{TITLE_SHOWN}.jsonl\n  ✗ bad {CLEAR_SHOWN}\n    line 3: not JSON: {CLEAR_SHOWN}\n" == text


class _Tail(App[None]):
    def compose(self) -> ComposeResult:
        yield LogTail()


async def test_the_monitors_diagnosis_line_shows_escapes() -> None:
    app = _Tail()
    async with app.run_test(size=(120, 10)) as pilot:
        tail = app.query_one(LogTail)
        tail.set_diagnosis(Diagnosis("exception", f"ValueError: {TITLE}", f"ValueError: {TITLE}", "see the log"))
        await pilot.pause()
        line = shown(tail.query_one("#diagnosis"))
        assert line == f"✗ ValueError: {TITLE_SHOWN} — see the log"
        for strip in tail.query_one("#diagnosis").render_lines(tail.query_one("#diagnosis").region.reset_offset):
            assert not _raw(strip.text)


def test_show_quotes_control_characters_so_the_line_pastes_exactly(tmp_path: Path) -> None:
    prompt = f"be {CLEAR} brief\n{TITLE} ok 'x' \\ \u202eevil"
    profile = load_profile(SHIPPED_PROFILES_DIR / "quickstart.toml")
    profile.model.system = prompt
    line = build_launch(profile, tmp_path / "run", CPU_BOX, base_dir=SHIPPED_PROFILES_DIR).shell_line()
    assert not _raw(line) and "\n" not in line and "\u202e" not in line
    word = quote(f"--system={prompt}")
    assert word in line
    assert word == "$'--system=be \\x1b[2J brief\\n\\x1b]0;TITLE\\x07 ok \\'x\\' \\\\ \\u202eevil'"
    echoed = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, text=True, check=True).stdout
    assert echoed == f"--system={prompt}"  # bash reads the printed word back as the exact value


def test_import_does_not_echo_a_scripts_escape_and_nul_bytes(tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_bytes(b"swift sft --model Qwen/Qwen2-0.5B --dataset d.jsonl --model_author 'a\x1b]0;TITLE\x07' "
                       b"b\x00c\n")
    done = subprocess.run([sys.executable, "-m", "backend.cli", "import", str(script)], capture_output=True,
                          timeout=scaled(300))
    assert done.returncode == 2, done.stderr
    assert b"\x1b" not in done.stderr and b"\x00" not in done.stderr and b"\x07" not in done.stderr
    assert b"cannot import: --model_author a\\x1b]0;TITLE\\x07 b\\x00c: " in done.stderr, done.stderr


def test_the_launch_workspaces_command_preview_shows_no_secret_and_no_raw_escape(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tui.command_text import launch_script, multiline_command

    monkeypatch.setenv("HF_TOKEN", "hf_very_secret")
    profile = load_profile(SHIPPED_PROFILES_DIR / "quickstart.toml")
    profile.env = {"HF_TOKEN": ""}
    profile.model.system = f"be {CLEAR} brief"
    plan = build_launch(profile, tmp_path / "run", CPU_BOX, base_dir=SHIPPED_PROFILES_DIR)
    for text in (multiline_command(plan), launch_script(plan, "p", None)):
        assert "hf_very_secret" not in text and not _raw(text)
        assert 'HF_TOKEN="$HF_TOKEN"' in text and f"$'--system=be {CLEAR_SHOWN} brief'" in text
