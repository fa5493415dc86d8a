"""The launch workspace never imports torch, transformers or swift: not for its first frame, and not
while its workers describe the model, scan the data and forecast memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.timing import scaled

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "swift", "peft", "accelerate", "tokenizers")

DRIVE = """
import asyncio, json, sys
from backend.cli.common import default_profile_path
from tui.app import WorkbenchApp
from tests.tui.conftest import shown

async def main():
    app = WorkbenchApp(default_profile_path())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        first = [m for m in sys.argv[1:] if m in sys.modules]
        for _ in range(3):
            await app.workers.wait_for_complete()
            await pilot.pause()
        app.screen.form.show_tab("data")
        await pilot.pause()
        summary = shown(app.screen.query_one("#dataset-summary"))
        later = [m for m in sys.argv[1:] if m in sys.modules]
    print(json.dumps({"first": first, "later": later, "summary": summary}))

asyncio.run(main())
"""


def test_launch_screen_and_its_workers_import_nothing_heavy(tiny_model: Path) -> None:
    done = subprocess.run([sys.executable, "-c", DRIVE, *HEAVY], capture_output=True, text=True, cwd=REPO,
                          timeout=scaled(120))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["first"] == [] and result["later"] == []
    assert result["summary"].startswith("builtin:self-cognition [builtin] 53 rows")  # the scan finished
