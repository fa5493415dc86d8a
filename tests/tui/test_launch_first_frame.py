"""The launch workspace's first frame is its frame (#41): the status line, "Opening <profile>…", the memory
line's row and the footer, drawn before the profile's models, the command builder and the form are imported;
the form follows right after. Run in a fresh interpreter, as `workbench` starts (what is imported at the first
frame depends on what the process imported before)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.timing import scaled

REPO = Path(__file__).resolve().parents[2]
LATER = ("pydantic", "backend.profile.model", "backend.launch.command", "tui.widgets.settings_tabs")

CHILD = """
import json, sys, time
from backend.core.paths import SHIPPED_PROFILES_DIR
from tests.fakes import CPU_BOX
from tui.app import WorkbenchApp

later, limit = sys.argv[1].split(","), float(sys.argv[2])
seen = {}


def drawn(app):
    return [strip.text.rstrip() for strip in app.screen._compositor.render_strips()]


class Watched(WorkbenchApp):
    def on_ready(self):
        seen["first"] = {"loaded": [m for m in later if m in sys.modules], "screen": drawn(self)}
        super().on_ready()


async def main():
    app = Watched(SHIPPED_PROFILES_DIR / "quickstart.toml", hardware=CPU_BOX)
    async with app.run_test(size=(80, 24)) as pilot:
        start = time.monotonic()
        while not getattr(app.screen, "opened", False) and time.monotonic() - start < limit:
            await pilot.pause(0.02)
        await pilot.pause()
        seen["opened"] = {"loaded": [m for m in later if m in sys.modules], "screen": drawn(app)}
    print(json.dumps(seen))


import asyncio
asyncio.run(main())
"""


def test_the_first_frame_is_drawn_before_the_profile_and_the_form_are_read() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD, ",".join(LATER), str(scaled(60))], capture_output=True, text=True,
                          cwd=REPO, timeout=scaled(180))
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    first, opened = seen["first"], seen["opened"]
    assert first["loaded"] == []
    screen = "\n".join(first["screen"])
    assert "Opening " in screen and "quickstart.toml…" in screen
    assert first["screen"][-2].startswith(" Memory forecast: waiting")  # its row from the first frame
    assert "f5 Launch" in first["screen"][-1]
    assert opened["loaded"] == list(LATER)
    screen = "\n".join(opened["screen"])
    assert "Opening " not in screen
    assert opened["screen"][0].startswith(" quickstart — ")  # the status line names the profile read
    assert "builtin:tiny-qwen2" in screen  # the Model tab's source field
