"""The throughput doctor in the monitor (#38, key d) on real finished runs, on the rendered screen at 120x36 and
80x24: "loading…" until its worker has read the run, then where the step's time went, real and padded tokens per
second, why there is no MFU on a CPU, and the GPU checks skipped with their reason, in the plots' room (d again
gives it back); on the skewed-length run, `a` on the padding verdict asks, then writes the changed profile beside
the run's, queues it, and a notice names the queue entry."""

from __future__ import annotations

import threading
import tomllib
from pathlib import Path
from typing import Any

import pytest
from textual.app import App
from textual.containers import VerticalScroll
from textual.pilot import Pilot

import backend.doctor.report as doctor_report
from backend.queue.store import read_queue
from backend.rundir.layout import RunFolder
from tests.doctor.padding_run import no_keeper_left, padding_run  # noqa: F401
from tests.shared_runs import private_copy
from tests.timing import scaled
from tests.tui.conftest import drawn_lines
from tests.tui.run_fixtures import open_monitor, wait_for
from tui.app import WorkbenchApp
from tui.modals.dialogs import ConfirmModal
from tui.widgets.doctor_panel import DoctorPanel, VerdictCard

# the padding verdict's change on the skewed run (8 rows, all 8 in every micro-batch)
CHANGE = ("training.per_device_train_batch_size = 4, training.gradient_accumulation_steps = 2, "
          "extra_swift_args.group_by_length = true")

pytestmark = pytest.mark.slow
SIZES = [(120, 36), (80, 24)]
FOOTER_KEYS = ("esc Back", "x Stop", "w Save", "m Merge", "t Chat", "c Checkpoints")


def screen_lines(app: App[None]) -> list[str]:
    return [strip.text.rstrip() for strip in app.screen._compositor.render_strips()]


FRAME = str.maketrans(dict.fromkeys("│▁▂▃▄▅▆▇█", " "))  # panel borders and scrollbar cells


def flow(lines: list[str]) -> str:
    """Lines as one text without borders, line breaks and runs of spaces as one space (wrapped lines read whole)."""
    return " ".join(" ".join(lines).translate(FRAME).split())


def flowing(app: App[None]) -> str:
    """The screen's text, flowed."""
    return flow(screen_lines(app))


async def read_down(pilot: Pilot[None]) -> str:
    """The doctor panel's scrolled text as drawn, a page at a time from its top to its end as the user pages
    through it, put back together by scroll offset (so a line wrapped across two pages reads whole)."""
    await pilot.press("home")
    scroll = pilot.app.screen.query_one(DoctorPanel).query_one(VerticalScroll)
    document: dict[int, str] = {}
    while True:
        await pilot.pause()
        region, top = scroll.content_region, round(scroll.scroll_y)
        for row, line in enumerate(screen_lines(pilot.app)[region.y:region.bottom]):
            document[top + row] = line[region.x:region.right]
        if top >= round(scroll.max_scroll_y):
            return flow([document[row] for row in sorted(document)])
        await pilot.press("pagedown")


async def open_doctor(pilot: Pilot[None], run_dir: Path) -> DoctorPanel:
    screen = await open_monitor(pilot, run_dir)
    await pilot.press("d")
    panel = screen.query_one(DoctorPanel)
    await wait_for(pilot, lambda: panel.loads >= 1, timeout=120, what="the doctor's first read")
    await pilot.pause()
    return panel


@pytest.mark.parametrize("size", SIZES)
async def test_the_doctor_says_where_the_quickstarts_time_went_in_the_plots_room(
    quill_run: RunFolder, isolated_runs: Path, size: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    diagnose = doctor_report.diagnose

    def held(run: RunFolder) -> Any:  # the real diagnosis, once the test has seen the panel before it
        gate.wait(scaled(60))
        return diagnose(run)

    monkeypatch.setattr(doctor_report, "diagnose", held)
    async with WorkbenchApp(None, start_mode="runs").run_test(size=size) as pilot:
        screen = await open_monitor(pilot, quill_run.path)
        await pilot.press("d")
        panel = screen.query_one(DoctorPanel)
        await pilot.pause()
        before = flowing(pilot.app)
        assert "Throughput doctor" in before and "loading… (the doctor reads the run's step times)" in before
        assert panel.loads == 0 and not screen.query_one("#panels").display  # the plots gave their room
        gate.set()
        await wait_for(pilot, lambda: panel.loads >= 1, timeout=120, what="the doctor's first read")
        await pilot.pause()  # the focused verdict scrolls itself into view after a refresh: let it, then go up
        await pilot.wait_for_scheduled_animations()
        await pilot.press("home")  # its top (a verdict found on this run has the focus, further down)
        phases = ("waiting for data", "forward + backward", "optimizer step")
        await wait_for(pilot, lambda: all(phase in flowing(pilot.app) for phase in phases), what="the step's phases")
        lines = screen_lines(pilot.app)
        assert f"run {quill_run.run_id}: " in flowing(pilot.app)
        assert all(len(line) <= size[0] for line in lines)
        for key in FOOTER_KEYS:
            assert key in lines[-1], lines[-1]
        text = await read_down(pilot)  # the panel scrolls to what is below the fold on a small terminal
        # the quickstart trains one row per micro-batch: nothing is padded
        assert "0 padding (0.0% of the batches)" in text
        assert " real tokens/s, 0 padded tokens/s per process during steps" in text
        assert "MFU: none on CPU (no datasheet peak for a CPU); tokens/s and FLOPs per token hold" in text
        assert (
            "skipped: flash attention: no GPU in this run: FlashAttention runs on NVIDIA GPUs of compute "
            "capability 8.0 or newer"
        ) in text
        await pilot.press("d")
        await pilot.pause()
        assert "Throughput doctor" not in flowing(pilot.app) and screen.query_one("#panels").display


@pytest.mark.usefixtures("no_keeper_left")
async def test_a_key_on_the_padding_verdict_asks_then_queues_the_changed_profile(
    isolated_runs: Path, tmp_path: Path
) -> None:
    with private_copy(padding_run(), tmp_path) as run:
        async with WorkbenchApp(None, start_mode="runs").run_test(size=(80, 24)) as pilot:
            await open_doctor(pilot, run.path)
            card = pilot.app.focused
            assert isinstance(card, VerdictCard) and card.number == 1
            assert screen_lines(pilot.app)[-1].startswith("a Apply it ")  # the footer says the key on a verdict
            change = f"change: {CHANGE} (a: apply it)"
            await wait_for(pilot, lambda: change in flowing(pilot.app), what="the focused verdict whole on screen")
            text = flowing(pilot.app)
            assert "1. pad " in text and "of tokens -> every micro-batch holds all 8 rows" in text
            await pilot.press("a")
            await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmModal), what="the question")
            # the question as the dialog draws it (over the panel: the screen's lines mix both)
            asked = flow(drawn_lines(pilot.app.screen))
            assert f"Apply verdict 1: {CHANGE}." in asked
            assert "profile.doctor-padding.toml" in asked
            await pilot.press("y")
            written = run.path / "profile.doctor-padding.toml"
            await wait_for(
                pilot, lambda: (run.path / "doctor-applied.json").is_file(), timeout=120, what="the verdict applied"
            )
            entry_id = next(e.id for e in read_queue().entries)
            notice = f"queued as entry {entry_id}: {CHANGE}; wrote {written}"
            await wait_for(
                pilot,
                lambda: any(n.message == notice for n in pilot.app._notifications),
                what="the notice naming the queue entry",
            )
    before = tomllib.loads(run.profile_path.read_text(encoding="utf-8"))
    after = tomllib.loads(written.read_text(encoding="utf-8"))
    before_extra, after_extra = before.pop("extra_swift_args", {}), after.pop("extra_swift_args")
    assert after_extra == {**before_extra, "group_by_length": True}
    # every micro-batch held all 8 rows: 4 a micro-batch, 2 a step, the same 8 rows a step (#38)
    assert after["training"].pop("per_device_train_batch_size") == 4
    assert after["training"].pop("gradient_accumulation_steps") == 2
    before["training"].pop("per_device_train_batch_size"), before["training"].pop("gradient_accumulation_steps")
    assert after == before  # only those keys differ
