"""Cold start of the `workbench` TUI to its first frame, beside the cost of importing swift.

Each run starts a fresh interpreter in a pseudo-terminal (80x24, as over SSH) and runs the
`workbench` console script's entry point with no arguments (Typer dispatch included), which
opens the quickstart profile; the first frame is when Textual reports the first frame of the launch
screen (`App.on_ready`: its status line, "Opening …" and footer), and the time to the form built (the
profile read, the form mounted: #41 builds it right after the frame) is given beside it. The clock starts before the
process is spawned, so interpreter start-up is included.

    .venv/bin/python bench/tui_startup.py [--runs 5] [--skip-swift] [--json]

Goal: first frame in under 0.5 s. For scale, importing swift's training entry point (what a TUI that
imported ms-swift's training modules would pay before drawing anything) is timed the same way;
in ms-swift 4.x that is `from swift.pipelines import sft_main` (3.x: `from swift.llm import sft_main`).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import statistics
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOAL_SECONDS = 0.5
HEAVY = ("torch", "transformers", "swift", "peft", "accelerate")
PYCACHE = Path(os.environ.get("TMPDIR", "/tmp")) / "workbench-bench-pycache"

CHILD = """
import sys, time
from pathlib import Path

import backend.cli  # the `workbench` console script: backend.cli:main
import tui.app

marker, heavy_names = sys.argv[1], sys.argv[2].split(",")


class FirstFrame(tui.app.WorkbenchApp):
    CSS_PATH = str(Path(tui.app.__file__).with_name("app.tcss"))  # not relative to "-c"
    first = None

    def on_ready(self) -> None:
        self._check()  # the frame is on the terminal when Ready arrives; what on_ready starts comes after it
        super().on_ready()

    def _check(self) -> None:
        from tui.screens.launch import LaunchScreen

        screen = self.screen
        if isinstance(screen, LaunchScreen) and screen.is_mounted and self.first is None:
            self.first = (time.time(), [m for m in heavy_names if m in sys.modules])
        if self.first is not None and getattr(screen, "opened", True):  # the form built (#41: after the frame)
            self.exit(result=(*self.first, time.time()))
        else:
            self.call_after_refresh(self._check)


def run_app(profile_path):
    stamp, heavy, form = FirstFrame(profile_path).run()
    with open(marker, "w") as handle:
        handle.write(f"{stamp!r} {','.join(heavy) or '-'} {form!r}")


tui.app.run_app = run_app  # `workbench` with no sub-command opens the TUI through this
sys.argv = ["workbench"]
try:
    backend.cli.main()
except SystemExit as done:
    if done.code:
        raise
"""


# the floor: Textual's smallest app (one Static) measured the same way
BASELINE = """
import sys, time
from textual.app import App
from textual.widgets import Static

marker = sys.argv[1]


class Hello(App):
    def compose(self):
        yield Static("hello")

    def on_ready(self) -> None:
        self.exit(result=time.time())


stamp = Hello().run()
with open(marker, "w") as handle:
    handle.write(f"{stamp!r} -")
"""


def _spawn_in_pty(argv: list[str], size: tuple[int, int], code: str = CHILD) -> tuple[subprocess.Popen, int]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "PYTHONDONTWRITEBYTECODE")}
    env.setdefault("TERM", "xterm-256color")
    # bytecode as on any machine that ran the workbench once: both apps read their compiled modules from one
    # cache folder, filled by the warm-up runs (a sandbox's PYTHONDONTWRITEBYTECODE=1 had the workbench compile
    # its ~150 modules from source at every start, and Textual, installed with its bytecode, not)
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    process = subprocess.Popen([sys.executable, "-c", code, *argv], stdin=slave, stdout=slave, stderr=slave,
                               cwd=REPO, env=env, close_fds=True, start_new_session=True)
    os.close(slave)
    return process, master


def _drain(master: int, sink: bytearray) -> None:
    """Read the terminal output so the child never blocks on a full pty buffer."""
    try:
        while chunk := os.read(master, 65536):
            sink.extend(chunk[-4096:])
            del sink[:-8192]
    except OSError:
        pass


def first_frame_seconds(marker: Path, code: str = CHILD,
                        timeout: float = 60) -> tuple[float, list[str], float | None]:
    """Seconds to the first frame, the heavy modules loaded by then, and seconds to the launch form built (None
    for the baseline app, which has no form)."""
    marker.unlink(missing_ok=True)
    output = bytearray()
    start = time.time()
    process, master = _spawn_in_pty([str(marker), ",".join(HEAVY)], (80, 24), code)
    reader = threading.Thread(target=_drain, args=(master, output), daemon=True)
    reader.start()
    try:
        process.wait(timeout=timeout)
    finally:
        os.close(master)
    if process.returncode != 0 or not marker.exists():
        tail = output.decode("utf-8", errors="replace")[-2000:]
        raise RuntimeError(f"the TUI did not reach its first frame (exit code {process.returncode}):\n{tail}")
    stamp, heavy, *form = marker.read_text().split()
    return float(stamp) - start, [] if heavy == "-" else heavy.split(","), float(form[0]) - start if form else None


def swift_training_import() -> str:
    """What `swift sft` imports before training: swift.pipelines in ms-swift 4.x, swift.llm in 3.x."""
    probe = "import importlib.util as u; print(u.find_spec('swift.pipelines') is not None)"
    found = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True).stdout.strip()
    return "from swift.pipelines import sft_main" if found == "True" else "from swift.llm import sft_main"


def import_seconds(statement: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", statement], cwd=REPO, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--skip-swift", action="store_true", help="do not time the import of swift's training modules (about 10 s)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    marker = Path(os.environ.get("TMPDIR", "/tmp")) / f"workbench-first-frame-{os.getpid()}.txt"
    first_frame_seconds(marker, timeout=600)  # warm the OS file cache and bytecode once; not counted
    first_frame_seconds(marker, BASELINE, timeout=600)
    samples: list[float] = []
    forms: list[float] = []
    heavy: list[str] = []
    for _ in range(args.runs):
        seconds, heavy, form = first_frame_seconds(marker)
        samples.append(seconds)
        if form is not None:  # the workbench's child always stamps it
            forms.append(form)
    baseline = statistics.median(first_frame_seconds(marker, BASELINE)[0] for _ in range(args.runs))
    marker.unlink(missing_ok=True)
    result = {
        "first_frame_median_s": round(statistics.median(samples), 3),
        "first_frame_min_s": round(min(samples), 3),
        "first_frame_max_s": round(max(samples), 3),
        "form_built_median_s": round(statistics.median(forms), 3),
        "runs": args.runs,
        "goal_s": GOAL_SECONDS,
        "heavy_modules_at_first_frame": heavy,
        "python_start_s": round(import_seconds("pass"), 3),
        "textual_minimal_app_first_frame_s": round(baseline, 3),
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    if not args.skip_swift:
        statement = swift_training_import()
        result["swift_import_statement"] = statement
        result["import_swift_training_s"] = round(import_seconds(statement), 3)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    verdict = "meets" if result["first_frame_median_s"] < GOAL_SECONDS else "MISSES"
    print(f"TUI cold start to first frame (80x24 pty, {args.runs} runs): median {result['first_frame_median_s']:.3f} s "
          f"(min {result['first_frame_min_s']:.3f}, max {result['first_frame_max_s']:.3f}); "
          f"{verdict} the {GOAL_SECONDS} s goal")
    print(f"  the launch form built (after the frame): {result['form_built_median_s']:.3f} s")
    print(f"  bare interpreter start:              {result['python_start_s']:.3f} s")
    print(f"  Textual's smallest app, same way:    {result['textual_minimal_app_first_frame_s']:.3f} s")
    print(f"  load average (1 min) of this machine: {result['load_average_1min']} on {os.cpu_count()} CPUs")
    if "import_swift_training_s" in result:
        swift = result["import_swift_training_s"]
        print(f"  python -c '{result['swift_import_statement']}': {swift:.3f} s "
              f"({swift / result['first_frame_median_s']:.0f}x the TUI's first frame)")
    print(f"  heavy modules loaded at first frame: {', '.join(heavy) or 'none'}")


if __name__ == "__main__":
    main()
