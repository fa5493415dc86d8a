"""The watchdog on real swift runs of the tiny model: hang (SIGSTOP) + stop + disk, NaN + kill -9 with
a webhook that fails once, overflows with a dead webhook. Expected values are written by hand."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest

from backend.contract.alerts import Alert, read_alerts
from backend.contract.events import read_all
from backend.core.process_identity import run_processes
from backend.rundir.layout import RunFolder
from backend.runs.lookup import find_run
from backend.runs.status import refresh
from backend.watch.sinks import describe_deliveries
from tests.runs.helpers import log_events, quick_profile, wait_for, workbench
from tests.timing import scaled

pytestmark = pytest.mark.slow
SPLIT_ACROSS_WORKERS = True  # each test its own real run: spread over the workers (tests/conftest.py)

def _record_latency(kind: str, seconds: float) -> None:
    """A measured detection latency, in the test's captured output (pytest -rP shows it): never a file
    outside the test's own folders."""
    print(f"detection latency of the {kind} alert: {seconds:.2f} s")


def _start(profile: Path) -> RunFolder:
    result = workbench("run", str(profile), "--detach")
    return find_run(result.stdout.strip().splitlines()[-1])


def _trainer(run: RunFolder) -> psutil.Process:
    found = [p for p in run_processes(run.path)
             if "swift.cli.sft" in " ".join(p.cmdline()) and "accelerate" not in " ".join(p.cmdline())]
    assert len(found) == 1
    return found[0]


def _alert(run: RunFolder, kind: str) -> Alert | None:
    return next((a for a in read_alerts(run.path) if a.kind == kind), None)


def _watchdog_done(run: RunFolder) -> bool:
    """The supervisor writes the watchdog's status last, after the final alert's deliveries."""
    try:
        return json.loads((run.path / "watch" / "status.json").read_text())["alive"] is False
    except (OSError, ValueError):
        return False


def _log_time(run: RunFolder, step: int) -> float:
    return next(e["time"] for e in log_events(run) if e["step"] == step)


class Hook:
    """A local webhook receiver on 127.0.0.1 that answers 503 to its first `fail_first` POSTs."""

    def __init__(self, fail_first: int = 0):
        self.bodies: list[dict] = []
        self.failures_left = fail_first
        self.requests = 0
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                hook.requests += 1
                if hook.failures_left > 0:
                    hook.failures_left -= 1
                    self.send_response(503)
                    self.end_headers()
                    return
                hook.bodies.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook() -> Iterator[Hook]:
    server = Hook(fail_first=1)
    yield server
    server.close()


def test_sigstop_hang_is_alerted_and_stopped_keeping_the_checkpoint(
        tiny_model: Path, isolated_runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKBENCH_FAKE_DISK_FREE_BYTES", "1000")  # 1 kB free: less than any checkpoint
    profile = quick_profile(
        tmp_path,
        training={"max_steps": 100_000, "num_train_epochs": 1000.0, "logging_steps": 1, "save_steps": 5,
                  "save_total_limit": 2},
        watch={"hang_factor": 3.0, "hang_min_seconds": 8.0, "poll_seconds": 0.5, "stop_grace_seconds": 3.0,
               "actions": {"hang": "stop", "throughput": "off"}},  # steps/s is noisy on a shared 2-core box
    )
    run = _start(profile)
    disk = wait_for(lambda: _alert(run, "disk"), timeout=180, what="the disk alert after the first checkpoint")
    assert disk.evidence["free_bytes"] == 1000
    # the first reading after the first checkpoint measures it; one before it (a slow machine) forecasts
    # (which checkpoint depends on how fast the machine steps: one is written every 5 steps)
    assert re.fullmatch(r"size of checkpoint-\d*[05]|adapter \+ AdamW states, from the parameter counts",
                        disk.evidence["forecast_from"]), disk.evidence
    assert disk.evidence["next_checkpoint_bytes"] > 10_000
    if disk.evidence["forecast_from"].startswith("size of checkpoint"):
        assert disk.step is not None  # (a reading before the first logged step has no step yet)
    assert disk.action == "alert"
    if disk.evidence["forecast_from"] == "size of checkpoint-5":
        saved = next(e for e in read_all(run.events_path) if e["type"] == "checkpoint" and e["step"] == 5)
        _record_latency("disk (from the checkpoint record)", disk.time - saved["time"])

    wait_for(lambda: any((c / "trainer_state.json").is_file() for c in run.checkpoints()), timeout=180,
             what="a complete checkpoint")
    trainer = _trainer(run)
    trainer.send_signal(signal.SIGSTOP)
    frozen_at = log_events(run)[-1]["time"]
    complete = [c.name for c in run.checkpoints() if (c / "trainer_state.json").is_file()]
    assert complete

    hang = wait_for(lambda: _alert(run, "hang"), timeout=60, what="the hang alert")
    # the last step logged before the alert: to stop the run the watchdog continues the frozen trainer
    # (SIGCONT, then SIGINT), which may log one more step before it ends
    last_step = [e for e in log_events(run) if e["time"] <= hang.time][-1]["step"]
    assert hang.step == last_step and hang.action == "stop"
    assert hang.evidence["limit_seconds"] >= 8.0
    assert any(p["status"] == "stopped" for p in hang.evidence["processes"])
    assert "process is stopped" in hang.evidence["stacks"][str(trainer.pid)]
    latency, limit = hang.time - frozen_at, hang.evidence["limit_seconds"]
    assert limit <= latency < limit + 5, hang.evidence  # the limit, plus a poll and the stack dump
    _record_latency(f"hang (limit {limit:.1f} s)", latency)

    state = wait_for(lambda: (s := refresh(run)).status in ("stopped", "failed") and s, timeout=60, what="stop")
    assert state.status == "stopped"
    stopped = wait_for(lambda: _alert(run, "stopped"), timeout=30, what="the stopped alert")
    assert stopped.message.startswith("stopped by the watchdog after the hang alert")
    assert stopped.evidence["stopped_by_alert"] == hang.id
    _record_latency("stopped (from the hang alert, grace 3 s)", stopped.time - hang.time)
    # the checkpoints complete before the hang are still there and whole
    still = {c.name for c in run.checkpoints() if (c / "trainer_state.json").is_file()}
    assert complete[-1] in still
    last = run.output_dir / complete[-1]
    assert json.loads((last / "trainer_state.json").read_text())["global_step"] == int(complete[-1].split("-")[1])
    assert (last / "adapter_model.safetensors").stat().st_size > 0
    wait_for(lambda: run_processes(run.path) == [], timeout=30, what="no process left")
    kinds = [a.kind for a in read_alerts(run.path)]
    assert kinds.count("hang") == 1 and kinds.count("disk") == 1 and kinds[-1] == "stopped"


def test_injected_nan_then_kill_9_alert_and_reach_a_flaky_webhook(
        tiny_model: Path, isolated_runs: Path, tmp_path: Path, hook: Hook) -> None:
    profile = quick_profile(
        tmp_path,
        training={"max_steps": 100_000, "num_train_epochs": 1000.0, "logging_steps": 1, "save_steps": 1000},
        debug={"inject_nan_steps": [6]},
        watch={"poll_seconds": 0.5, "actions": {"throughput": "off"}},
        notify={"webhook": hook.url, "webhook_format": "json", "kinds": ["nonfinite", "failed"]},
    )
    run = _start(profile)
    until_alert = subprocess.Popen([sys.executable, "-m", "backend.cli", "watch", run.run_id, "--until", "alert"],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    nan = wait_for(lambda: _alert(run, "nonfinite"), timeout=180, what="the nonfinite alert")
    out, _ = until_alert.communicate(timeout=scaled(60))
    assert until_alert.returncode == 4 and f"{run.run_id} nonfinite at step 6: grad_norm became NaN/inf" in out
    line = workbench("status", "--line").stdout
    assert line.startswith("quickstart-test ") and "/100000 loss " in line and line.endswith("| ! 1 new (nonfinite)\n")
    assert nan.step == 6
    assert nan.evidence["nonfinite"] == ["grad_norm"]  # transformers' nan filter hides the NaN loss itself
    _record_latency("nonfinite", nan.time - _log_time(run, 6))
    assert [e["step"] for e in log_events(run) if "grad_norm" in e["nonfinite"]][0] == 6

    trainer = _trainer(run)
    killed_at = time.time()
    trainer.send_signal(signal.SIGKILL)
    until_end = workbench("watch", run.run_id, "--until", "finished", check=False)
    assert until_end.returncode == 1 and until_end.stdout.startswith(f"{run.run_id} failed at step ")
    assert ": killed by SIGKILL (nobody asked it to stop: often the kernel's OOM killer)" in until_end.stdout
    failed = wait_for(lambda: _alert(run, "failed"), timeout=90, what="the failed alert")
    assert "SIGKILL" in failed.message and failed.evidence["signal"] is not None
    _record_latency("failed (kill -9)", failed.time - killed_at)
    assert refresh(run).status == "failed"

    # the webhook answered 503 once: the first alert arrived on the second attempt, each exactly once
    wait_for(lambda: len(hook.bodies) == 2, timeout=30, what="both alerts at the webhook")
    assert [b["kind"] for b in hook.bodies] == ["nonfinite", "failed"]
    assert hook.bodies[0]["step"] == 6 and hook.bodies[0]["id"] == nan.id and hook.requests == 3
    deliveries = {(d.kind, d.status, d.attempts) for d in describe_deliveries(run.path)}
    assert deliveries == {("nonfinite", "delivered", 2), ("failed", "delivered", 1)}


def test_overflow_run_and_scale_floor_with_the_webhook_down(
        tiny_model: Path, isolated_runs: Path, tmp_path: Path) -> None:
    dead = Hook()
    url = dead.url
    dead.close()  # nothing listens there any more
    profile = quick_profile(
        tmp_path,
        precision={"fp16": True, "loss_scale_init": 64.0, "loss_scale_growth_interval": 1000},
        training={"max_steps": 12, "logging_steps": 1, "save_steps": 1000},
        debug={"inject_overflow_steps": [4, 5, 6]},
        watch={"overflow_run": 3, "loss_scale_min": 20.0, "poll_seconds": 0.5},
        notify={"webhook": url, "webhook_retries": 1},
    )
    run = _start(profile)
    watched = workbench("watch", run.run_id, "--until", "finished", "--json", check=False)
    assert watched.returncode == 0
    assert [json.loads(line)["kind"] for line in watched.stdout.splitlines()] == ["loss_scale", "loss_scale", "finished"]
    assert refresh(run).status == "finished"
    alerts = read_alerts(run.path)
    scale = [a for a in alerts if a.kind == "loss_scale"]
    # 64 -> 32 (step 4) -> 16 (step 5, below 20) -> 8 (step 6, the third overflow in a row)
    assert [(a.step, a.evidence.get("loss_scale"), a.evidence.get("overflows_in_a_row")) for a in scale] == [
        (5, 16.0, None), (6, None, 3)]
    assert scale[1].evidence["first_step"] == 4 and scale[1].evidence["last_step"] == 6
    _record_latency("loss_scale", scale[1].time - _log_time(run, 6))
    assert alerts[-1].kind == "finished" and alerts[-1].step == 12
    _record_latency("finished (from the final state)", alerts[-1].time - refresh(run).ended_at)
    assert not any(a.kind in ("nonfinite", "hang", "failed") for a in alerts)
    # the dead webhook lost nothing from alerts.jsonl, was tried twice per alert, and the supervisor ended well
    wait_for(lambda: _watchdog_done(run), timeout=30, what="the watchdog's last deliveries")
    deliveries = describe_deliveries(run.path)
    assert {d.status for d in deliveries} == {"gave_up"} and {d.attempts for d in deliveries} == {2}
    assert sorted(d.kind for d in deliveries) == sorted(a.kind for a in alerts)
    assert "cannot reach the webhook" in (deliveries[0].error or "")
    status = json.loads((run.path / "watch" / "status.json").read_text())
    assert status["alerts"] == len(alerts) and status["cpu_percent_of_one_core"] < 1.0
    assert read_all(run.events_path)[-1]["type"] == "run_end"
