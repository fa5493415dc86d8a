"""`[run] auto_resume`: a queued run cut by a reboot (its state recorded in another boot) is resumed by the
keeper from its newest complete checkpoint, with an alert each time, at most `auto_resume_max` times."""

from __future__ import annotations

from pathlib import Path

from backend.contract.alerts import read_alerts
from backend.core.process_identity import current_boot_id
from backend.profile import LaunchProfile, save_profile
from backend.queue.keeper import step
from backend.queue.store import Entry, edit, read_queue
from backend.runs.stop import stop_run
from tests.faults import helpers as h

CUT = {"status": "running", "boot_id": "an-earlier-boot", "supervisor_pid": 4242, "supervisor_started": 1.0}


def test_a_queued_run_cut_by_a_reboot_is_resumed_by_the_keeper_then_given_up(isolated_runs: Path) -> None:
    isolated_runs.mkdir(parents=True, exist_ok=True)
    folder = isolated_runs.parent / "data" / "queue"
    folder.mkdir(parents=True)
    run = h.fake_run(isolated_runs, status="running", checkpoints=(2,), state=CUT)
    profile_file = folder / "q1.toml"
    save_profile(LaunchProfile.model_validate({"name": "fake", "run": {"auto_resume": True, "auto_resume_max": 1}}),
                 profile_file)
    with edit(folder) as queue:
        queue.entries.append(Entry(id="q1", name="fake", profile_file=str(profile_file), base_dir="/",
                                   state="running", run_id=run.run_id, run_dir=str(run.path)))
    try:
        assert step(folder) is True
        entry = read_queue(folder).find("q1")
        assert (entry.state, entry.resumes) == ("running", 1)
        state = run.read_state()
        assert state.attempt == 2 and state.boot_id == current_boot_id()
        assert run.read_command()["argv"][-2:] == ["--resume_from_checkpoint",
                                                   str(run.path / "output" / "checkpoint-2")]
        (alert,) = [a for a in read_alerts(run.path) if "queue keeper" in a.message]  # beside the "lost" one
        assert alert.message == "cut by a reboot; resumed by the queue keeper (automatic resume 1 of 1)"
        stop_run(run)
        run.update_state(**CUT, stop_requested=False, ended_at=None)  # cut again: auto_resume_max 1 is used up
        assert step(folder) is False  # nothing left: the keeper would exit
        entry = read_queue(folder).find("q1")
        assert (entry.state, entry.resumes) == ("done", 1)
        assert entry.outcome in ("unknown", "failed")  # as the reconciler judges it (the stopped attempt's log)
        assert run.read_state().attempt == 2
        assert len([a for a in read_alerts(run.path) if "queue keeper" in a.message]) == 1
    finally:
        stop_run(run)


def test_an_entry_left_starting_by_a_killed_keeper_adopts_its_run_never_starts_it_twice(isolated_runs: Path) -> None:
    from backend.rundir import index

    isolated_runs.mkdir(parents=True, exist_ok=True)
    folder = isolated_runs.parent / "data" / "queue"
    folder.mkdir(parents=True)
    taken = h.fake_run(isolated_runs, "20260101-120000-fake-0001", status="finished", checkpoints=(2,))
    made = h.fake_run(isolated_runs, "20260101-120001-fake-0002", status="finished", checkpoints=(2,))
    for run in (taken, made):
        index.register(run.path)
    profile_file = folder / "q.toml"
    save_profile(LaunchProfile(name="fake"), profile_file)
    since = made.read_state().created_at - 0.5
    with edit(folder) as queue:  # q1 has its run; q2's launch was cut after its run folder was made
        queue.entries.append(Entry(id="q1", name="fake", profile_file=str(profile_file), base_dir="/",
                                   state="done", outcome="finished", run_id=taken.run_id, run_dir=str(taken.path)))
        queue.entries.append(Entry(id="q2", name="fake", profile_file=str(profile_file), base_dir="/",
                                   state="starting", started_at=since))
    assert step(folder, first=True) is True
    entry = read_queue(folder).find("q2")
    assert (entry.state, entry.run_id) == ("running", made.run_id)
    assert step(folder) is False
    assert read_queue(folder).find("q2").outcome == "finished"
    assert sorted(p.name for p in isolated_runs.iterdir()) == [taken.run_id, made.run_id]  # nothing started
