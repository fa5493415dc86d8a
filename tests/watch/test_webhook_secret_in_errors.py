"""A webhook `${NAME}` whose value makes the URL invalid never lands in deliveries.jsonl, which only its
owner reads (#29 Low)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from backend.contract.alerts import Alert
from backend.watch.sinks import Dispatcher, WebhookSink

ALERT = Alert(kind="failed", message="CUDA out of memory", step=812, id="a1b2c3", run_id="20260101-quick-ab12")


def test_a_secret_that_breaks_the_url_is_not_written_to_the_delivery_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NTFY_TOPIC", "s3cret topic\nwith a newline")
    dispatcher = Dispatcher([WebhookSink("https://ntfy.example/${NTFY_TOPIC}", "ntfy", retries=0)], tmp_path,
                            sleep=lambda s: None)
    dispatcher.submit(ALERT)
    dispatcher.close(timeout=10)

    text = (tmp_path / "deliveries.jsonl").read_text()
    record = json.loads(text)
    assert record["status"] == "gave_up"
    assert "s3cret" not in text
    assert "${NTFY_TOPIC}" in record["error"]
    assert stat.S_IMODE((tmp_path / "deliveries.jsonl").stat().st_mode) == 0o600
