"""How long do alert sinks hold the run's supervisor?

  give-up:  a webhook whose secret is missing (`${VAR}` unset) - time from submit to the record;
  close:    `Dispatcher.close(timeout)` while a sink keeps retrying a dead webhook (503, real back-off)
            - the time close takes against its timeout (ratio 1.0: it waited exactly its bound).
Prints milliseconds and ratios (the tests check the behaviour: no back-off, close returns while the
sink still waits; the figures live here, not in timed asserts).

    .venv/bin/python bench/watch_sinks_bench.py [--repeats 5] [--timeout 1.0]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from backend.contract.alerts import Alert  # noqa: E402
from backend.watch.sinks import Dispatcher, WebhookSink  # noqa: E402

ALERT = Alert("failed", "CUDA out of memory", step=812, run_id="bench-run", id="bench")


class _DeadHook(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(503)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def give_up_ms() -> float:
    with tempfile.TemporaryDirectory() as folder:
        dispatcher = Dispatcher([WebhookSink("${NO_SUCH_WORKBENCH_BENCH_VAR}", "json")], Path(folder))
        started = time.perf_counter()
        dispatcher.submit(ALERT)
        dispatcher.close(timeout=30)
        return (time.perf_counter() - started) * 1000


def close_ms(url: str, timeout: float) -> float:
    with tempfile.TemporaryDirectory() as folder:
        dispatcher = Dispatcher([WebhookSink(url, "json", retries=5)], Path(folder))
        dispatcher.submit(ALERT)
        dispatcher.submit(Alert("finished", "finished at step 9", step=9, id="fin"))
        started = time.perf_counter()
        dispatcher.close(timeout=timeout)
        return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=1.0)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _DeadHook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    try:
        give_up = statistics.median(give_up_ms() for _ in range(args.repeats))
        close = statistics.median(close_ms(url, args.timeout) for _ in range(args.repeats))
    finally:
        server.shutdown()
    print(f"missing secret, submit to give-up: {give_up:8.1f} ms (median of {args.repeats})")
    print(f"close({args.timeout:g} s) with a dead webhook: {close:8.1f} ms (median of {args.repeats}); "
          f"ratio to its timeout {close / (args.timeout * 1000):.2f}")


if __name__ == "__main__":
    main()
