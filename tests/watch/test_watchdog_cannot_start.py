"""A supervisor whose watchdog cannot start says so where the user looks (#29 High 4), not only in watch.log."""

from __future__ import annotations

from pathlib import Path

from backend.contract.alerts import AlertReader
from backend.rundir.layout import RunFolder
from backend.watch.watchdog import start_watchdog


def test_a_watchdog_that_cannot_start_writes_an_alert_saying_so(tmp_path: Path) -> None:
    run = RunFolder(tmp_path)
    (tmp_path / "profile.toml").write_text("[watch]\nhang_factor = 'not a number'\n", encoding="utf-8")

    dog = start_watchdog(run, trainer_pid=None)
    dog.finish()

    alerts = AlertReader(tmp_path).read_new()
    assert [a.kind for a in alerts] == ["watchdog"]
    assert "the watchdog could not start" in alerts[0].message
    assert "no hang, NaN or stop alert will fire for this run" in alerts[0].message
    assert "watch.log" in alerts[0].message
    assert "watchdog could not start" in (tmp_path / "watch" / "watch.log").read_text(encoding="utf-8")
