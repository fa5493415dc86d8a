"""Sinks: webhook presets and retries against a local HTTP server, command on stdin, at most once,
secrets from the environment, user-level defaults; stack dumps of a real Python process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import psutil
import pytest

from backend.contract.alerts import Alert
from backend.watch.config import NotifySection, effective_notify, user_notify_defaults
from backend.watch.sinks import CommandSink, DesktopSink, Dispatcher, WebhookSink, sinks_for
from backend.watch.stacks import dump_stacks
from tests.fakes import fake_executable
from tests.runs.helpers import wait_for
from tests.watch.test_watchdog_runs import Hook

ALERT = Alert("failed", "CUDA out of memory: torch.OutOfMemoryError: CUDA out of memory.", step=812,
              evidence={"exit_code": 1}, run_id="20260101-quick-ab12", id="a1b2c3", time=1_700_000_000.0)


def _headers_and_body(sink: WebhookSink) -> tuple[dict[str, str], bytes]:
    request = sink.request(ALERT)
    return {k.lower(): v for k, v in request.header_items()}, request.data


def test_webhook_presets() -> None:
    headers, body = _headers_and_body(WebhookSink("https://ntfy.sh/my-runs", "ntfy"))
    assert body == b"20260101-quick-ab12 failed at step 812: CUDA out of memory: torch.OutOfMemoryError: CUDA out of memory."
    assert headers["title"] == "workbench: 20260101-quick-ab12 failed" and headers["priority"] == "high"
    headers, body = _headers_and_body(WebhookSink("https://hooks.example/T0", "slack"))
    text = "20260101-quick-ab12 failed at step 812: CUDA out of memory: torch.OutOfMemoryError: CUDA out of memory."
    assert json.loads(body) == {"text": text, "content": text} and headers["content-type"] == "application/json"
    _, body = _headers_and_body(WebhookSink("https://hooks.example/x", "json"))
    sent = json.loads(body)
    assert (sent["kind"], sent["step"], sent["id"], sent["evidence"]) == ("failed", 812, "a1b2c3", {"exit_code": 1})


def test_webhook_secrets_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLACK_HOOK", "https://hooks.slack.example/services/T/B/secret")
    monkeypatch.setenv("NTFY_TOKEN", "tk_123")
    request = WebhookSink("${SLACK_HOOK}", "slack", token_env="NTFY_TOKEN").request(ALERT)
    assert request.full_url == "https://hooks.slack.example/services/T/B/secret"
    assert request.get_header("Authorization") == "Bearer tk_123"


def test_webhook_retries_then_delivers_once(tmp_path: Path) -> None:
    hook = Hook(fail_first=2)
    try:
        dispatcher = Dispatcher([WebhookSink(hook.url, "json")], tmp_path, sleep=lambda s: None)
        dispatcher.submit(ALERT)
        dispatcher.submit(ALERT)  # the same alert again: already delivered, not sent twice
        dispatcher.close(timeout=20)
    finally:
        hook.close()
    assert hook.requests == 3 and [b["id"] for b in hook.bodies] == ["a1b2c3"]
    records = [json.loads(line) for line in (tmp_path / "deliveries.jsonl").read_text().splitlines()]
    assert [(r["sink"], r["status"], r["attempts"]) for r in records] == [("webhook", "delivered", 3)]


def test_missing_secret_gives_up_at_once_and_says_why(tmp_path: Path) -> None:
    backoffs: list[float] = []  # every wait between attempts (bench/watch_sinks_bench.py times the give-up)
    dispatcher = Dispatcher([WebhookSink("${NO_SUCH_WORKBENCH_VAR}", "json")], tmp_path, sleep=backoffs.append)
    dispatcher.submit(ALERT)
    dispatcher.close(timeout=10)
    assert backoffs == []  # at once: no retry, no back-off
    record = json.loads((tmp_path / "deliveries.jsonl").read_text())
    assert (record["status"], record["attempts"], record["error"]) == (
        "gave_up", 1, "environment variable NO_SUCH_WORKBENCH_VAR is not set")


def test_command_gets_the_alert_on_stdin(tmp_path: Path) -> None:
    out = tmp_path / "got.json"
    dispatcher = Dispatcher([CommandSink(f"cat > {out}")], tmp_path)
    dispatcher.submit(ALERT)
    dispatcher.close(timeout=10)
    got = json.loads(out.read_text())
    assert got["kind"] == "failed" and got["line"].startswith("20260101-quick-ab12 failed at step 812: CUDA")


def test_kinds_filter_and_user_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKBENCH_CONFIG_DIR", str(tmp_path))
    (tmp_path / "notify.toml").write_text('webhook = "https://ntfy.sh/mine"\nwebhook_format = "ntfy"\ndesktop = true\n')
    assert user_notify_defaults().webhook == "https://ntfy.sh/mine"
    merged = effective_notify(NotifySection(desktop=False, command="true"))
    assert (merged.webhook, merged.webhook_format, merged.desktop, merged.command) == (
        "https://ntfy.sh/mine", "ntfy", False, "true")
    assert [s.name for s in sinks_for(merged)] == ["webhook", "command"]
    out = tmp_path / "kinds.txt"
    dispatcher = Dispatcher([CommandSink(f"cat >> {out}; echo >> {out}")], tmp_path, kinds=["hang"])
    dispatcher.submit(ALERT)  # failed: not among the kinds
    dispatcher.submit(Alert("hang", "no progress", step=3, id="h1"))
    dispatcher.close(timeout=10)
    assert [json.loads(line)["kind"] for line in out.read_text().splitlines() if line] == ["hang"]


def test_stack_dump_of_a_registered_python_process(tmp_path: Path) -> None:
    """faulthandler registered as the callback does it; the dump names the function it is stuck in."""
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from backend.contract.heartbeat import register_stack_dump
        keep = register_stack_dump(Path({str(tmp_path)!r}))
        def stuck_in_a_collective():
            print("ready", flush=True)
            time.sleep(60)
        stuck_in_a_collective()
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).resolve().parents[2])
    unregistered = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert child.stdout.readline().strip() == "ready"
        stacks = dump_stacks(tmp_path, [psutil.Process(child.pid), psutil.Process(unregistered.pid)])
        assert list(stacks) == [str(child.pid)]  # never the signal to a process that did not register
        assert "in stuck_in_a_collective" in stacks[str(child.pid)]
        assert unregistered.poll() is None and child.poll() is None
    finally:
        child.kill()
        unregistered.kill()
        child.wait()
        unregistered.wait()
    wait_for(lambda: child.poll() is not None, timeout=5)


def test_desktop_through_notify_send_on_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    fake_executable(bin_dir, "notify-send", f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path / "args.txt"}\n')
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    dispatcher = Dispatcher([DesktopSink()], tmp_path)
    dispatcher.submit(ALERT)
    dispatcher.close(timeout=10)
    assert (tmp_path / "args.txt").read_text().splitlines() == [
        "-u", "critical", "-a", "workbench", "workbench: 20260101-quick-ab12 failed",
        "CUDA out of memory: torch.OutOfMemoryError: CUDA out of memory."]


def test_alerts_still_queued_when_the_supervisor_ends_are_recorded(tmp_path: Path) -> None:
    hook = Hook(fail_first=100)
    backing_off, release = threading.Event(), threading.Event()

    def held_backoff(seconds: float) -> None:  # the dead hook's sink waits here until the test lets it go
        backing_off.set()
        release.wait(15)

    try:
        dispatcher = Dispatcher([WebhookSink(hook.url, "json", retries=3)], tmp_path, sleep=held_backoff)
        dispatcher.submit(ALERT)
        dispatcher.submit(Alert("finished", "finished at step 9", step=9, id="fin"))
        assert backing_off.wait(20), "the first delivery never failed"
        dispatcher.close(timeout=0.5)
        # close came back while the sink still waits on its dead hook: the supervisor never waits on it
        # (bench/watch_sinks_bench.py prints how long close takes against its timeout)
        assert dispatcher.workers[0].thread.is_alive() and not release.is_set()
    finally:
        release.set()
        hook.close()
    records = [json.loads(line) for line in (tmp_path / "deliveries.jsonl").read_text().splitlines()]
    assert ("fin", "gave_up", "the supervisor ended before delivery (waited 0.5 s)") in [
        (r["alert_id"], r["status"], r["error"]) for r in records]


def test_a_failing_command_is_said_with_the_end_of_its_stderr() -> None:
    """The command's last words reach the delivery record (the file's tail, its first lines dropped)."""
    sink = CommandSink("printf 'early line\\n%.0s' $(seq 600) >&2; echo 'disk full: /mnt/alerts' >&2; exit 3")
    with pytest.raises(RuntimeError) as failure:
        sink.send(ALERT)
    said = str(failure.value)
    assert said.startswith("exit code 3: ") and said.endswith("early line\ndisk full: /mnt/alerts")
    assert len(said) <= len("exit code 3: ") + 300


def test_a_damaged_delivery_line_hides_no_other(tmp_path: Path) -> None:
    """deliveries.jsonl with a line cut by a full disk and a line of another shape between two good ones:
    both good ones are read (before, one bad line made the whole record empty), the bad ones counted."""
    from backend.watch.sinks import DeliveryLog, read_deliveries

    log = DeliveryLog(tmp_path)
    log.record(ALERT, "webhook", "delivered", 1, None)
    with open(log.path, "a", encoding="utf-8") as handle:
        handle.write('{"alert_id": "a1b2c3", "sink": "comm\n[1, 2]\n')
    log.record(ALERT, "command", "gave_up", 3, "exit code 3: disk full")
    found, damaged = read_deliveries(log.path)
    assert [(d.sink, d.status, d.attempts, d.error) for d in found] == [
        ("webhook", "delivered", 1, None), ("command", "gave_up", 3, "exit code 3: disk full")]
    assert damaged == 2
    assert log.delivered() == {("a1b2c3", "webhook")}
