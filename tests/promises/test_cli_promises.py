"""The README's command table, one promise a test: `schema SECTION`, `demo-model`, `watch` exits 3 and 5,
`logs` and `logs -f`, stop's SIGINT -> SIGTERM -> SIGKILL, `attach`, `jobs`."""

from __future__ import annotations

import functools
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from backend.core.process_identity import RUN_MARKER_ENV
from backend.jobs.job import JobSpec, create_job
from backend.rundir.process import terminate
from tests.faults import helpers as h


def test_schema_section_lists_only_that_sections_keys_with_type_default_and_help() -> None:
    result = h.cli("schema", "tuner")
    h.assert_clean_exit(result, (0,))
    lines = result.output.splitlines()
    assert lines and all(line.startswith("tuner.") for line in lines)
    assert "tuner.type (one of full|lora|qlora, default 'lora'): full fine-tune, LoRA, or QLoRA (4/8-bit base)." in lines
    refused = h.cli("schema", "no_such_section")
    h.assert_clean_exit(refused, (2,))
    assert "no section 'no_such_section'; sections: model, data, tuner" in refused.output


def test_demo_model_says_where_the_built_model_is_and_refuses_an_unknown_name(tiny_model: Path) -> None:
    built = h.cli("demo-model")
    h.assert_clean_exit(built, (0,))
    assert built.output.strip() == f"tiny-qwen2: already built at {tiny_model}"
    assert (tiny_model / "config.json").is_file()
    unknown = h.cli("demo-model", "--name", "gpt-5")
    h.assert_clean_exit(unknown, (2,))
    assert "unknown built-in model 'gpt-5'; known: tiny-qwen2" in unknown.output


def _running_run(workspace: Path) -> tuple[object, subprocess.Popen[bytes]]:
    run = h.fake_run(workspace, status="running")
    supervisor = h.sleeper(marker=run.path)
    run.update_state(supervisor_pid=supervisor.pid, supervisor_started=h.started(supervisor.pid))
    return run, supervisor


def test_watch_exits_3_for_a_stopped_run(workspace: Path) -> None:
    run = h.fake_run(workspace, status="stopped")
    (run.path / "watch").mkdir()
    (run.path / "watch" / "status.json").write_text('{"alive": false}')  # its watchdog has ended
    result = h.cli("watch", run.run_id)
    h.assert_clean_exit(result, (3,))
    assert f"run {run.run_id} stopped" in result.output


def test_watch_exits_5_when_it_times_out_on_a_running_run(workspace: Path) -> None:
    run, supervisor = _running_run(workspace)
    began = time.monotonic()
    result = h.cli("watch", run.run_id, "--timeout", "1")
    h.assert_clean_exit(result, (5,))
    assert result.output.strip() == "still running after 1 s"
    assert 1.0 <= time.monotonic() - began < 10
    assert h.alive(supervisor)  # watching never touches the run


def test_logs_prints_the_runs_log(workspace: Path) -> None:
    run = h.fake_run(workspace)
    run.log_path.write_text("".join(f"line {i}\n" for i in range(1, 61)))
    result = h.cli("logs", run.run_id)
    h.assert_clean_exit(result, (0,))
    assert result.output.splitlines() == [f"line {i}" for i in range(21, 61)]  # the last 40 lines
    short = h.cli("logs", run.run_id, "-n", "2")
    assert short.output.splitlines() == ["line 59", "line 60"]


def test_logs_follow_prints_what_the_log_grows_by_until_the_run_ends(workspace: Path) -> None:
    run, supervisor = _running_run(workspace)
    run.log_path.write_text("step 1\n")

    def training_goes_on() -> None:
        time.sleep(1.0)
        with open(run.log_path, "a") as log:
            log.write("step 2\ndone ✓\n")
        time.sleep(1.0)
        run.update_state(status="finished", ended_at=time.time())
        supervisor.kill()

    writer = threading.Thread(target=training_goes_on)
    writer.start()
    result = h.cli("logs", run.run_id, "-f")
    writer.join()
    h.assert_clean_exit(result, (0,))
    assert result.output.splitlines() == ["step 1", "step 2", "done ✓"]


STUBBORN = ("import signal, time\n"
            "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "print('ready', flush=True)\n"
            "time.sleep(120)\n")


def test_stop_escalates_sigint_then_sigterm_then_sigkill(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`workbench stop` itself, on a run whose supervisor ignores SIGINT and SIGTERM: each phase is said, the
    run is stopped. Only the grace is shorter (20 s in stop, 0.5 s here): what is sent, and when, is stop's."""
    run = h.fake_run(workspace, status="running")
    stubborn = subprocess.Popen([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE,
                                env={**h.os.environ, RUN_MARKER_ENV: str(run.path.resolve())})
    try:
        assert stubborn.stdout is not None and stubborn.stdout.readline() == b"ready\n"
        run.update_state(supervisor_pid=stubborn.pid, supervisor_started=h.started(stubborn.pid))
        monkeypatch.setattr("backend.runs.stop.terminate", functools.partial(terminate, grace_seconds=0.5))
        result = h.cli("stop", run.run_id)
        h.assert_clean_exit(result, (0,))
        assert result.output.splitlines()[-4:] == ["sent SIGINT to 1 process(es) - some still running",
                                                   "sent SIGTERM to 1 process(es) - some still running",
                                                   "sent SIGKILL to 1 process(es) - all exited",
                                                   f"run {run.run_id}: stopped"]
        assert stubborn.wait(5) == -signal.SIGKILL
    finally:
        if stubborn.poll() is None:
            stubborn.kill()


def test_attach_registers_a_run_folder_made_elsewhere(workspace: Path, tmp_path: Path) -> None:
    elsewhere = h.fake_run(tmp_path / "cluster-scratch", "20260105-080000-slurm-0007")
    assert elsewhere.run_id not in h.cli("runs").output
    attached = h.cli("attach", str(elsewhere.path))
    h.assert_clean_exit(attached, (0,))
    assert attached.output.strip() == "attached 20260105-080000-slurm-0007: finished"
    assert "20260105-080000-slurm-0007" in h.cli("runs").output
    status = h.cli("status", "20260105-080000-slurm")
    h.assert_clean_exit(status, (0,))
    stranger = tmp_path / "not-a-run"
    stranger.mkdir()
    refused = h.cli("attach", str(stranger))
    h.assert_clean_exit(refused, (2,))
    assert "is not a workbench run folder (run.json is missing)" in refused.output


def test_jobs_lists_a_runs_merge_and_inference_jobs(workspace: Path, tmp_path: Path) -> None:
    run = h.fake_run(workspace)
    spec = JobSpec(kind="merge", description="merge checkpoint-4", argv=["true"], cwd=str(tmp_path),
                   output=str(run.path / "merged" / "checkpoint-4-merged"))
    merge = create_job(run.jobs_dir, spec)
    merge.update_state(status="finished", result="merged", ended_at=time.time())
    infer = create_job(run.jobs_dir, spec.model_copy(update={"kind": "infer", "description": "infer val"}))
    infer.update_state(status="failed", failure_reason="exit code 1")
    result = h.cli("jobs", run.run_id)
    h.assert_clean_exit(result, (0,))
    rows = {line.split()[0]: line.split() for line in result.output.splitlines()[1:] if line.strip()}
    assert set(rows) == {merge.job_id, infer.job_id}
    assert rows[merge.job_id][1:] == ["finished", "100%", "done", "merged"]
    assert rows[infer.job_id][1] == "failed" and rows[infer.job_id][-3:] == ["exit", "code", "1"]
