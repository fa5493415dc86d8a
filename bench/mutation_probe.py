"""Mutation probe: do the tests fail when a promise breaks? (#36)

Each break below is a small text patch to a promised behaviour. The probe copies the tree (tracked and
untracked files git does not ignore: never the working tree itself, where others may be editing) into a
scratch folder, applies one break at a time, runs only the tests that claim the promise, puts the file
back, and prints caught / NOT CAUGHT per break. A break whose text is no longer in its file is reported
as "stale" (the code moved: update the break), never silently skipped.

    .venv/bin/python bench/mutation_probe.py              # every break
    .venv/bin/python bench/mutation_probe.py golden-newest-only chat-adapter-ignored
    .venv/bin/python bench/mutation_probe.py --baseline   # first check the claimed tests pass unbroken
    .venv/bin/python bench/mutation_probe.py --list

Exit status: 0 when every break was caught (and every baseline passed), 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Break:
    id: str
    promise: str
    path: str  # relative to the repository
    old: str  # must occur exactly once in the file
    new: str
    tests: tuple[str, ...]  # pytest arguments: node ids, files, -k expressions


BREAKS: tuple[Break, ...] = (
    Break("golden-newest-only", "one golden job answers every checkpoint still without answers",
          "backend/golden/job.py", "and not answers_path(run, verdict.step).is_file()]\n",
          "and not answers_path(run, verdict.step).is_file()][-1:]\n",
          ("tests/scoreboard/test_golden_several_missing.py",)),
    Break("resume-refusal-reason", "resume of an active run is refused with 'stop it first'",
          "backend/runs/resume.py", 'hint = "stop it first" if state.is_active else',
          'hint = "stop it first" if not state.is_active else',
          ("tests/faults/test_4_5_one_controller.py", "-k", "any_status")),
    Break("backend-imports-textual", "no backend module loads Textual when imported",
          "backend/core/units.py", "from __future__ import annotations\n",
          "from __future__ import annotations\n\nimport textual  # noqa: F401\n",
          ("tests/test_import_hygiene.py",)),
    Break("cli-imports-torch", "the CLI starts without torch",
          "backend/cli/common.py", "from __future__ import annotations\n",
          "from __future__ import annotations\n\nimport torch  # noqa: F401\n",
          ("tests/test_import_hygiene.py",)),
    Break("data-tab-raw-controls", "the Data tab never draws a bidi override or a C1 control raw",
          "tui/widgets/dataset_details.py", 'text.append(visible(raw, limit=PREVIEW_CHARS) + "\\n")',
          'text.append(raw[:PREVIEW_CHARS] + "\\n")',
          ("tests/faults/test_round3_terminal_text.py", "-k", "data_tab")),
    Break("parity-last-divergence", "parity reports the FIRST row where the two models differ",
          "backend/ship/parity.py", "        if first is None:\n            tokens_a", "        if True:\n            tokens_a",
          ("tests/export_model/test_export_model.py", "-k", "broken_export")),
    Break("chat-checkpoint-not-loaded", "`chat RUN --checkpoint N` answers with checkpoint-N's adapter",
          "backend/chat/worker.py", "TransformersEngine(args.model, adapters=args.adapters or None,",
          "TransformersEngine(args.model, adapters=None,",
          ("tests/promises/test_chat_cli.py", "-m", "slow")),
    Break("oom-retry-default-accumulation", "an OOM retry keeps swift's global batch when accumulation is unset",
          "backend/profile/batch.py",
          "    return swift_default_accumulation(t.per_device_train_batch_size, profile.distribution.world_size)\n",
          "    return max(1, SWIFT_TARGET_BATCH // t.per_device_train_batch_size)\n",
          ("tests/queue/test_queue_seams.py", "-k", "swifts_default_accumulation")),
    Break("sigusr1-alone", "SIGUSR1 to the trainer saves and stops with the reason (the test run alone)",
          "backend/plugin/save_asks.py", 'f"saved and stopped on {reason}" if', 'f"saved and stopped: {reason}" if',
          ("tests/preempt/test_save_and_signal.py", "-k", "sigusr1_to_the_trainer")),
    Break("stop-no-escalation", "`workbench stop` escalates SIGINT -> SIGTERM -> SIGKILL",
          "backend/runs/stop.py", 'done = terminate(run_marker(run.path), report=report) or [',
          'done = terminate(run_marker(run.path), report=report, phases=(__import__("signal").SIGINT,)) or [',
          ("tests/promises/test_cli_promises.py", "-k", "stop_escalates")),
    Break("refresh-cadence-ignored", "`--refresh 5` makes the monitor update every 5 s",
          "tui/screens/monitor.py", "self._timer = self.set_interval(self.poll_interval, self._tick)\n        self._start_poll",
          "self._timer = self.set_interval(DEFAULT_REFRESH_SECONDS, self._tick)\n        self._start_poll",
          ("tests/tui/test_promised_keys.py", "-k", "refresh")),
    Break("compare-draws-one-run", "the compare view draws the loss of every marked run",
          "tui/widgets/metric_plots.py", "            if points and points[0]:\n                color = COMPARE_COLORS",
          "            if points and points[0] and index == 0:\n                color = COMPARE_COLORS",
          ("tests/tui/test_runs_screen.py", "-k", "compare_overlays")),
    Break("summary-monitor-no-overflow-marks", "the monitor opened from a summary draws the overflows' marks",
          "tui/widgets/metric_plots.py", '        if ox:\n            plt.scatter(ox, marks, marker="x"',
          '        if False:\n            plt.scatter(ox, marks, marker="x"',
          ("tests/tui/test_monitor_summary.py", "-k", "opened_from_a_summary")),
    Break("launch-lands-elsewhere", "a launch from the workspace lands on the run's monitor",
          "tui/app.py", '        self.switch_mode("runs")\n        self.push_screen(MonitorScreen(Path(run_dir)))\n',
          '        self.switch_mode("runs")\n',
          ("tests/tui/test_launch_run.py",)),
    Break("command-tab-not-the-launch", "the Command tab shows the command the launch runs (command.json)",
          "backend/runs/start.py", 'command = {"argv": plan.argv, "env"',
          'command = {"argv": [*plan.argv, "--seed", "7"], "env"',
          ("tests/tui/test_launch_run.py",)),
    Break("retry-memory-forecast", "ctrl+r runs a failed memory forecast again",
          "tui/widgets/memory_line.py", "        if self.question is not None:\n            self._forecast(self.question)",
          "        if self.question is None:\n            self._forecast(self.question)",
          ("tests/tui/test_worker_failures.py::test_a_failed_worker_is_shown_logged_and_retried[memory forecast]",)),
    Break("retry-model-picker", "ctrl+r runs a failed model scan again",
          "tui/modals/model_picker.py", "    def retry(self) -> None:\n        self._scan()",
          "    def retry(self) -> None:\n        return",
          ("tests/tui/test_worker_failures.py::test_a_failed_worker_is_shown_logged_and_retried[model picker]",)),
    Break("retry-dataset-picker", "ctrl+r runs a failed dataset search again",
          "tui/modals/dataset_picker.py", "    def retry(self) -> None:\n        self._drop_failure()\n        self._find_files()",
          "    def retry(self) -> None:\n        return",
          ("tests/tui/test_worker_failures.py::test_a_failed_worker_is_shown_logged_and_retried[dataset picker]",)),
    Break("retry-monitor", "ctrl+r reads a run again after the monitor's read failed",
          "tui/screens/monitor.py", "    def retry(self) -> None:\n        self._start_poll()",
          "    def retry(self) -> None:\n        return",
          ("tests/tui/test_worker_failures.py::test_a_failed_worker_is_shown_logged_and_retried[monitor]",)),
    Break("retry-chat-worker", "ctrl+r starts a failed chat worker again (the chat screen's own ctrl+r)",
          "tui/screens/chat.py", "        for pane in panes:\n            pane.start_worker(restart=True)",
          "        for pane in panes:\n            pass",
          ("tests/tui/test_worker_failures.py::test_a_failed_worker_is_shown_logged_and_retried[chat worker]",)),
    Break("watchdog-stop-unlinked", "the watchdog's stop of a hung (SIGSTOPped) real run names the hang alert",
          "backend/watch/watchdog.py",
          'evidence["stopped_by_alert"] = self.stopped_by.id if self.stopped_by else None',
          'evidence["stopped_by_alert"] = None',
          ("tests/watch/test_watchdog_runs.py", "-k", "sigstop_hang")),
    Break("deepspeed-scale-not-read", "a DeepSpeed fp16 run's loss scale is DeepSpeed's own",
          "backend/plugin/loss_scale.py", '"loss_scale": float(ds_optimizer.cur_scale)', '"loss_scale": 65536.0',
          ("tests/test_deepspeed_loss_scale.py",)),
    Break("collector-not-paused-in-the-oracle", "an oracle child answers with the collector paused while it loads",
          "backend/oracle/child.py", "with paused_while_loading():  # a question loads",
          "if True:  # a question loads",
          ("tests/test_collector.py",)),
    Break("app-stops-a-kept-warm-child", "the app stops only the warm oracle child it started",
          "tui/app.py", "        if self.warm_child_started:\n", "        if True:\n",
          ("tests/tui/test_app_warm_child.py",)),
    Break("folders-restart-the-warm-child", "the workbench's folders travel with each question, no restart",
          "backend/oracle/service.py", "not started_alike(child.env, child_env())", "child.env != child_env()",
          ("tests/oracle/test_service.py", "-k", "workbench_folders")),
)


def scratch_copy(into: Path) -> Path:
    """The tree as git sees it (tracked + untracked, not ignored), copied under `into`."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    tree = into / "tree"
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file() and not source.is_symlink():
            target = tree / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return tree


NO_BYTECODE_CACHE = "WORKBENCH_TESTS_COMPILE_EACH_TIME"


def copy_env(tree: Path) -> dict[str, str]:
    """The environment of every child: the copy first on the import path (before the venv's editable install
    of the working tree, which would otherwise win), and no bytecode: a break and its undoing can fall in one
    second with one size, which a cached .pyc would not tell apart (tests/conftest.py's keep_bytecode)."""
    return {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1", NO_BYTECODE_CACHE: "1"}


def imports_come_from(tree: Path) -> None:
    """Stop unless the copy's python imports the product and the tests from the copy, never from REPO."""
    said = subprocess.run([sys.executable, "-c", "import backend, tui, tests.timing; print(backend.__file__); "
                           "print(tui.__file__); print(tests.timing.__file__)"], cwd=tree, env=copy_env(tree),
                          capture_output=True, text=True, check=True).stdout.split()
    strays = [path for path in said if not Path(path).resolve().is_relative_to(tree.resolve())]
    if strays or len(said) != 3:
        raise SystemExit(f"the copy imports from outside itself: {said}")


def run_tests(tree: Path, tests: tuple[str, ...], timeout: float) -> tuple[int, str, float]:
    env = copy_env(tree)
    argv = [sys.executable, "-m", "pytest", "-n", "0", "-q", "-x", "-p", "no:cacheprovider", "--no-header",
            "-o", "addopts=", *tests]
    began = time.monotonic()
    try:
        done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        return 124, f"timed out after {timeout:.0f} s: {err.cmd}", time.monotonic() - began
    return done.returncode, done.stdout + done.stderr, time.monotonic() - began


def first_failure(output: str) -> str:
    for line in output.splitlines():
        if line.startswith(("E ", "FAILED", "ERROR")):
            return line.strip()[:160]
    return output.strip().splitlines()[-1][:160] if output.strip() else ""


def probe(tree: Path, item: Break, baseline: bool, timeout: float) -> bool:
    path = tree / item.path
    original = path.read_text(encoding="utf-8") if path.is_file() else ""
    if original.count(item.old) != 1:
        print(f"{item.id:30} stale       {item.path} holds the break's text {original.count(item.old)} times")
        return False
    if baseline:
        code, output, seconds = run_tests(tree, item.tests, timeout)
        if code != 0:
            print(f"{item.id:30} BASELINE FAILS ({seconds:.0f} s) unbroken: {first_failure(output)}")
            return False
    path.write_text(original.replace(item.old, item.new), encoding="utf-8")
    try:
        code, output, seconds = run_tests(tree, item.tests, timeout)
    finally:
        path.write_text(original, encoding="utf-8")
    # 5: no test collected, which catches nothing; 124: out of time, which says nothing either way
    caught = code not in (0, 5, 124)
    verdict = "caught" if caught else "TIMED OUT" if code == 124 else "NOT CAUGHT"
    print(f"{item.id:30} {verdict:11} ({seconds:.0f} s) {item.promise}" + (f"\n{'':43}{first_failure(output)}"
                                                                         if caught else ""))
    return caught


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ids", nargs="*", help="breaks to probe (default: all)")
    parser.add_argument("--baseline", action="store_true", help="check the claimed tests pass before each break")
    parser.add_argument("--list", action="store_true", help="list the breaks and exit")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per pytest run (default 900)")
    args = parser.parse_args()
    known = {b.id: b for b in BREAKS}
    unknown = [i for i in args.ids if i not in known]
    if unknown:
        parser.error(f"unknown break(s) {', '.join(unknown)}; known: {', '.join(known)}")
    chosen = [known[i] for i in args.ids] or list(BREAKS)
    if args.list:
        for item in chosen:
            print(f"{item.id:30} {item.path}: {item.promise}\n{'':31}tests: {' '.join(item.tests)}")
        return 0
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # each verdict as it comes
    began = time.monotonic()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds: the scratch copy is removed
    with tempfile.TemporaryDirectory(prefix="mutation-probe-") as scratch:
        tree = scratch_copy(Path(scratch))
        imports_come_from(tree)
        results = [probe(tree, item, args.baseline, args.timeout) for item in chosen]
    print(f"\n{sum(results)} of {len(results)} breaks caught in {(time.monotonic() - began) / 60:.1f} min")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
