"""The bad-input corpus run: every file through `validate`, `show`, `runs`, `status` and `delete`.

Each file is planted where its name says (see make_bad_inputs.py) into a fresh workbench home that
also holds one good run; then the five commands run in this process. An outcome is the exit code,
or "traceback" when an exception escaped. The promise checked: exit code 0, 1 or 2 only, never a
traceback, a failing command names the file or the field, and the good run is always listed.

`python tests/faults/corpus.py` prints the tally (with PYTHONPATH pointing at another checkout, it
measures that checkout: that is how the "before" figures of the closing note were taken).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import typer.main
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_bad_inputs import write_corpus  # noqa: E402

COMMANDS = ("validate", "show", "runs", "status", "delete")
GOOD_ID = "20260101-120000-good-0001"
BAD_ID = "20260101-130000-bad-0002"
PLANTED = {".state.json": "state.json", ".events.jsonl": "events.jsonl", ".command.json": "command.json",
           ".forecast.json": "forecast.json", ".toml": "profile.toml"}
FIELD = re.compile(r"\[[A-Za-z_]+(?:\.[A-Za-z_0-9]+)*\]|field ")


@dataclass
class Outcome:
    file: str
    command: str
    exit_code: int | None
    traceback: str | None
    output: str
    names_it: bool
    good_listed: bool | None

    @property
    def kind(self) -> str:
        if self.traceback:
            return "traceback"
        return f"exit {self.exit_code}" if self.exit_code in (0, 1, 2) else f"exit other ({self.exit_code})"


def _run_folder(workspace: Path, run_id: str, status: str = "finished") -> Path:
    folder = workspace / run_id
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"kind": "finetune-workbench run", "run_id": run_id,
                                                 "created_at": time.time(), "host": os.uname().nodename}))
    (folder / "state.json").write_text(json.dumps({"run_id": run_id, "profile_name": "p", "status": status,
                                                   "host": os.uname().nodename, "created_at": time.time()}))
    (folder / "command.json").write_text(json.dumps({"argv": ["true"], "env": {}, "cwd": str(folder),
                                                     "output_dir": str(folder / "output"), "shell": "true"}))
    (folder / "profile.toml").write_text('name = "p"\n')
    return folder


def plant(bad: Path, home: Path) -> Path:
    """A workbench home with a good run and a run holding `bad`; returns the data dir."""
    data, workspace = home / "data", home / "runs"
    data.mkdir(parents=True)
    _run_folder(workspace, GOOD_ID)
    bad_run = _run_folder(workspace, BAD_ID)
    if bad.name.endswith(".index.jsonl"):
        (data / "runs.jsonl").write_bytes(bad.read_bytes())
    else:
        target = next(name for suffix, name in PLANTED.items() if bad.name.endswith(suffix))
        (bad_run / target).write_bytes(bad.read_bytes())
    return data


def run_file(bad: Path, home: Path, runner: CliRunner, app: object) -> list[Outcome]:
    """`bad` planted in `home`, emptied first: the workbench's folders keep their paths from file to file, so
    the environment does not change and the warm oracle child is kept (a changed one restarts it, ~8 s)."""
    outcomes = []
    for old in home.iterdir():
        shutil.rmtree(old)
    os.environ["WORKBENCH_DATA_DIR"] = str(plant(bad, home))
    os.environ["WORKBENCH_WORKSPACE"] = str(home / "runs")
    planted = "runs.jsonl" if bad.name.endswith(".index.jsonl") else \
        next(name for suffix, name in PLANTED.items() if bad.name.endswith(suffix))
    for command in COMMANDS:
        args = {"validate": [str(bad)], "show": [str(bad)], "runs": [], "status": [BAD_ID],
                "delete": [BAD_ID, "--yes"]}[command]
        result = runner.invoke(app, [command, *args])  # type: ignore[arg-type]
        escaped = result.exception if result.exception and not isinstance(result.exception, SystemExit) else None
        output = result.output
        names_it = result.exit_code == 0 or bad.name in output or planted in output or bool(FIELD.search(output))
        good = GOOD_ID in output if command == "runs" else None
        outcomes.append(Outcome(bad.name, command, result.exit_code,
                                f"{type(escaped).__name__}: {escaped}"[:300] if escaped else None,
                                output, names_it, good))
    return outcomes


def run_corpus(folder: Path) -> list[Outcome]:
    from backend.cli import full_app

    runner, app = CliRunner(), full_app()
    saved = {k: os.environ.get(k) for k in ("WORKBENCH_DATA_DIR", "WORKBENCH_WORKSPACE")}
    # typer's CliRunner rebuilds the click command from the app on each invoke (~50 ms, 13 s over
    # the corpus's 280 invocations): build it once, as one `workbench` process does.
    command = typer.main.get_command(app)
    try:
        with mock.patch("typer.testing._get_command", lambda _app: command), \
                tempfile.TemporaryDirectory(prefix="corpus-") as home:
            return [o for bad in sorted(folder.iterdir()) for o in run_file(bad, Path(home), runner, app)]
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def tally(outcomes: list[Outcome]) -> dict[str, object]:
    return {
        "files": len({o.file for o in outcomes}),
        "invocations": len(outcomes),
        "by_outcome": dict(Counter(o.kind for o in outcomes)),
        "by_command": {c: dict(Counter(o.kind for o in outcomes if o.command == c)) for c in COMMANDS},
        "failing_without_naming_the_file_or_field": sum(1 for o in outcomes if not o.names_it and not o.traceback),
        "good_run_hidden_by_runs": sum(1 for o in outcomes if o.good_listed is False),
    }


if __name__ == "__main__":
    os.environ.setdefault("WORKBENCH_CACHE_DIR", tempfile.mkdtemp(prefix="corpus-cache-"))
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "bad_inputs"
        write_corpus(corpus)
        results = run_corpus(corpus)
    print(json.dumps(tally(results), indent=2))
    for o in results:
        if o.traceback or o.exit_code not in (0, 1, 2) or not o.names_it or o.good_listed is False:
            print(f"{o.file:32} {o.command:9} {o.kind:12} {o.traceback or o.output.strip()[-160:]!r}")
