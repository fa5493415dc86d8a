"""Choosing a dataset (picker dialog), with the first look at the highlighted file (records, JSON validity, keys, a raw preview).

File discovery and scans run in thread workers that stop when a newer request replaces them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList, Static
from textual.widgets.option_list import Option, OptionDoesNotExist
from textual.worker import get_current_worker

from backend.core.paths import BUILTIN_DATASETS, BUILTIN_PREFIX
from backend.data.first_look import DatasetReport, inspect_ref, looks_like_dataset
from backend.data.records import SUFFIXES
from tui.command_text import display_path
from tui.widgets.dataset_details import report_text
from tui.worker_failures import RETRY_IN_DIALOG, WorkerFailures, failure_text

MAX_LISTED_FILES = 200
FAILURE_OPTION = "find-failed"  # the list's line that says the search failed
SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", "site-packages", "runs", "output"}


def find_dataset_files(roots: list[Path], max_depth: int = 3) -> Iterator[Path]:
    seen: set[Path] = set()
    for root in roots:
        yield from _walk(root, max_depth, seen)


def _walk(folder: Path, depth: int, seen: set[Path]) -> Iterator[Path]:
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith("."):
            continue
        if entry.is_file() and entry.suffix.lower() in SUFFIXES:
            resolved = entry.resolve()
            if resolved not in seen and looks_like_dataset(entry):
                seen.add(resolved)
                yield resolved
        elif entry.is_dir() and depth > 0 and entry.name not in SKIP_DIRS:
            yield from _walk(entry, depth - 1, seen)


class DatasetPickerScreen(WorkerFailures, ModalScreen[str | None]):
    """Pick a shipped or local dataset, or type a path / hub id (`#N` samples N rows)."""

    BINDINGS = [
        Binding("escape", "dismiss(None)", "Cancel", id="picker-cancel", tooltip="Close without choosing"),
        RETRY_IN_DIALOG,
    ]

    class Found(Message):
        def __init__(self, files: list[Path]) -> None:
            super().__init__()
            self.files = files

    class Scanned(Message):
        def __init__(self, report: DatasetReport) -> None:
            super().__init__()
            self.report = report

    def __init__(self, current: str, roots: list[Path], base_dir: Path | None) -> None:
        super().__init__(id="dataset-picker", classes="dialog-screen")
        self.current = current
        self.roots = roots
        self.base_dir = base_dir
        self._stop = threading.Event()

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog dialog-wide"):
            yield Label("Dataset: pick one, or type a file / hub id (#N samples N rows) and press Enter",
                        classes="dialog-title")
            yield Input(self.current, id="dataset-input", compact=True,
                        placeholder="./data/train.jsonl, AI-ModelScope/alpaca-gpt4-data-en#500")
            options = [Option(Text.assemble((BUILTIN_PREFIX + name, "bold"), ("  [shipped]", "dim")),
                              id=BUILTIN_PREFIX + name) for name in BUILTIN_DATASETS]
            yield OptionList(*options, id="dataset-list")
            yield Static("", id="dataset-preview")
            yield Static("↑↓ choose · Enter: use · Esc: cancel", classes="dialog-hint")

    def show_failure(self, message: str) -> None:
        self._drop_failure()
        self.query_one("#dataset-list", OptionList).add_option(Option(failure_text(message), id=FAILURE_OPTION,
                                                                      disabled=True))

    def _drop_failure(self) -> None:
        """The failure line goes once it is retried: a list found on the retry is not shown under it."""
        with suppress(OptionDoesNotExist):
            self.query_one("#dataset-list", OptionList).remove_option(FAILURE_OPTION)

    def retry(self) -> None:
        self._drop_failure()
        self._find_files()
        option = self.query_one("#dataset-list", OptionList).highlighted_option
        if option is not None and option.id:
            self._scan(option.id, self._stop)

    def on_mount(self) -> None:
        self.query_one("#dataset-list", OptionList).focus()
        self._find_files()

    def on_unmount(self) -> None:
        self._stop.set()

    @work(thread=True, exclusive=True, group="dataset-files", exit_on_error=False, description="Finding datasets")
    def _find_files(self) -> None:
        files = []
        for path in find_dataset_files(self.roots):
            files.append(path)
            if len(files) >= MAX_LISTED_FILES or get_current_worker().is_cancelled:
                break
        self.post_message(self.Found(files))

    @on(Found)
    def _found(self, event: Found) -> None:
        options = self.query_one("#dataset-list", OptionList)
        shipped = {p.resolve() for p in BUILTIN_DATASETS.values()}
        for path in event.files:
            if path in shipped:
                continue
            ref = self._ref_for(path)
            options.add_option(Option(Text.assemble((display_path(path), "bold"), ("  [local]", "dim")), id=ref))

    def _ref_for(self, path: Path) -> str:
        """Relative to the profile's folder when inside it (the profile stays portable)."""
        if self.base_dir is not None and path.is_relative_to(self.base_dir.resolve()):
            return "./" + str(path.relative_to(self.base_dir.resolve()))
        return str(path)

    @on(OptionList.OptionHighlighted, "#dataset-list")
    def _highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option.id:
            self.query_one("#dataset-preview", Static).update(Text("scanning…", style="dim"))
            self._stop.set()
            self._stop = threading.Event()
            self._scan(event.option.id, self._stop)

    @work(thread=True, exclusive=True, group="dataset-preview", exit_on_error=False, description="Scanning dataset")
    def _scan(self, ref: str, stop: threading.Event) -> None:
        report = inspect_ref(ref, base_dir=self.base_dir, stop=stop)
        if not stop.is_set():
            self.post_message(self.Scanned(report))

    @on(Scanned)
    def _scanned(self, event: Scanned) -> None:
        self.query_one("#dataset-preview", Static).update(report_text(event.report, preview_rows=1,
                                                                      bad_shown=2))

    @on(OptionList.OptionSelected, "#dataset-list")
    def _selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id:
            self.dismiss(event.option.id)

    @on(Input.Submitted, "#dataset-input")
    def _typed(self, event: Input.Submitted) -> None:
        if event.value.strip():
            self.dismiss(event.value.strip())
