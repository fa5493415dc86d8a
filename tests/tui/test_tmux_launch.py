"""The real `workbench` in a real terminal (tmux), driven by keys only, read back with capture-pane."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.timing import wait_until

REPO = Path(__file__).resolve().parents[2]
WORKBENCH = Path(sys.executable).parent / "workbench"
SIZE = (100, 30)

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


class Tmux:
    def __init__(self, name: str, socket: Path) -> None:
        self.name = name
        self.base = ["tmux", "-S", str(socket)]

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([*self.base, *args], capture_output=True, text=True, check=check)

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", self.name).stdout

    def keys(self, *keys: str) -> None:
        for key in keys:
            self.run("send-keys", "-t", self.name, key)
            time.sleep(0.15)

    def alive(self) -> bool:
        return self.run("has-session", "-t", self.name, check=False).returncode == 0

    def wait_for(self, *texts: str, timeout: float = 30.0) -> str:
        """The screen once every one of `texts` is on it (frames may be captured half drawn)."""
        screen = ""

        def shown() -> str:
            nonlocal screen
            screen = self.screen() if self.alive() else ""
            return screen if all(text in screen for text in texts) else ""

        return wait_until(shown, timeout, f"{texts!r} all on the screen", detail=lambda: f"the screen was:\n{screen}")


@pytest.fixture
def tmux(tmp_path: Path, tiny_model: Path, workbench_home: Path):
    session = Tmux("workbench-test", tmp_path / "tmux.sock")
    env = {
        "WORKBENCH_CACHE_DIR": os.environ["WORKBENCH_CACHE_DIR"],
        "WORKBENCH_DATA_DIR": str(tmp_path / "data"),
        "WORKBENCH_WORKSPACE": str(tmp_path / "runs"),
        "TERM": "xterm-256color",
    }
    assignments = " ".join(f"{key}={value}" for key, value in env.items())
    session.run("new-session", "-d", "-s", session.name, "-x", str(SIZE[0]), "-y", str(SIZE[1]),
                # COLUMNS/LINES from the test runner would override the terminal's real size
                f"cd {REPO} && env -u COLUMNS -u LINES {assignments} {WORKBENCH}")
    try:
        yield session
    finally:
        session.run("kill-server", check=False)


def test_keyboard_only_session_in_tmux(tmux: Tmux) -> None:
    # the footer names the keys
    tmux.wait_for("No problems: ready to launch", "quickstart", "Precision", "Distribution", "f5 Launch")

    tmux.keys("Right", "Right")  # settings tabs: Model -> Data -> Tuner
    tmux.wait_for("lora_rank")
    tmux.keys("Tab", "Enter")  # tuner type: open its list...
    tmux.wait_for("qlora")  # (keys sent before the list is open would be lost)
    tmux.keys("Down", "Enter")  # ... lora -> qlora
    # the status line says the form differs from the file
    tmux.wait_for("quant_bits", "bnb_4bit_quant_type", "modified")

    tmux.keys("F6")  # details pane: Problems -> Command, focused (it grows) and scrolled with the arrows
    tmux.wait_for("swift.cli.sft", "--model_type qwen2")  # (where the line wraps depends on the tmp path)
    tmux.keys(*["Down"] * 8)
    tmux.wait_for("--tuner_type lora", "--quant_method bnb", "--quant_bits 4")

    tmux.keys("C-q")  # unsaved changes: quitting asks first
    tmux.wait_for("Unsaved changes", "Quit without saving")
    time.sleep(0.5)  # the dialog takes the focus after it is drawn: keys sent before would be lost
    tmux.keys("Tab", "Enter")  # "Quit without saving"
    deadline = time.monotonic() + 30
    last = ""
    while tmux.alive() and time.monotonic() < deadline:
        last = tmux.screen()
        time.sleep(0.2)
    assert not tmux.alive(), f"workbench did not exit; the screen was:\n{last}"
