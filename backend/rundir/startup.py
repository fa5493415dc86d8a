"""What a starting run is doing before its first logged step (#35): the monitor and `workbench status` say it.

Phases, in order, each from the evidence that it began:

* `imports` - starting swift (its imports and argument parsing): from the run's start;
* `model` - loading the model: the trainer's `phase` event, written when swift imports the workbench's
  plugin as it reads its arguments (backend/plugin/workbench_callback.py); weights done/total from
  transformers' "Loading weights" progress line;
* `dataset` - preparing the dataset: swift's "Start time of running main: <time>" line (it loads and
  tokenizes the data next); rows done/total from its own "Map" progress lines in output.log;
* `first_step` - the first step: the trainer's `run_begin` event, until the first `log` event.

Read from the run folder only: the head of events.jsonl (a starting run's file is a few lines) and the tail
of output.log. No Textual here; the monitor and the CLI format `Startup.text`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from backend.contract.events import EventReader, Log, Phase, RunBegin
from backend.core.tail import last_lines
from backend.core.units import duration
from backend.rundir.layout import RunFolder

LABELS = {"imports": "starting swift (imports)", "model": "loading the model", "dataset": "preparing the dataset",
          "first_step": "first step"}
EVENTS_BYTES = 256 * 1024  # a starting run has written a few lines; more means it logged steps long ago
LOG_BYTES = 256 * 1024  # swift's argument dump and the model's summary come before the first step
MAIN_STARTED = re.compile(r"\[INFO:swift\] Start time of running main: (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)")
_PLUGIN_IMPORTED = "Successfully imported external_plugins"
# a progress bar's state: "Map (num_proc=1):  40%|####      | 2/5 [...]" (tqdm rewrites it with \r)
_MAP = re.compile(r"^(?:Map|Filter|Running tokenizer|Tokenizing)[^:|]*:\s*\d+%\|[^|]*\|\s*(\d+)/(\d+)")
_WEIGHTS = re.compile(r"^Loading (?:weights|checkpoint shards):\s*\d+%\|[^|]*\|\s*(\d+)/(\d+)")


@dataclass(frozen=True)
class Startup:
    """The phase a starting run is in, since when, and how far (swift's own count, when it prints one)."""

    phase: str
    since: float | None  # unix time the phase began; None: the log says it began but not when
    run_started: float | None
    done: int | None = None
    total: int | None = None
    unit: str = ""

    @property
    def label(self) -> str:
        return LABELS[self.phase]

    @property
    def doing(self) -> str:
        """'preparing the dataset: 48/53 rows'."""
        return f"{self.label}: {self.done}/{self.total} {self.unit}" if self.total else self.label

    def text(self, now: float) -> str:
        """'preparing the dataset: 48/53 rows · 12s (run 41s)': the time in this phase, and since the start."""
        spent = f" · {duration(now - self.since, short=True)}" if self.since is not None else ""
        run = f" (run {duration(now - self.run_started, short=True)})" if self.run_started is not None else ""
        return f"{self.doing}{spent}{run}"

    def to_json(self) -> dict[str, object]:
        return {"phase": self.phase, "text": self.doing, "done": self.done, "total": self.total, "since": self.since}


def read_startup(run: RunFolder, run_started: float | None) -> Startup | None:
    """The phase of a run that has logged no step yet; None once it has (its numbers say the rest)."""
    events = EventReader(run.events_path).read_new(EVENTS_BYTES)
    if any(isinstance(e, Log) and e.rank == 0 for e in events):
        return None
    begun = next((e for e in reversed(events) if isinstance(e, RunBegin) and e.rank == 0), None)
    if begun is not None:
        return Startup("first_step", begun.time, run_started)
    log = last_lines(run.log_path, LOG_BYTES).text
    main = MAIN_STARTED.findall(log)
    if main:
        rows = _last_count(log[log.rfind("Start time of running main"):], _MAP)
        return Startup("dataset", local_time(main[-1]), run_started, *rows, unit="rows")
    loading = next((e for e in events if isinstance(e, Phase) and e.phase == "model" and e.rank == 0), None)
    if loading is not None or _PLUGIN_IMPORTED in log:
        weights = _last_count(log, _WEIGHTS)
        return Startup("model", loading.time if loading else None, run_started, *weights, unit="weights")
    return Startup("imports", run_started, run_started)


def _last_count(text: str, pattern: re.Pattern[str]) -> tuple[int | None, int | None]:
    """(done, total) of the newest progress bar matching `pattern` (each \\r-rewrite is a state of it)."""
    for part in reversed(re.split(r"[\r\n]", text)):
        found = pattern.match(part.strip())
        if found:
            return int(found.group(1)), int(found.group(2))
    return None, None


def local_time(text: str) -> float | None:
    """swift's timestamp (local time of the machine it runs on: this one) as unix time."""
    try:
        return datetime.fromisoformat(text).timestamp()  # a naive datetime is taken as local time
    except ValueError:
        return None
