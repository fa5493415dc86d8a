"""Where alerts go besides alerts.jsonl: a webhook, a shell command, the desktop.

Each sink has its own thread and queue, so a dead webhook never delays the command sink and
never blocks the supervisor. Every attempt's outcome is appended to `<run>/watch/deliveries.jsonl`
(alert id, sink, status, attempts, error); an alert already delivered to a sink is never sent
to it again. A sink that fails loses nothing: the alert is in alerts.jsonl whatever happens here.

Secrets never sit in a profile: a webhook URL may hold `${NAME}`, read from the environment
when the alert is sent, and `webhook_token_env` names the variable holding a bearer token.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import msgspec

from backend.contract.alerts import Alert
from backend.core.own_children import signal_session
from backend.core.process_identity import JOB_MARKER_ENV, RUN_MARKER_ENV
from backend.core.tail import last_lines
from backend.watch.config import NotifySection, effective_notify

DELIVERIES_FILE = "deliveries.jsonl"
URGENT = {"failed", "hang", "nonfinite", "loss_scale", "disk", "gpu_memory", "host_memory"}


class PermanentFailure(Exception):
    """Retrying cannot help (bad URL, missing secret, 4xx)."""


class Sink:
    name = "sink"
    max_attempts = 5
    backoff_seconds = 1.0

    def send(self, alert: Alert) -> None:
        raise NotImplementedError


def _expand(template: str) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in os.environ:
            raise PermanentFailure(f"environment variable {name} is not set")
        return os.environ[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, template)


def _hide_values(text: str, template: str) -> str:
    """`text` with every value that `${NAME}` of the template stands for written back as `${NAME}`: an
    error message never carries the secret a URL was built from (deliveries.jsonl is a plain file)."""
    for match in re.finditer(r"\$\{(\w+)\}|\$(\w+)", template):
        name = match.group(1) or match.group(2)
        value = os.environ.get(name, "")
        for written in {value, repr(value)[1:-1]} if value else ():  # as it is and as a repr quotes it
            text = text.replace(written, "${" + name + "}")
    return text


def _without_dumps(data: dict[str, Any]) -> dict[str, Any]:
    """The webhook gets a hang's summary, not its stack dumps (they are in the run folder's hang report, #39)."""
    evidence = data.get("evidence")
    if isinstance(evidence, dict) and "stacks" in evidence:
        data = {**data, "evidence": {k: v for k, v in evidence.items() if k != "stacks"}}
    return data


def _title(alert: Alert) -> str:
    return f"workbench: {alert.run_id} {alert.kind}"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A webhook's 3xx is an answer, not a hop: urllib would resend as a GET (body lost) with the
    Authorization header to whatever host the Location names."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_WEBHOOK_OPENER = urllib.request.build_opener(_NoRedirect)


class WebhookSink(Sink):
    name = "webhook"

    def __init__(self, url: str, fmt: str = "json", token_env: str | None = None, timeout: float = 10.0,
                 retries: int = 4):
        self.url_template, self.fmt, self.token_env, self.timeout = url, fmt, token_env, timeout
        self.max_attempts = retries + 1

    def request(self, alert: Alert) -> urllib.request.Request:
        url = _expand(self.url_template)
        if not url.startswith(("http://", "https://")):
            raise PermanentFailure("the webhook is not an http(s) URL")
        headers = {"User-Agent": "finetune-workbench"}
        if self.fmt == "ntfy":
            body = alert.line().encode("utf-8")
            headers.update({"Content-Type": "text/plain; charset=utf-8", "Title": _title(alert),
                            "Priority": "high" if alert.kind in URGENT else "default", "Tags": alert.kind})
        elif self.fmt == "slack":  # Slack reads `text`, Discord reads `content`; each ignores the other
            text = alert.line()
            body = json.dumps({"text": text, "content": text}).encode("utf-8")
            headers["Content-Type"] = "application/json"
        else:
            body = json.dumps({**_without_dumps(alert.to_json()), "line": alert.line()}, default=str).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self.token_env:
            token = os.environ.get(self.token_env)
            if not token:
                raise PermanentFailure(f"environment variable {self.token_env} is not set")
            headers["Authorization"] = f"Bearer {token}"
        return urllib.request.Request(url, data=body, headers=headers, method="POST")

    def send(self, alert: Alert) -> None:
        try:
            self._post(alert)
        except PermanentFailure as err:
            raise PermanentFailure(_hide_values(str(err), self.url_template)) from None
        except (ValueError, http.client.InvalidURL):  # their messages quote the URL with its secrets
            raise PermanentFailure(f"{self.url_template} is not a valid URL once its values are filled in") from None
        except Exception as err:  # an invalid URL's message (ValueError, InvalidURL) quotes the expanded URL
            raise RuntimeError(_hide_values(str(err) or type(err).__name__, self.url_template)) from None

    def _post(self, alert: Alert) -> None:
        try:
            with _WEBHOOK_OPENER.open(self.request(alert), timeout=self.timeout) as response:
                response.read(1024)
        except urllib.error.HTTPError as err:
            if 300 <= err.code < 400:  # the POST did not arrive; following it would hand the token to another host
                where = err.headers.get("Location", "") if err.headers else ""
                raise PermanentFailure(f"HTTP {err.code} {err.reason}: the webhook redirects"
                                       + (f" to {where}" if where else "") + "; redirects are not followed "
                                       "(give the final URL)") from None
            if 400 <= err.code < 500 and err.code not in (408, 429):
                raise PermanentFailure(f"HTTP {err.code} {err.reason}") from None
            raise RuntimeError(f"HTTP {err.code} {err.reason}") from None
        except urllib.error.URLError as err:
            raise RuntimeError(f"cannot reach the webhook: {err.reason}") from None


class CommandSink(Sink):
    """A shell command that reads the alert as JSON on stdin. It runs in a session of its own, so a
    timeout kills everything it started (not only the shell), and without the run's marker, so the
    supervisor never waits on it as on a process of the run. Only the last KB of its stderr are kept."""

    name = "command"
    max_attempts = 3
    kept_bytes = 4096

    def __init__(self, command: str, timeout: float = 60.0):
        self.command, self.timeout = command, timeout

    def send(self, alert: Alert) -> None:
        payload = json.dumps({**alert.to_json(), "line": alert.line()}, default=str)
        with tempfile.NamedTemporaryFile(prefix="workbench-sink-") as errors:
            process = subprocess.Popen(self.command, shell=True, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                       stderr=errors, env=_unmarked_env(), start_new_session=True)
            try:
                process.communicate(payload.encode("utf-8"), timeout=self.timeout)
            except subprocess.TimeoutExpired:
                signal_session(process, signal.SIGKILL)
                process.wait()
                raise PermanentFailure(f"timed out after {self.timeout:g} s; everything it started was killed") \
                    from None
            if process.returncode != 0:
                said = last_lines(errors.name, self.kept_bytes).text.strip()[-300:]
                raise RuntimeError(f"exit code {process.returncode}: {said}")


def _unmarked_env() -> dict[str, str]:
    """The environment without the run's (or job's) marker: a sink's process is none of the run's."""
    return {k: v for k, v in os.environ.items() if k not in (RUN_MARKER_ENV, JOB_MARKER_ENV)}


class DesktopSink(Sink):
    name = "desktop"
    max_attempts = 1

    def send(self, alert: Alert) -> None:
        program = shutil.which("notify-send")
        if program is None:
            raise PermanentFailure("notify-send is not installed")
        urgency = "critical" if alert.kind in URGENT else "normal"
        result = subprocess.run([program, "-u", urgency, "-a", "workbench", _title(alert), alert.message],
                                capture_output=True, text=True, timeout=15, env=_unmarked_env())
        if result.returncode != 0:
            raise PermanentFailure(f"notify-send: {result.stderr.strip() or result.returncode}")


def sinks_for(notify: NotifySection) -> list[Sink]:
    sinks: list[Sink] = []
    if notify.webhook:
        retries = 4 if notify.webhook_retries is None else notify.webhook_retries
        sinks.append(WebhookSink(notify.webhook, notify.webhook_format or "json", notify.webhook_token_env,
                                 retries=retries))
    if notify.command:
        sinks.append(CommandSink(notify.command))
    if notify.desktop:
        sinks.append(DesktopSink())
    return sinks


class Delivery(msgspec.Struct, frozen=True):
    """One line of deliveries.jsonl: what became of one alert at one sink."""

    alert_id: str
    sink: str
    status: Literal["delivered", "gave_up"]
    attempts: int
    error: str | None = None
    kind: str = ""
    time: float = 0.0


_DELIVERY = msgspec.json.Decoder(Delivery)


def read_deliveries(path: Path) -> tuple[list[Delivery], int]:
    """The file's deliveries, and how many of its lines are damaged (skipped: one bad line hides no other)."""
    try:
        data = path.read_bytes()
    except OSError:
        return [], 0
    found, damaged = [], 0
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            found.append(_DELIVERY.decode(line))
        except msgspec.DecodeError:
            damaged += 1
    return found, damaged


class DeliveryLog:
    """`<run>/watch/deliveries.jsonl`: one line per finished delivery (delivered or given up)."""

    def __init__(self, folder: Path):
        self.path = Path(folder) / DELIVERIES_FILE
        self._lock = threading.Lock()

    def delivered(self) -> set[tuple[str, str]]:
        return {(d.alert_id, d.sink) for d in read_deliveries(self.path)[0] if d.status == "delivered"}

    def record(self, alert: Alert, sink: str, status: Literal["delivered", "gave_up"], attempts: int,
               error: str | None) -> None:
        delivery = Delivery(alert.id, sink, status, attempts, error, alert.kind, time.time())
        line = msgspec.json.encode(delivery).decode() + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)  # errors may name hosts
            with open(fd, "a", encoding="utf-8") as handle:
                handle.write(line)


class _SinkWorker:
    """One sink's thread. Every alert it takes gets exactly one record (delivered or gave_up), also the
    one in flight when the dispatcher closes: `abandon` records it and the worker's late word is dropped."""

    def __init__(self, sink: Sink, log: DeliveryLog, sleep: Callable[[float], None]):
        self.sink, self.log, self.sleep = sink, log, sleep
        self.queue: queue.Queue[Alert | None] = queue.Queue()
        self._lock = threading.Lock()
        self._in_flight: Alert | None = None
        self._abandoned = False
        self.thread = threading.Thread(target=self._loop, name=f"workbench-sink-{sink.name}", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            alert = self.queue.get()
            if alert is None:
                return
            with self._lock:
                self._in_flight = alert
            try:
                self.deliver(alert)
            except Exception as err:  # a sink's bug must not end the worker
                self._record(alert, "gave_up", 0, f"internal error: {err}")
            with self._lock:
                self._in_flight = None

    def _record(self, alert: Alert, status: Literal["delivered", "gave_up"], attempts: int, error: str | None) -> None:
        with self._lock:
            if self._abandoned:
                return  # already recorded by `abandon`
            self.log.record(alert, self.sink.name, status, attempts, error)
            self._in_flight = None

    def deliver(self, alert: Alert) -> None:
        if (alert.id, self.sink.name) in self.log.delivered():
            return
        error = None
        for attempt in range(1, self.sink.max_attempts + 1):
            try:
                self.sink.send(alert)
                self._record(alert, "delivered", attempt, None)
                return
            except PermanentFailure as err:
                self._record(alert, "gave_up", attempt, str(err))
                return
            except Exception as err:
                error = str(err) or type(err).__name__
            if attempt < self.sink.max_attempts:
                self.sleep(self.sink.backoff_seconds * 2 ** (attempt - 1))
        self._record(alert, "gave_up", self.sink.max_attempts, error)

    def abandon(self, waited: float) -> None:
        """The supervisor ends: the alert being sent and those still queued are recorded as given up."""
        with self._lock:
            self._abandoned = True
            if self._in_flight is not None:
                self.log.record(self._in_flight, self.sink.name, "gave_up", 0,
                                f"the supervisor ended while it was being sent (waited {waited:g} s); "
                                "it may not have arrived")
            while True:
                try:
                    alert = self.queue.get_nowait()
                except queue.Empty:
                    break
                if alert is not None:
                    self.log.record(alert, self.sink.name, "gave_up", 0,
                                    f"the supervisor ended before delivery (waited {waited:g} s)")


class Dispatcher:
    """Hands each alert to every sink's worker; `close` waits a bounded time for the last ones."""

    def __init__(self, sinks: list[Sink], folder: Path, kinds: list[str] | None = None,
                 sleep: Callable[[float], None] = time.sleep):
        self.log = DeliveryLog(folder)
        self.kinds = set(kinds or ())
        self.workers = [_SinkWorker(sink, self.log, sleep) for sink in sinks]

    @classmethod
    def for_run(cls, run_dir: Path, profile_notify: NotifySection) -> Dispatcher:
        notify = effective_notify(profile_notify)
        return cls(sinks_for(notify), Path(run_dir) / "watch", notify.kinds)

    def submit(self, alert: Alert) -> None:
        if self.kinds and alert.kind not in self.kinds:
            return
        for worker in self.workers:
            worker.queue.put(alert)

    def close(self, timeout: float = 30.0) -> None:
        """Let the sinks finish, for at most `timeout` seconds in all; what is still being sent or
        queued then is recorded as given up (it stays in alerts.jsonl, and `workbench inbox` shows it)."""
        deadline = time.monotonic() + timeout
        for worker in self.workers:
            worker.queue.put(None)
        for worker in self.workers:
            worker.thread.join(max(0.0, deadline - time.monotonic()))
        for worker in self.workers:
            worker.abandon(timeout)


def describe_deliveries(run_dir: Path) -> list[Delivery]:
    """A run's deliveries, damaged lines left out."""
    return read_deliveries(Path(run_dir) / "watch" / DELIVERIES_FILE)[0]
