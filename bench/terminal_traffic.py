"""Terminal traffic: the bytes the real `workbench` TUI writes to its terminal, per screen, per second.

    .venv/bin/python bench/terminal_traffic.py [--sizes 120x36,80x24] [--idle-seconds 10]
        [--live-seconds 20] [--refresh SECONDS] [--skip-live] [--skip-chat] [--low-bandwidth] [--keep DIR]

What a user on a slow SSH link pays is what the app writes to its pseudo-terminal. This bench
starts `workbench` in a pty (TERM=xterm-256color) at each size, drives it with keys as a user
would, and counts the bytes it writes:

- first paint of each screen: bytes from the key (or start) until the screen is quiet;
- idle: bytes/s on a screen where nothing changes (launch workspace, runs list with finished
  runs only, monitor of a finished run, compare view of two finished runs) — budget 0;
- monitor of a live run: a real run of the embedded model (the quickstart made long, one log
  line per step) trains while the monitor is open — budget 4 KiB/s at 120x36;
- chat while an answer streams (the run's newest checkpoint): budget 2x the bytes of the
  streamed text plus a fixed cost per update (PER_UPDATE_BYTES, one update per token); and the
  rest of one answer (the message shown, the status line, its end): SEND_BYTES_PER_CELL a cell, once.

Each figure is printed beside its budget; the exit status is 1 when one is over. The app and
the training are niced and the training uses one thread, so the bench stays within the
machine's shared cores. Runs and the run index live in a temporary folder (or in --keep DIR, kept
between runs of the bench: with --skip-live the chat then talks to the stopped run's checkpoint of
an earlier run instead of training one again); the model cache is the user's (the embedded model
is built once).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "events"
WORKBENCH = [sys.executable, "-m", "backend.cli"]  # the code under --app-repo (PYTHONPATH), default this one
KIB = 1024
LIVE_BUDGET = 4 * KIB  # bytes/s of the live monitor at the default interval: a link budget, at every size
PAINT_BYTES_PER_CELL = 16  # first paint: at most one full frame of 16 bytes a cell (glyph, colours, moves)
PER_UPDATE_BYTES = 160  # chat: cursor moves, styles and the last line of the answer, per streamed update
SEND_BYTES_PER_CELL = 4  # chat: the message shown, the status line, the end, once an answer (a quarter of a paint)
QUIET_SECONDS = 1.5  # a screen is painted once it wrote nothing for this long
SHOWN = {"launch": r"quickstart", "runs": r"Mark", "monitor": r"Smooth",  # words each screen shows at 80x24
         "compare": r"compare 2 runs"}
FINISHED_RUNS = ("quickstart-short", "cpu-fp16-overflow")  # newest first: the runs list's order
DUMP_DIR: Path | None = None  # --dump DIR
CHAT_IDLE_SECONDS = 5.0
PROMPT = "Who are you? Tell me about yourself in detail."
ANSI = re.compile(rb"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>NOPM78]|\x1b\][^\x07]*\x07")
KEYS = {"f3": b"\x1bOR", "enter": b"\r", "escape": b"\x1b", "ctrl+q": b"\x11", "ctrl+o": b"\x0f",
        "tab": b"\t", "backspace": b"\x7f", "space": b" ", "down": b"\x1b[B",
        "shift+tab": b"\x1b[Z", "ctrl+e": b"\x05"}


def say(*parts: object) -> None:
    """Progress on stderr (the figures go to stdout)."""
    print(time.strftime("%H:%M:%S"), *parts, file=sys.stderr, flush=True)


@dataclass
class Figure:
    size: tuple[int, int]
    name: str
    value: float
    unit: str
    budget: float | None
    note: str = ""

    @property
    def over(self) -> bool:
        return self.budget is not None and self.value > self.budget

    def line(self) -> str:
        cols, rows = self.size
        budget = "-" if self.budget is None else f"{self.budget:,.0f}"
        verdict = "" if self.budget is None else ("OVER" if self.over else "ok")
        return (f"{cols}x{rows:<3} {self.name:<34} {self.value:>10,.0f} {self.unit:<7} budget {budget:>8} "
                f"{verdict:<4} {self.note}")


@dataclass
class Terminal:
    """`workbench` in a pseudo-terminal: every byte it writes is counted with its time."""

    cols: int
    rows: int
    env: dict[str, str]
    args: list[str] = field(default_factory=list)
    chunks: list[tuple[float, int]] = field(default_factory=list)
    text: bytearray = field(default_factory=bytearray)

    def start(self) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", self.rows, self.cols, 0, 0))
        self.master = master
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            ["nice", "-n", "5", *WORKBENCH, *self.args], stdin=slave, stdout=slave, stderr=slave,
            env=self.env, cwd=self.env["BENCH_CWD"], start_new_session=True, close_fds=True)
        os.close(slave)
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            with self.lock:
                self.chunks.append((time.monotonic(), len(data)))
                self.text += data
                if len(self.text) > 4 << 20:
                    del self.text[: 2 << 20]

    def press(self, *keys: str) -> None:
        for key in keys:
            os.write(self.master, KEYS.get(key, key.encode()))
            time.sleep(0.15)

    def total(self) -> int:
        with self.lock:
            return sum(n for _, n in self.chunks)

    def bytes_between(self, start: float, end: float) -> int:
        with self.lock:
            return sum(n for t, n in self.chunks if start <= t < end)

    def last_write(self) -> float:
        with self.lock:
            return self.chunks[-1][0] if self.chunks else self.started

    def screen_text(self, since: int = 0) -> str:
        with self.lock:
            raw = bytes(self.text[since:])
        return ANSI.sub(b"", raw).decode("utf-8", errors="replace")

    def chunk_of(self, since: int, pattern: re.Pattern[bytes], last: bool = False) -> int | None:
        """The index (in `chunks`) of the read holding the first (or last) match of `pattern` in the raw
        bytes from offset `since` of the kept text; None when it is not there."""
        with self.lock:
            raw = bytes(self.text[since:])
            sizes = [n for _, n in self.chunks]
            kept = len(self.text)
        found = list(pattern.finditer(raw))
        if not found:
            return None
        offset = kept - len(raw) + (found[-1] if last else found[0]).end()  # in the kept text
        written_before = sum(sizes) - kept  # bytes trimmed from the kept text's head
        position = 0
        for index, n in enumerate(sizes):
            position += n
            if position - written_before >= offset:
                return index
        return None

    def bytes_of_chunks(self, first: int, end: int) -> int:
        with self.lock:
            return sum(n for _, n in self.chunks[first:end])

    def mark(self) -> int:
        with self.lock:
            return len(self.text)

    def wait_quiet(self, quiet: float = QUIET_SECONDS, timeout: float = 90.0) -> tuple[int, float]:
        """Wait until nothing was written for `quiet` seconds; bytes written and seconds until the last write."""
        began = time.monotonic()
        while True:
            time.sleep(0.1)
            now = time.monotonic()
            if now - max(self.last_write(), began) >= quiet or now - began > timeout:
                break
        last = self.last_write()
        return self.bytes_between(began, now + 1), max(0.0, last - began)

    def first_paint(self, expect: str, quiet: float = 2.0, cap: float = 60.0, *keys: str) -> tuple[int, str]:
        """Press `keys`; bytes from the first key until the screen showed `expect` (a regex) and then wrote
        nothing for `quiet` s. Counted from before the keys: a screen that paints while the last key's
        pause runs is neither missed nor undercounted."""
        began, since = time.monotonic(), self.mark()
        self.press(*keys)
        if not self.wait_for_text(expect, since, timeout=cap):
            raise RuntimeError(f"the screen never showed {expect!r}:\n{self.screen_text(since)[-2000:]}")
        while time.monotonic() - began < cap:
            time.sleep(0.05)
            last = self.last_write()
            if time.monotonic() - last >= quiet:
                return self.bytes_between(began, last + 1), f"painted in {last - began:.1f} s"
        return self.bytes_between(began, began + cap), f"still writing after {cap:g} s"

    def wait_for_text(self, pattern: str, since: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        compiled = re.compile(pattern)
        while time.monotonic() < deadline:
            if compiled.search(self.screen_text(since)):
                return True
            if self.process.poll() is not None:
                raise RuntimeError(f"workbench exited ({self.process.returncode}):\n{self.screen_text()[-2000:]}")
            time.sleep(0.2)
        return False

    def rate(self, seconds: float) -> float:
        began = time.monotonic()
        time.sleep(seconds)
        return self.bytes_between(began, began + seconds) / seconds

    def close(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        os.close(self.master)


def finished_runs(workspace: Path) -> list[Path]:
    """Two finished runs of the embedded model (recorded fixtures), registered in the run index. The
    newest (quickstart-short) is the list's first row: its monitor is measured; both are compared."""
    from backend.rundir import index

    folders = []
    for name in FINISHED_RUNS:
        folder = workspace / f"finished-{name}"
        if folder.exists():  # --keep: registered by an earlier run of the bench
            continue
        folder.mkdir(parents=True)
        for suffix, target in (("jsonl", "events.jsonl"), ("output.log", "output.log"),
                               ("state.json", "state.json"), ("toml", "profile.toml")):
            shutil.copy(FIXTURES / f"{name}.{suffix}", folder / target)
        index.register(folder)
        folders.append(folder)
    return folders


def start_live_run():
    """The quickstart made long (one log line per step, a checkpoint every 20 steps), one thread."""
    from backend.core.paths import SHIPPED_PROFILES_DIR
    from backend.profile import load_profile
    from backend.runs.start import start_run

    profile = load_profile(SHIPPED_PROFILES_DIR / "quickstart.toml")
    profile.name = "traffic-live"
    profile.training.num_train_epochs = 200.0
    profile.training.logging_steps = 1
    profile.training.save_steps = 20
    profile.training.save_total_limit = 2
    return start_run(profile, base_dir=SHIPPED_PROFILES_DIR)


def kept_live_run(workspace: Path) -> Path | None:
    """--keep: a stopped live run of an earlier run of the bench, with a checkpoint to chat with."""
    from backend.rundir.layout import RunFolder

    for folder in sorted(workspace.glob("*-traffic-live-*"), reverse=True):
        run = RunFolder(folder)
        if run.checkpoints() and not run.state_or_damaged().is_active:
            return folder
    return None


def wait_for_steps(run_path: Path, steps: int, timeout: float = 300.0) -> bool:
    from backend.series import load_store

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = run_path / "events.jsonl"
        if events.exists():
            last = load_store(events).last_log or {}
            if int(last.get("step") or 0) >= steps and any(run_path.glob("**/checkpoint-*")):
                return True
        time.sleep(2.0)
    return False


def paint_budget(size: tuple[int, int]) -> float:
    return PAINT_BYTES_PER_CELL * size[0] * size[1]


def measure_idle_screens(size: tuple[int, int], env: dict[str, str], args: list[str], idle: float) -> list[Figure]:
    figures: list[Figure] = []
    term = Terminal(*size, env=env, args=args)
    term.start()
    try:
        # the workspace fills in as its inspection workers report: painted once quiet for 10 s
        painted, when = term.first_paint(SHOWN["launch"], quiet=10.0)
        figures.append(Figure(size, "first paint: launch", painted, "bytes", paint_budget(size), when))
        figures.append(Figure(size, "launch idle", term.rate(idle), "B/s", 0))
        for key, screen, name in (("f3", "runs", "runs (finished runs only)"),
                                  ("enter", "monitor", "monitor (finished run)")):
            painted, when = term.first_paint(SHOWN[screen], 2.0, 60.0, key)
            figures.append(Figure(size, f"first paint: {name}", painted, "bytes", paint_budget(size), when))
            figures.append(Figure(size, f"{name} idle", term.rate(idle), "B/s", 0))
        # back to the list; mark both finished runs; compare their loss
        term.first_paint(SHOWN["runs"], 1.0, 60.0, "escape")
        term.press("space", "down", "space")
        term.wait_quiet(1.0)
        painted, when = term.first_paint(SHOWN["compare"], 2.0, 60.0, "c")
        figures.append(Figure(size, "first paint: compare (2 runs)", painted, "bytes", paint_budget(size), when))
        figures.append(Figure(size, "compare idle", term.rate(idle), "B/s", 0))
    finally:
        term.close()
    return figures


def open_monitor(term: Terminal) -> None:
    """From the start: the runs list (F3), then the first run's monitor (running runs come first)."""
    term.first_paint(SHOWN["launch"], 3.0)
    term.first_paint(SHOWN["runs"], 1.0, 60.0, "f3")
    term.first_paint(SHOWN["monitor"], 1.0, 20.0, "enter")


def measure_live(size: tuple[int, int], env: dict[str, str], args: list[str], seconds: float) -> list[Figure]:
    term = Terminal(*size, env=env, args=args)
    term.start()
    try:
        open_monitor(term)
        since = term.mark()
        rate = term.rate(seconds)
        if DUMP_DIR is not None:
            with term.lock:
                (DUMP_DIR / f"live-{size[0]}x{size[1]}.bin").write_bytes(bytes(term.text[since:]))
    finally:
        term.close()
    return [Figure(size, "monitor (live run)", rate, "B/s", LIVE_BUDGET, f"over {seconds:g} s")]


DONE = re.compile(rb"(\d+) tokens in ([\d.]+) s(?: \(first ([\d.]+) s\))?")


def answer_figures(term: Terminal, size: tuple[int, int], prompt: str, label: str) -> list[Figure]:
    """Type `prompt`, send it, count the bytes until the answer ended (see measure_chat)."""
    term.press(*prompt)
    term.wait_quiet()  # the typed prompt's echo is not the answer's traffic
    since, began = term.mark(), time.monotonic()
    say(f"{size}: asking ({label})")
    term.press("enter")
    done = term.wait_for_text(DONE.pattern.decode(), since, timeout=300)
    term.wait_quiet()
    ended = term.last_write()
    found = DONE.search(term.screen_text(since).encode())
    # the streamed paints lie between the status line saying "answering" (the end of sending: the message
    # and an empty answer drawn; older versions: the keys turning to "Stop") and the status line that says
    # the answer ended
    busy = term.chunk_of(since, re.compile(rb"answering - esc stops"))
    if busy is None:  # an older workbench (--app-repo)
        busy = term.chunk_of(since, re.compile(rb"Stop"), last=True)
    status = term.chunk_of(since, re.compile(rb"tokens in [\d.]+ s"))
    total = term.bytes_between(began, ended + 1)
    if DUMP_DIR is not None:  # --dump: the answer's bytes as the terminal got them
        with term.lock:
            raw = bytes(term.text[since:])
        (DUMP_DIR / f"chat-{re.sub(r'[^a-z0-9]+', '-', label)}-{size[0]}x{size[1]}.bin").write_bytes(raw)
    if not done or found is None or busy is None or status is None:
        return [Figure(size, f"chat, {label} (all)", total, "bytes", None, "the answer never ended")]
    tokens, seconds = int(found.group(1)), float(found.group(2))
    first = float(found.group(3)) if found.group(3) else 0.0
    streaming = term.bytes_of_chunks(busy + 1, status)
    budget = 2 * tokens + PER_UPDATE_BYTES * (tokens + 1)
    note = f"{tokens} tokens in {seconds:.1f} s, first after {first:.2f} s"
    return [Figure(size, f"chat streaming ({label})", streaming, "bytes", budget, note),
            Figure(size, f"chat send + end ({label})", total - streaming, "bytes",
                   SEND_BYTES_PER_CELL * size[0] * size[1], f"all of the answer: {total:,} B")]


def measure_chat(size: tuple[int, int], env: dict[str, str], args: list[str]) -> list[Figure]:
    """Open the (stopped) live run's monitor, chat with its newest checkpoint, count the bytes of two answers:
    the model's own (short: the tiny model says who it is), then a long one (temperature 2: it rambles to
    the 256 new tokens allowed).

    Per answer two figures. Streaming: from the status line saying "answering" (the message is shown;
    older versions: the keys turning to "Stop") until the pane says the answer ended; budget 2 x the
    text + PER_UPDATE_BYTES per update, one update per token at most (tokens are painted together every
    0.1 s) and one for the end. The text is counted as one byte per token: a lower bound of its size, so
    the budget is at most this strict. Sending and ending: the rest of the answer's bytes (the message
    shown, the status line saying "answering" and then that the answer ended, the answer's final
    height); budget SEND_BYTES_PER_CELL per cell of the terminal, once per answer. And the chat idle
    after the first answer (budget 0)."""
    term = Terminal(*size, env=env, args=args)
    term.start()
    try:
        open_monitor(term)
        since = term.mark()
        say(f"{size}: chat opened, loading the model")
        term.press("t")
        if not term.wait_for_text(r"ready - loaded", since, timeout=300):
            return [Figure(size, "chat streaming", 0, "bytes", None, "the model never loaded")]
        term.wait_quiet()
        figures = answer_figures(term, size, PROMPT, "first answer")
        idle = term.rate(CHAT_IDLE_SECONDS)  # the answer stands, the cursor in the prompt: nothing to send
        figures.insert(0, Figure(size, "chat idle (after an answer)", idle, "B/s", 0, f"over {CHAT_IDLE_SECONDS:g} s"))
        # temperature 2 (the settings column: prompt <- max tokens <- top-p <- temperature), back to the prompt
        term.press("shift+tab", "shift+tab", "shift+tab", "ctrl+e", *["backspace"] * 6, "2", "tab", "tab", "tab")
        term.wait_quiet()
        figures += answer_figures(term, size, "Tell me a long story.", "2nd answer, temp 2")
    finally:
        term.close()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="120x36,80x24")
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--live-seconds", type=float, default=20.0)
    parser.add_argument("--refresh", type=float, default=None, help="pass --refresh SECONDS to workbench")
    parser.add_argument("--low-bandwidth", action="store_true", help="pass --low-bandwidth to workbench")
    parser.add_argument("--app-repo", type=Path, default=REPO,
                        help="measure the workbench in this folder (e.g. a `git archive` of an older commit)")
    parser.add_argument("--skip-idle", action="store_true")
    parser.add_argument("--skip-live", action="store_true")
    parser.add_argument("--skip-chat", action="store_true")
    parser.add_argument("--dump", type=Path, default=None, help="write the raw bytes of the live monitor and of each chat answer here")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the runs and the run index here; with --skip-live, chat with a stopped run kept there")
    args = parser.parse_args()
    global DUMP_DIR
    DUMP_DIR = args.dump
    app_repo = args.app_repo.resolve()
    sys.path.insert(0, str(app_repo))
    os.environ["PYTHONPATH"] = str(app_repo)
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    app_args = (["--refresh", str(args.refresh)] if args.refresh else []) + (
        ["--low-bandwidth"] if args.low_bandwidth else [])

    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="traffic-") as tmp:
        root = Path(tmp) if args.keep is None else args.keep.resolve()
        env = {**os.environ, "TERM": "xterm-256color", "COLORTERM": "", "WORKBENCH_DATA_DIR": str(root / "data"),
               "WORKBENCH_WORKSPACE": str(root / "runs"), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "BENCH_CWD": str(root), "LINES": "", "COLUMNS": ""}
        del env["LINES"], env["COLUMNS"]
        os.environ.update({k: env[k] for k in ("WORKBENCH_DATA_DIR", "WORKBENCH_WORKSPACE", "OMP_NUM_THREADS")})
        finished_runs(root / "runs")
        for size in sizes if not args.skip_idle else ():
            figures += measure_idle_screens(size, env, app_args, args.idle_seconds)
            print("\n".join(f.line() for f in figures[-8:]), flush=True)
        kept = kept_live_run(root / "runs") if args.skip_live and args.keep is not None else None
        if kept is not None:
            say(f"chatting with the kept run {kept.name}")
        elif not (args.skip_live and args.skip_chat):  # the chat talks to the live run's checkpoint
            from backend.runs.stop import stop_run

            run = start_live_run()
            try:
                if not wait_for_steps(run.path, 20):
                    print("the live run did not reach step 20 with a checkpoint in time", file=sys.stderr)
                    return 2
                for size in sizes if not args.skip_live else ():
                    figures += measure_live(size, env, app_args, args.live_seconds)
                    print(figures[-1].line(), flush=True)
            finally:
                stop_run(run)
        if not args.skip_chat:
            for size in sizes:
                answer = measure_chat(size, env, app_args)
                figures += answer
                print("\n".join(f.line() for f in answer), flush=True)
    print("\nterminal traffic of `workbench` (TERM=xterm-256color)")
    for figure in figures:
        print(figure.line())
    over = [f for f in figures if f.over]
    print(f"\n{len(over)} figure(s) over budget" if over else "\nevery budget holds")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
