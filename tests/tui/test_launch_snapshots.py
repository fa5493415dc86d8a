"""Snapshots of the launch workspace at 80x24 and 160x48 (pinned hardware, shipped profile).

Update after an intended change with `pytest tests/tui/test_launch_snapshots.py --snapshot-update`
and look at the SVGs. When the memory planner (backend/estimate/forecast.py) lands, the memory
line appears and these snapshots must be regenerated.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes import CPU_BOX
from tests.tui.conftest import QUICKSTART, settle
from tui.app import WorkbenchApp


@pytest.fixture(scope="module", autouse=True)
def exact_tiny_shape(tiny_model: Path) -> None:
    """The model pane says "exact (transformers)" once transformers has been asked about the tiny model (a
    cached answer), "formula" before: ask first, so the picture does not depend on which tests ran before."""
    from backend.models.shape_exact import exact_shape

    exact_shape(tiny_model)


@pytest.fixture(autouse=True)
def textbook_host_terms(monkeypatch: pytest.MonkeyPatch) -> None:
    """The memory line's host figure comes from this machine's finished runs when there are some (#37): which runs
    the session has finished by then must not change the picture."""
    monkeypatch.setenv("WORKBENCH_CALIBRATION", "off")


def _app() -> WorkbenchApp:
    return WorkbenchApp(QUICKSTART, hardware=CPU_BOX)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_launch_screen_snapshot(snap_compare, tiny_model: Path, size: tuple[int, int]) -> None:
    assert snap_compare(_app(), terminal_size=size, run_before=settle)


def test_launch_screen_with_an_error_snapshot(snap_compare, tiny_model: Path) -> None:
    async def both_precisions_on(pilot) -> None:
        await settle(pilot)
        screen = pilot.app.screen
        screen.set_field("precision.bf16", True)
        screen.set_field("precision.fp16", True)
        screen.show_field("precision.fp16")
        screen.set_focus(None)
        await settle(pilot)

    assert snap_compare(_app(), terminal_size=(80, 24), run_before=both_precisions_on)
