"""When each waiting entry starts (#25 step 1), from hand-made run folders: a finished run of the recipe (300 s
of wall time) and a running one (step 20 of 100 at 0.5 steps/s: 160 s left, 100 s gone). Expected starts are
worked out by hand below; where there is no basis the start is "unknown", with why."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from backend.cli.app import full_app
from backend.contract.event_writer import EventWriter
from backend.profile import LaunchProfile
from backend.queue.add import add_profiles
from backend.queue.eta import Start, notes, start_estimates
from backend.queue.store import edit, read_queue
from backend.rundir.layout import RunFolder, RunState


def _run(folder: Path, status: str, started: float, ended: float | None = None,
         log: dict[str, float] | None = None) -> str:
    folder.mkdir(parents=True)
    run = RunFolder(folder)
    run.write_state(RunState(run_id=folder.name, profile_name="sweep", status=status, created_at=started,
                             started_at=started, ended_at=ended))
    if log:
        EventWriter(run.events_path).write("log", **log)
    return str(run.path)


def _queue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, max_parallel: int = 1) -> list[str]:
    """Entries: done (finished), running, then waiting: two of the same recipe, a paused one, one of another
    recipe (LoRA rank 16), and one more of the first recipe. Their ids in that order."""
    monkeypatch.setenv("WORKBENCH_DATA_DIR", str(tmp_path / "data"))
    queue_section = {"max_parallel": max_parallel}
    same = LaunchProfile.model_validate({"name": "sweep", "queue": queue_section, "training": {"max_steps": 100},
                                         "sweep": {"training.learning_rate": [1e-4, 2e-4, 3e-4, 4e-4]}})
    other = LaunchProfile.model_validate({"name": "rank16", "queue": queue_section, "training": {"max_steps": 100},
                                          "tuner": {"lora_rank": 16}})
    done, running, c, d = add_profiles([(same, tmp_path)])
    (paused,) = add_profiles([(same.model_copy(update={"sweep": {}, "name": "held"}), tmp_path)], hold=True)
    (e,) = add_profiles([(other, tmp_path)])
    (f,) = add_profiles([(same.model_copy(update={"sweep": {}, "name": "last"}), tmp_path)])
    now = time.time()
    with edit() as queue:
        a, b = queue.find(done.id), queue.find(running.id)
        a.state, a.outcome, a.run_id = "done", "finished", "run-a"
        a.run_dir = _run(tmp_path / "runs" / "run-a", "finished", now - 1000, now - 700)
        b.state, b.run_id = "running", "run-b"
        b.run_dir = _run(tmp_path / "runs" / "run-b", "running", now - 100,
                         log={"step": 20, "max_steps": 100, "steps_per_second": 0.5, "loss": 1.0})
    return [done.id, running.id, c.id, d.id, paused.id, e.id, f.id]


def test_starts_follow_the_running_runs_eta_and_the_recipe_durations(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, c, d, paused, e, f = _queue(tmp_path, monkeypatch)
    now = time.time()
    starts = start_estimates(read_queue(), now=now)
    assert set(starts) == {c, d, paused, e, f}  # waiting and paused ones only
    # c: after run-b's 160 s left; its recipe lasts (300 + (100 + 160)) / 2 = 280 s
    assert starts[c].at == pytest.approx(now + 160, abs=1.5)
    assert starts[d].at == pytest.approx(now + 160 + 280, abs=1.5)
    # the paused one holds nobody up; rank16 starts when d ends, but nothing says how long it takes
    assert starts[paused] == Start(None, f"{paused} is paused: it starts after `workbench queue resume {paused}`")
    assert starts[e].at == pytest.approx(now + 160 + 280 + 280, abs=1.5)
    why = "no basis for how long rank16 takes (no finished or running run of its recipe in the queue)"
    assert starts[f] == Start(None, why)
    assert notes(starts) == [f"start unknown: {why}"]
    assert Start(now + 160, "").text(now) == f"{time.strftime('%H:%M', time.localtime(now + 160))} (in 2m40s)"
    assert Start(now, "").text(now) == "now" and Start(None, why).text(now) == "unknown"

    listing = CliRunner().invoke(full_app(), ["queue"])
    assert listing.exit_code == 0, listing.output
    rows = {line.split()[1]: line for line in listing.output.splitlines() if line.strip()[:1].isdigit()}
    assert "STARTS" in listing.output and f"  start unknown: {why}" in listing.output
    assert rows[f].split()[4] == "unknown" and rows[b].split()[4] == "-"
    assert " (in 2m3" in rows[c] or " (in 2m4" in rows[c]  # 160 s, less the seconds the listing took


def test_a_free_slot_starts_now_and_a_run_without_a_step_rate_is_no_basis(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, c, d, paused, e, f = _queue(tmp_path, monkeypatch, max_parallel=2)
    now = time.time()
    starts = start_estimates(read_queue(), now=now)
    assert starts[c].text(now) == "now"  # run-b holds one of two slots
    assert starts[d].at == pytest.approx(now + 160, abs=1.5)  # the first of run-b and c to end
    with edit() as queue:  # run-b has logged no step rate yet: how long it runs is unknown
        (RunFolder(str(queue.find(b).run_dir)).events_path).unlink()
    starts = start_estimates(read_queue(), now=now)
    assert starts[c].text(now) == "now"
    # d needs a slot: c's (280 s, from run-a alone now: 300 s) or run-b's (unknown): c's ends first
    assert starts[d].at == pytest.approx(now + 300, abs=1.5)
    assert starts[e].at == pytest.approx(now + 600, abs=1.5)  # when d ends (e lasts: unknown)
    assert starts[f] == Start(None, "run-b has logged no step rate yet")  # needs run-b's or e's slot: both unknown


def test_memory_held_outside_the_queue_makes_the_start_unknown(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKBENCH_DATA_DIR", str(tmp_path / "data"))
    (entry,) = add_profiles([(LaunchProfile(name="big"), tmp_path)])
    held = "host RAM: 1.0 GiB free, needs 2.0 GiB (forecast + margin)"
    starts = start_estimates(read_queue(), why={entry.id: held})
    assert starts[entry.id] == Start(None, f"big waits for memory that no queued run holds ({held})")
    now = time.time()
    assert start_estimates(read_queue(), now=now)[entry.id].text(now) == "now"  # the keeper's next look


def test_a_finished_run_of_the_same_sweep_says_how_long_its_other_points_take(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """#34 (low): a sweep over the LoRA rank: each point is its own recipe, but the finished point (300 s of wall
    time) shows how long one takes. Nothing runs: the next point starts now, the one after it 300 s later."""
    monkeypatch.setenv("WORKBENCH_DATA_DIR", str(tmp_path / "data"))
    ranks = LaunchProfile.model_validate({"name": "ranks", "training": {"max_steps": 100},
                                          "sweep": {"tuner.lora_rank": [4, 8, 16]}})
    done, second, third = add_profiles([(ranks, tmp_path)])
    now = time.time()
    with edit() as queue:
        a = queue.find(done.id)
        a.state, a.outcome, a.run_id = "done", "finished", "run-a"
        a.run_dir = _run(tmp_path / "runs" / "run-a", "finished", now - 1000, now - 700)
    starts = start_estimates(read_queue(), now=now)
    assert starts[second.id].at == pytest.approx(now, abs=1.5)
    assert starts[third.id].at == pytest.approx(now + 300, abs=1.5)
