"""A webhook is retried 1, 2, 4 and 8 s apart (README, "Watchdog"): the waits between attempts, taken
from an injected sleep, against a local hook that answers 503."""

from __future__ import annotations

import json
from pathlib import Path

from backend.contract.alerts import Alert
from backend.watch.sinks import Dispatcher, WebhookSink
from tests.watch.test_watchdog_runs import Hook

ALERT = Alert("failed", "exit code 1", step=3, run_id="20260101-quick-ab12", id="a1", time=1_700_000_000.0)


def _deliver(fail_first: int, tmp_path: Path) -> tuple[list[float], int, dict]:
    waits: list[float] = []
    hook = Hook(fail_first=fail_first)
    try:
        dispatcher = Dispatcher([WebhookSink(hook.url, "json")], tmp_path, sleep=waits.append)
        dispatcher.submit(ALERT)
        dispatcher.close(timeout=20)
    finally:
        hook.close()
    record = json.loads((tmp_path / "deliveries.jsonl").read_text().splitlines()[-1])
    return waits, hook.requests, record


def test_four_retries_wait_1_2_4_and_8_seconds_then_deliver(tmp_path: Path) -> None:
    waits, requests, record = _deliver(fail_first=4, tmp_path=tmp_path)
    assert waits == [1.0, 2.0, 4.0, 8.0]
    assert requests == 5
    assert (record["status"], record["attempts"]) == ("delivered", 5)


def test_a_hook_that_never_answers_is_given_up_after_the_same_waits(tmp_path: Path) -> None:
    waits, requests, record = _deliver(fail_first=100, tmp_path=tmp_path)
    assert waits == [1.0, 2.0, 4.0, 8.0]  # no wait after the last attempt
    assert requests == 5
    assert (record["status"], record["attempts"]) == ("gave_up", 5)
    assert "503" in record["error"]


def test_a_hook_that_answers_at_the_second_attempt_waited_one_second(tmp_path: Path) -> None:
    waits, requests, record = _deliver(fail_first=1, tmp_path=tmp_path)
    assert waits == [1.0]
    assert (record["status"], record["attempts"], requests) == ("delivered", 2, 2)
