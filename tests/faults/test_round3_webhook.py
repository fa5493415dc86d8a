"""Issue #29, High 3: a webhook that answers 3xx gets no second request anywhere, keeps its bearer
token to itself, and the delivery is recorded as failed, saying it was a redirect."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from backend.contract.alerts import Alert
from backend.watch.sinks import Dispatcher, WebhookSink

ALERT = Alert("failed", "boom", step=3, run_id="20260101-x-ab12", id="r3d1", time=1_700_000_000.0)


class Server:
    """A local HTTP server recording every request (method, path, Authorization header)."""

    def __init__(self, answer: int, location: str = "") -> None:
        self.seen: list[tuple[str, str, str | None]] = []
        seen = self.seen

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                seen.append((self.command, self.path, self.headers.get("Authorization")))
                self.send_response(answer)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize("code", [301, 302, 307])
def test_a_redirecting_webhook_is_a_failed_delivery_and_the_token_stays(tmp_path: Path, code: int,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOK_TOKEN", "tk_secret")
    elsewhere = Server(200)
    hook = Server(code, location=elsewhere.url)
    try:
        dispatcher = Dispatcher([WebhookSink(hook.url, "json", token_env="HOOK_TOKEN")], tmp_path,
                                sleep=lambda s: None)
        dispatcher.submit(ALERT)
        dispatcher.close(timeout=20)
    finally:
        hook.close()
        elsewhere.close()
    assert hook.seen == [("POST", "/hook", "Bearer tk_secret")]  # asked once: a redirect is not retried
    assert elsewhere.seen == []  # the second host got nothing, the token least of all
    record = json.loads((tmp_path / "deliveries.jsonl").read_text())
    assert (record["status"], record["attempts"]) == ("gave_up", 1)
    assert record["error"].startswith(f"HTTP {code} ") and f"redirects to {elsewhere.url}" in record["error"]
