"""Shared test set-up: an isolated workbench home per session, and the tiny model built once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.rundir.layout import RunFolder
from tests import warm_oracle
from tests.shared_runs import SharedRun, shared_run
from tests.tiers import slow_reason
from tests.timing import FACTOR_ENV, limit_text, scaled, time_factor

REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    """Fix the session's wall-clock factor before the xdist workers start (they inherit it)."""
    time_factor()
    keep_bytecode()
    one_compute_thread()


def keep_bytecode() -> None:
    """The project's modules compiled once a session, not in every process the tests start (the CLI, the
    supervisors, the oracle's children, the trainer's callback: ~0.1 s each). A machine that sets
    PYTHONDONTWRITEBYTECODE (this sandbox does) compiles them from source each time; installed libraries
    have their bytecode from pip. The cache goes to a folder of its own (PYTHONPYCACHEPREFIX), never into
    the tree; Python checks each file's size and mtime against its source, so a stale entry is never used."""
    if os.environ.get("WORKBENCH_TESTS_COMPILE_EACH_TIME"):  # bench/mutation_probe.py: every break compiled
        return
    if not os.environ.pop("PYTHONDONTWRITEBYTECODE", None) or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    prefix = Path(tempfile.gettempdir()) / f"workbench-tests-pycache-{os.getuid()}"
    os.environ["PYTHONPYCACHEPREFIX"] = str(prefix)
    sys.pycache_prefix, sys.dont_write_bytecode = str(prefix), False


def one_compute_thread() -> None:
    """The workers run side by side, one per core: each process they start computes on one thread (torch's
    OpenMP and OpenBLAS pools). With a pool per core in every trainer, two workers' trainers oversubscribe the
    cores and their spinning threads burn what the other worker needed (a 150-step run of the tiny model: 14.3 s
    of CPU -> 12.1 s, the same wall time alone). A machine that sets the variables keeps its own."""
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that trains, asks the libraries in a child or drives a real terminal is slow, marked or not
    (tests/tiers.py: the rule and its list): `pytest -m "not slow"` (the quick tier) is pure logic.

    Workers (`--dist loadgroup`): a module's tests stay on one worker (its module fixtures are made once),
    unless the module sets SPLIT_ACROSS_WORKERS = True: then each test goes where a worker is free, so the
    heaviest files are no one worker's serial tail (tests that share a module fixture there carry an
    `xdist_group` mark of their own)."""
    for item in items:
        if slow_reason(item.nodeid, set(getattr(item, "fixturenames", ()))) is not None:
            item.add_marker(pytest.mark.slow)
        split = getattr(getattr(item, "module", None), "SPLIT_ACROSS_WORKERS", False)
        if not split and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


def pytest_report_header(config: pytest.Config) -> str:
    return f"wall-clock limits x {time_factor():g} ({FACTOR_ENV}; tests/timing.py)"


@pytest.fixture(scope="session", autouse=True)
def pilot_waits_scaled() -> None:
    """Textual's pilot waits up to 30 s for a screen to take its pending messages (press, click): scaled
    like every other limit, and saying how long it waited when it runs out."""
    from textual.pilot import Pilot, WaitForScreenTimeout

    original = Pilot._wait_for_screen
    if getattr(original, "scaled", False):
        return

    async def wait_for_screen(self: Pilot, timeout: float = 30.0) -> bool:  # type: ignore[type-arg]
        try:
            return await original(self, timeout=scaled(timeout))
        except WaitForScreenTimeout as err:
            raise WaitForScreenTimeout(f"waited {limit_text(timeout)} for the screen's widgets to take their "
                                       f"pending messages: {err}") from err

    wait_for_screen.scaled = True  # type: ignore[attr-defined]
    Pilot._wait_for_screen = wait_for_screen  # type: ignore[method-assign]


WATCHED_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT)


@pytest.fixture(autouse=True)
def signals_left_as_found() -> Iterator[None]:
    """A test that changes how this worker takes a signal puts it back: an ignored signal outlives exec, so one
    left ignored is inherited by every later child of the worker (a `sleep` that ignored SIGUSR1 failed another
    module's test, depending on the order). Put back here, and the test that left it fails, naming it."""
    before = {sig: signal.getsignal(sig) for sig in WATCHED_SIGNALS}
    yield
    changed = [sig.name for sig, handler in before.items() if signal.getsignal(sig) != handler]
    for sig, handler in before.items():
        signal.signal(sig, handler)
    assert not changed, f"the test left {', '.join(changed)} handled otherwise than it found them"


@pytest.fixture(scope="session", autouse=True)
def workbench_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Cache, data and workspace folders of this test session (never the user's own). The parallel
    workers of one session (pytest-xdist) share the cache: the tiny model and the library answers are
    built once (their builders wait for each other on a file lock and write atomically)."""
    root = tmp_path_factory.mktemp("workbench")
    shared = tmp_path_factory.getbasetemp().parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    os.environ["WORKBENCH_CACHE_DIR"] = str(shared / "cache")
    os.environ["WORKBENCH_DATA_DIR"] = str(root / "data")
    os.environ["WORKBENCH_WORKSPACE"] = str(root / "runs")
    os.environ["WORKBENCH_CONFIG_DIR"] = str(root / "config")  # never the user's own notify.toml
    return root


@pytest.fixture(scope="session", autouse=True)
def lifecycle_installed() -> None:
    """What the CLI and the TUI do as they start: the run registry's `run:` lookup and the
    watch/output_dir validation rules registered with the floors below (backend.cli.wiring)."""
    from backend.cli.wiring import install

    install()


@pytest.fixture(scope="session")
def tiny_model(workbench_home: Path) -> Path:
    """The embedded tiny Qwen2, built once per test session (about 5 s)."""
    from backend.models.demo.build import ensure_builtin_model

    return ensure_builtin_model("tiny-qwen2")


@pytest.fixture(scope="session")
def short_lora_run(tiny_model: Path) -> RunFolder:
    """Four LoRA steps of the quickstart profile with 10 % of its rows held out as swift's validation
    split: a real checkpoint (checkpoint-4), its base model and swift's val_dataset.jsonl. Trained once per
    session (tests/shared_runs.py): a test that writes into it (a job, a merge) uses `private_copy`."""
    from tests.jobs.jobs_helpers import train_quickstart

    def train(workspace: Path) -> tuple[RunFolder, str]:
        return train_quickstart(workspace, data={"split_dataset_ratio": 0.1},
                                training={"max_steps": 4, "save_steps": 4}), ""

    return shared_run("short-lora", train).run


@pytest.fixture(scope="session")
def quickstart_cli_run(tiny_model: Path) -> SharedRun:
    """`workbench run quickstart` in a terminal-less child, to its end: the shipped profile's 318 LoRA
    steps at lr 3e-3 teach the tiny model its name (Quill); loss ends near 0.2; checkpoints 200, 300 and
    318 are kept. Trained once per session (tests/shared_runs.py); `output` is what the CLI printed."""
    return shared_run("quickstart", _run_quickstart_cli)


@pytest.fixture(scope="session")
def quill_run(quickstart_cli_run: SharedRun) -> RunFolder:
    """The finished quickstart of `quickstart_cli_run`; a test that writes into it uses `private_copy`."""
    return quickstart_cli_run.run


def _run_quickstart_cli(workspace: Path) -> tuple[RunFolder, str]:
    env = {**os.environ, "WORKBENCH_WORKSPACE": str(workspace), "WORKBENCH_DATA_DIR": str(workspace / ".data")}
    done = subprocess.run([sys.executable, "-m", "backend.cli", "run", "quickstart"], capture_output=True,
                          text=True, timeout=scaled(900), cwd=REPO, env=env, stdin=subprocess.DEVNULL)
    folders = [f for f in workspace.iterdir() if f.is_dir() and RunFolder(f).exists()]
    assert done.returncode == 0 and len(folders) == 1, \
        f"workbench run quickstart: exit {done.returncode}, run folders {folders}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return RunFolder(folders[0]), done.stdout


@pytest.fixture
def isolated_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A run index and workspace of this test alone (the model cache stays shared).

    Whatever the test's outcome, no run it started outlives it: a failed assertion must not leave
    an endless training eating the machine's two cores."""
    monkeypatch.setenv("WORKBENCH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("WORKBENCH_WORKSPACE", str(tmp_path / "runs"))
    yield tmp_path / "runs"
    from backend.core.process_identity import run_processes
    from backend.rundir.layout import RunFolder
    from backend.rundir.process import signal_processes

    workspace = tmp_path / "runs"
    for folder in workspace.iterdir() if workspace.is_dir() else ():
        leftovers = run_processes(RunFolder(folder).path)
        if leftovers:
            signal_processes(leftovers, signal.SIGKILL)


@pytest.fixture(scope="session", autouse=True)
def oracle_children_unnamed() -> Iterator[None]:
    """The oracle's children start without PYTEST_CURRENT_TEST (tests/warm_oracle.py); the kept warm child
    ends with the session."""
    from backend.oracle import service

    real_env = service.child_env
    service.child_env = warm_oracle.without_test_name  # type: ignore[assignment]
    yield
    warm_oracle.stop_kept()
    service.child_env = real_env  # type: ignore[assignment]


@pytest.fixture(autouse=True)
def warm_oracle_lent(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test's library questions go to the test process's one warm child (tests/warm_oracle.py), unless the
    test is marked `one_shot_oracle`: then no warm child is lent to it or idles beside it."""
    if request.node.get_closest_marker("one_shot_oracle"):
        warm_oracle.stop_kept()
        yield
        return
    with warm_oracle.lent():
        yield


@pytest.fixture(scope="module")
def warm_oracle_for_module() -> Iterator[None]:
    """The warm child lent to a module-scoped fixture's questions too (made before any test's own lending)."""
    with warm_oracle.lent():
        yield
