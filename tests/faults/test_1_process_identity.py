"""Critical 1: `stop` signals only processes proven to be the run's (pid + start time + the run's
marker in the environment, recorded on this host in this boot); `runs` never counts others alive."""

from __future__ import annotations

import signal
from pathlib import Path

from backend.jobs.job import JobFolder, JobSpec, create_job, stop_job
from backend.runs.status import refresh
from backend.runs.stop import stop_run
from tests.faults import helpers as h


def test_a_live_unrelated_sleep_planted_in_state_json_survives_stop(workspace: Path) -> None:
    victim = h.sleeper()
    run = h.fake_run(workspace, status="running", state={
        "supervisor_pid": victim.pid, "supervisor_started": h.started(victim.pid),  # even its true start time
        "trainer_pid": victim.pid, "pgid": victim.pid})
    result = h.cli("stop", run.run_id)
    h.assert_clean_exit(result, (0,))
    assert h.alive(victim), "stop signalled a process that is not the run's"
    assert "sent" not in result.output
    assert refresh(run).status == "unknown"  # no process of the run: never "running"
    assert "lost" in refresh(run).failure_reason


def test_a_reused_pid_is_not_counted_alive(workspace: Path) -> None:
    other = h.sleeper(marker=None)
    run = h.fake_run(workspace, status="running", state={
        "supervisor_pid": other.pid, "supervisor_started": h.started(other.pid) - 3600.0})  # the pid's old owner
    listing = h.cli("runs")
    h.assert_clean_exit(listing, (0,))
    assert "unknown" in listing.output and "running" not in listing.output
    assert h.alive(other)
    assert refresh(run).status == "unknown"


def test_stop_ends_every_process_that_carries_the_runs_marker(workspace: Path) -> None:
    run = h.fake_run(workspace, status="running")
    supervisor = h.sleeper(marker=run.path)
    helper_process = h.sleeper(marker=run.path)  # e.g. a worker torch elastic put in a session of its own
    bystander = h.sleeper(marker=workspace / "another-run")
    run.update_state(supervisor_pid=supervisor.pid, supervisor_started=h.started(supervisor.pid))
    assert refresh(run).status == "running"
    lines = stop_run(run)
    assert lines[0].startswith("sent SIGINT to 2 process(es)")
    h.wait_until(lambda: supervisor.poll() is not None and helper_process.poll() is not None, what="both to end")
    assert supervisor.returncode == -signal.SIGINT and helper_process.returncode == -signal.SIGINT
    assert h.alive(bystander)
    assert run.read_state().status == "stopped"


def test_a_run_of_another_host_is_shown_with_its_host_and_never_signalled(workspace: Path) -> None:
    run = h.fake_run(workspace, status="running", state={"host": "gpu-node-7"})
    marked = h.sleeper(marker=run.path)  # even a process here that carries its marker
    run.update_state(supervisor_pid=marked.pid, supervisor_started=h.started(marked.pid))
    listing = h.cli("runs")
    assert "running @gpu-node-7" in listing.output
    result = h.cli("stop", run.run_id)
    h.assert_clean_exit(result, (1,))  # nothing was stopped: said by the exit code too
    assert "stop it on gpu-node-7" in result.output
    assert h.alive(marked)
    assert run.read_state().status == "running"
    status = h.cli("status", run.run_id)
    assert "host: gpu-node-7 (started on host 'gpu-node-7'" in status.output


def test_a_record_from_before_a_reboot_is_not_alive(workspace: Path) -> None:
    marked = h.sleeper()
    run = h.fake_run(workspace, status="running", state={"boot_id": "an-earlier-boot"})
    run.update_state(supervisor_pid=marked.pid, supervisor_started=h.started(marked.pid))
    assert refresh(run).status == "unknown"
    stop_run(run)
    assert h.alive(marked)


def test_stopping_a_job_spares_a_planted_pid(workspace: Path, tmp_path: Path) -> None:
    victim = h.sleeper()
    spec = JobSpec(kind="infer", description="fake", argv=["true"], cwd=str(tmp_path), output=str(tmp_path / "o"))
    job: JobFolder = create_job(workspace / "jobs", spec)
    job.update_state(status="running", supervisor_pid=victim.pid, supervisor_started=h.started(victim.pid))
    state = stop_job(job)
    assert h.alive(victim), "stop_job signalled a process that is not the job's"
    assert state.status == "failed" and "supervisor vanished" in state.failure_reason  # nothing of it runs


def test_stopping_a_real_job_ends_its_marked_processes_and_records_stopped(workspace: Path, tmp_path: Path) -> None:
    import sys

    from backend.core.process_identity import job_marker
    from backend.jobs.job import start_job, wait_job

    spec = JobSpec(kind="infer", description="a sleeping job", cwd=str(tmp_path), output=str(tmp_path / "o"),
                   argv=[sys.executable, "-c", "print('WORKBENCH_PROGRESS 0.5 half', flush=True); "
                                               "import time; time.sleep(60)"])
    job = start_job(workspace / "jobs", spec)
    h.wait_until(lambda: len(job_marker(job.path).processes()) == 2, what="the supervisor and its command")
    bystander = h.sleeper()
    state = stop_job(job)
    assert state.status == "stopped" and state.stop_requested
    assert job_marker(job.path).processes() == [] and h.alive(bystander)
    assert wait_job(job, timeout=1).status == "stopped"
