"""Runs with real swift subprocesses on the tiny model: finish, DDP, stop, kill, a terminal's hang-up and
Ctrl-C (to the whole process group, and a real terminal killed), resume."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import torch
from safetensors.torch import load_file

from backend.contract.events import read_all
from backend.core.process_identity import run_processes
from backend.rundir.layout import RunFolder
from backend.runs.lookup import find_run
from backend.runs.status import refresh
from tests.runs.helpers import first_log_at, log_events, quick_profile, wait_for, workbench
from tests.shared_runs import SharedRun
from tests.terminal_signals import default_terminal_signals
from tests.timing import scaled
from tests.tmux_session import WORKBENCH, Tmux, wait_until_gone

pytestmark = pytest.mark.slow
SPLIT_ACROSS_WORKERS = True  # each test its own real runs: spread over the workers (tests/conftest.py)
EVENT_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "events"


def _start_detached(profile: Path) -> RunFolder:
    result = workbench("run", str(profile), "--detach")
    return find_run(result.stdout.strip().splitlines()[-1])


def _group_alive(pgid: int) -> list[psutil.Process]:
    alive = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except (psutil.Error, ProcessLookupError):
            continue
    return alive


def test_quickstart_finishes_with_falling_loss(quickstart_cli_run: SharedRun) -> None:
    """The session's `workbench run quickstart` (tests/conftest.py, trained once for every worker)."""
    run = quickstart_cli_run.run
    assert "finished" in quickstart_cli_run.output
    assert refresh(run).status == "finished"
    events = read_all(run.events_path)
    losses = [e["loss"] for e in events if e["type"] == "log"]
    assert len(losses) > 20 and sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5
    assert any(e["type"] == "checkpoint" for e in events)
    assert events[-1]["type"] == "run_end" and events[-1]["status"] == "finished"
    assert {e["v"] for e in events} == {1} and all("rank" in e for e in events)
    listing = workbench("runs").stdout
    assert run.run_id[:20] in listing and "finished" in listing
    forecast = json.loads(run.forecast_path.read_text())
    assert forecast["per_device_total_bytes"] > 0 and "breakdown" in forecast
    status = json.loads(workbench("status", run.run_id, "--json").stdout)
    growth = status["memory"]["rows"]["host_rss_growth_bytes"]
    assert growth["measured_bytes"] > 0 and growth["forecast_bytes"] > 0 and growth["error_percent"] is not None
    text = workbench("status", run.run_id).stdout
    assert "memory forecast" in text and "error" in text and "RSS growth" in text


def test_two_process_cpu_ddp_ranks_agree(tiny_model: Path, isolated_runs: Path) -> None:
    workbench("run", "cpu-ddp-2proc")
    run = find_run("cpu-ddp-2proc")
    assert refresh(run).status == "finished"
    rank0 = {e["step"]: e["loss"] for e in log_events(run, rank=0)}
    rank1 = {e["step"]: e["loss"] for e in log_events(run, rank=1)}
    assert rank0 and rank0 == rank1
    begin = [e for e in read_all(run.events_path) if e["type"] == "run_begin"]
    assert {e["rank"] for e in begin} == {0, 1} and all(e["world_size"] == 2 for e in begin)


def test_stop_leaves_no_process_then_resume_continues(tiny_model: Path, isolated_runs: Path, tmp_path: Path) -> None:
    profile = quick_profile(tmp_path, training={"max_steps": 100_000, "save_steps": 20, "logging_steps": 5,
                                                "num_train_epochs": 1000.0})
    run = _start_detached(profile)
    wait_for(first_log_at(run, 45), what="step 45")
    pgid = run.read_state().pgid
    result = workbench("stop", run.run_id)
    assert "SIGINT" in result.stdout
    assert refresh(run).status == "stopped"
    assert run_processes(run.path) == [] and _group_alive(pgid) == []

    # the stop may cut a checkpoint short (no trainer_state.json yet): resume takes the last complete one
    complete = [c for c in run.checkpoints() if (c / "trainer_state.json").is_file()]
    checkpoint_step = int(complete[-1].name.split("-")[1])
    workbench("resume", run.run_id, "--detach")
    begins = lambda: [e for e in read_all(run.events_path) if e["type"] == "run_begin"]  # noqa: E731
    wait_for(lambda: len(begins()) == 2, what="second run_begin")
    assert begins()[1]["start_step"] == checkpoint_step
    wait_for(first_log_at(run, checkpoint_step + 10), what="steps after resume")
    after = [e["step"] for e in log_events(run)][-1]
    assert after > checkpoint_step
    state = run.read_state()
    assert state.attempt == 2 and state.resumed_from.endswith(f"checkpoint-{checkpoint_step}")
    workbench("stop", run.run_id)
    assert run_processes(run.path) == []


def test_kill_9_of_the_trainer_is_seen_as_failed(tiny_model: Path, isolated_runs: Path, tmp_path: Path) -> None:
    profile = quick_profile(tmp_path, training={"max_steps": 100_000, "num_train_epochs": 1000.0})
    run = _start_detached(profile)
    wait_for(first_log_at(run, 10), what="training")
    trainers = [p for p in run_processes(run.path)
                if "swift.cli.sft" in " ".join(p.cmdline()) and "accelerate" not in " ".join(p.cmdline())]
    assert len(trainers) == 1
    trainers[0].send_signal(signal.SIGKILL)
    state = wait_for(lambda: (s := refresh(run)).status == "failed" and s, timeout=60, what="failed status")
    assert "SIGKILL" in state.failure_reason
    wait_for(lambda: run_processes(run.path) == [], timeout=30, what="the run's other processes to end")


def _cli_as_a_shell_job(profile: Path, **pipes: object) -> subprocess.Popen[str]:
    """`workbench run PROFILE` as an interactive shell starts it: in a process group of its own. A terminal's
    hang-up or Ctrl-C reaches that whole group (os.killpg), not one pid."""
    return subprocess.Popen([sys.executable, "-m", "backend.cli", "run", str(profile)], process_group=0,
                            preexec_fn=default_terminal_signals, text=True, **pipes)  # type: ignore[call-overload]


def _keeps_stepping_then_finishes(run: RunFolder, max_steps: int) -> None:
    step = log_events(run)[-1]["step"]
    went_on = first_log_at(run, step + 10)
    wait_for(lambda: went_on() or not refresh(run).is_active, timeout=120, what="more steps or the run's end")
    assert went_on(), f"the run did not go on after the terminal's signal: {refresh(run)}\n{run.log_tail()[-2000:]}"
    wait_for(lambda: not refresh(run).is_active, timeout=180, what="run end")
    state = refresh(run)
    assert state.status == "finished", (state, run.log_tail()[-2000:])
    assert [e["step"] for e in read_all(run.events_path) if e["type"] == "run_end"] == [max_steps]


def test_run_survives_sighup_to_the_launching_cli_process_group(
        tiny_model: Path, isolated_runs: Path, tmp_path: Path) -> None:
    profile = quick_profile(tmp_path, training={"max_steps": 150, "logging_steps": 1})
    cli = _cli_as_a_shell_job(profile, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run = wait_for(lambda: _latest_run(), what="run folder")
    wait_for(first_log_at(run, 5), timeout=300, what="training")
    os.killpg(cli.pid, signal.SIGHUP)
    assert cli.wait(timeout=scaled(10)) == -signal.SIGHUP  # the CLI itself is gone
    wait_for(lambda: _group_alive(cli.pid) == [], timeout=10, what="the CLI's process group to end")
    _keeps_stepping_then_finishes(run, 150)


def test_workbench_run_in_a_terminal_that_hangs_up(tiny_model: Path, isolated_runs: Path, tmp_path: Path) -> None:
    """`workbench run` in a real terminal (tmux); the terminal goes (its server is killed, as a dropped SSH
    link does): the CLI dies with it, the run keeps stepping and finishes."""
    if shutil.which("tmux") is None:
        pytest.skip("needs tmux")
    profile = quick_profile(tmp_path, training={"max_steps": 150, "logging_steps": 1})
    tmux = Tmux(tmp_path / "tmux.sock")
    try:
        sid = tmux.start("ssh", f"{WORKBENCH} run {profile}", size=(120, 30))
        tmux.wait_for("ssh", r"training.*loss \d", timeout=300)  # the CLI follows the run on the terminal
        run = _latest_run()
        assert run is not None and run_processes(run.path)
    finally:
        tmux.hang_up()  # the SSH link drops (and a failed wait above leaves no terminal behind)
    wait_until_gone(sid)  # the terminal's every process, the CLI included
    _keeps_stepping_then_finishes(run, 150)


def _latest_run() -> RunFolder | None:
    try:
        return find_run("quickstart-test")
    except LookupError:
        return None


def _adapter(run: RunFolder, step: int) -> dict[str, torch.Tensor]:
    return load_file(run.path / "output" / f"checkpoint-{step}" / "adapter_model.safetensors")


@pytest.fixture(scope="module")
def overflow_run(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> RunFolder:
    """A finished CPU fp16 run of 14 steps with an overflow injected at step 10 and a checkpoint every step."""
    root = tmp_path_factory.mktemp("overflow")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("WORKBENCH_DATA_DIR", str(root / "data"))
        env.setenv("WORKBENCH_WORKSPACE", str(root / "runs"))
        profile = quick_profile(
            root,
            precision={"fp16": True, "loss_scale_init": 64.0, "loss_scale_growth_interval": 4},
            training={"max_steps": 14, "logging_steps": 1, "save_steps": 1, "save_total_limit": 14},
            debug={"inject_overflow_steps": [10]},
        )
        workbench("run", str(profile))
        return find_run("quickstart-test")


@pytest.mark.xdist_group("lifecycle-overflow-run")  # one overflow_run for both
def test_cpu_fp16_injected_overflow_halves_the_scale_and_skips_the_step(overflow_run: RunFolder) -> None:
    """An overflow at step 10 halves the scale, and the optimizer step is really skipped: the adapter saved
    after step 10 is bit for bit the one saved after step 9, while steps 9 and 11 change it."""
    run = overflow_run
    begin = next(e for e in read_all(run.events_path) if e["type"] == "run_begin")
    assert begin["scaler"] == "GradScaler" and begin["precision"] == "fp16"
    by_step = {e["step"]: e for e in log_events(run)}
    assert by_step[9]["overflow_count"] == 0
    assert by_step[10]["loss_scale"] == by_step[9]["loss_scale"] / 2
    assert by_step[10]["overflow_count"] == 1 and by_step[10]["skipped_steps"] == 1
    assert by_step[14]["loss_scale"] == 2 * by_step[10]["loss_scale"]  # grows again after 4 clean steps
    assert by_step[14]["overflow_count"] == 1

    before, at_overflow, after = _adapter(run, 9), _adapter(run, 10), _adapter(run, 11)
    assert before.keys() == at_overflow.keys() == after.keys() and before
    assert all(torch.equal(before[name], at_overflow[name]) for name in before), "step 10 changed the adapter"
    assert any(not torch.equal(at_overflow[name], after[name]) for name in after), "step 11 did not train"
    assert any(not torch.equal(_adapter(run, 8)[name], before[name]) for name in before), "step 9 did not train"
    assert all(torch.isfinite(tensor).all() for tensor in after.values())


def _schema(events: list[dict]) -> dict[str, dict[str, str]]:
    """Per event type: every field and the JSON type of its non-null values ("null" when only ever null)."""
    schema: dict[str, dict[str, str]] = {}
    for event in events:
        fields = schema.setdefault(event["type"], {})
        for name, value in event.items():
            kind = type(value).__name__.replace("int", "float") if value is not None else "null"
            if fields.get(name, "null") == "null":
                fields[name] = kind
    return schema


@pytest.mark.xdist_group("lifecycle-overflow-run")  # one overflow_run for both
def test_recorded_event_fixtures_have_what_the_callback_writes_today(overflow_run: RunFolder) -> None:
    """tests/fixtures/events feed the monitor, series and snapshot tests: each of their event types has exactly
    the fields (and value types) that the real callback writes now."""
    real = _schema(read_all(overflow_run.events_path))
    assert {"run_begin", "log", "checkpoint", "run_end"} <= real.keys()
    recordings = [f for f in sorted(EVENT_FIXTURES.glob("*.jsonl")) if f.with_suffix(".toml").is_file()]
    assert len(recordings) >= 3
    for recording in recordings:
        recorded = _schema(read_all(recording))
        for kind in recorded.keys() & real.keys():
            for name in recorded[kind].keys() | real[kind].keys():
                want, got = real[kind].get(name, "missing"), recorded[kind].get(name, "missing")
                assert "null" in (want, got) and "missing" not in (want, got) or want == got, \
                    f"{recording.name}: {kind}.{name} is {got} in the recording, {want} from the callback"


def test_fp32_run_says_why_there_is_no_scaler(quill_run: RunFolder) -> None:
    begin = next(e for e in read_all(quill_run.events_path) if e["type"] == "run_begin")
    assert begin["scaler"] is None and "no loss scaling" in begin["scaler_reason"]


def test_ctrl_c_detaches_the_cli_and_the_run_goes_on(tiny_model: Path, isolated_runs: Path, tmp_path: Path) -> None:
    profile = quick_profile(tmp_path, training={"max_steps": 100_000, "num_train_epochs": 1000.0})
    cli = _cli_as_a_shell_job(profile, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    run = wait_for(lambda: _latest_run(), what="run folder")
    wait_for(first_log_at(run, 5), timeout=300, what="training")
    os.killpg(cli.pid, signal.SIGINT)  # Ctrl-C: the terminal signals its whole foreground process group
    output, _ = cli.communicate(timeout=scaled(30))
    assert cli.returncode == 0
    assert "detached; the run goes on" in output and f"workbench status {run.run_id}" in output
    step = log_events(run)[-1]["step"]
    wait_for(first_log_at(run, step + 20), what="the run to go on after the CLI left")
    assert refresh(run).status == "running"
    workbench("stop", run.run_id)
    assert run_processes(run.path) == []
