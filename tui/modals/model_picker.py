"""Choosing a model: the picker dialog, and how a model is described (the Model tab shows it too).

Discovery (local folders, the HF and ModelScope caches, the built-in models) runs in a
thread worker; details come from config.json (backend.models.registry): the exact shape from
transformers when it was asked before, else the formula, labelled as such; highlighting a
model asks transformers in another worker (one child process the first time, then cached).
"""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList, Static
from textual.widgets.option_list import Option
from textual.worker import get_current_worker

from backend.models.registry import ModelInfo, discover_models, exact_info
from tui.widgets.model_details import ORIGIN_LABELS, model_details_text
from tui.worker_failures import RETRY_IN_DIALOG, WorkerFailures, failure_text


class ModelPickerScreen(WorkerFailures, ModalScreen[str | None]):
    """Pick a discovered model or type a hub id / folder; returns the profile's `model.source`."""

    BINDINGS = [
        Binding("escape", "dismiss(None)", "Cancel", id="picker-cancel", tooltip="Close without choosing"),
        RETRY_IN_DIALOG,
    ]

    class Found(Message):
        def __init__(self, models: list[ModelInfo]) -> None:
            super().__init__()
            self.models = models

    def __init__(self, current: str, local_roots: list[Path]) -> None:
        super().__init__(id="model-picker", classes="dialog-screen")
        self.current = current
        self.local_roots = local_roots
        self.models: dict[str, ModelInfo] = {}
        self._answered: set[str] = set()  # refs whose exact shape arrived
        self._asking: str | None = None  # the ref the exact-shape worker asks about now

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog dialog-wide"):
            yield Label("Model: pick one, or type a hub id / folder and press Enter", classes="dialog-title")
            yield Input(self.current, id="model-input", compact=True,
                        placeholder="Qwen/Qwen2.5-7B-Instruct, /path/to/model, builtin:tiny-qwen2")
            yield OptionList(Option("scanning local folders and caches…", disabled=True), id="model-list")
            yield Static("", id="model-preview")
            yield Static("↑↓ choose · Enter: use · Esc: cancel", classes="dialog-hint")

    def show_failure(self, message: str) -> None:
        options = self.query_one("#model-list", OptionList)
        options.clear_options()
        options.add_option(Option(failure_text(message), disabled=True))

    def retry(self) -> None:
        self._scan()

    def on_mount(self) -> None:
        self.query_one("#model-list", OptionList).focus()
        self._scan()

    @work(thread=True, exclusive=True, group="model-scan", exit_on_error=False, description="Finding models")
    def _scan(self) -> None:
        self.post_message(self.Found(discover_models(self.local_roots)))

    @on(Found)
    def _found(self, event: Found) -> None:
        options = self.query_one("#model-list", OptionList)
        options.clear_options()
        self.models = {info.ref: info for info in event.models}
        for info in event.models:
            origin = ORIGIN_LABELS.get(info.origin, info.origin)
            size = f"  {info.shape.describe()[-1][1]}" if info.shape and info.shape.parameters else ""
            options.add_option(Option(Text.assemble((info.label, "bold"), (f"  [{origin}]", "dim"), size),
                                      id=info.ref))
        if not event.models:
            options.add_option(Option("no local models found; type a hub id above", disabled=True))
        refs = list(self.models)
        options.highlighted = refs.index(self.current) if self.current in refs else 0

    @on(OptionList.OptionHighlighted, "#model-list")
    def _highlighted(self, event: OptionList.OptionHighlighted) -> None:
        info = self.models.get(event.option.id or "")
        preview = model_details_text(info)
        if info is not None and info.path is not None and not (info.shape and info.shape.trusted):
            preview.append("\nasking transformers for the exact shape (first time for this model: one "
                           "child process, seconds; cached afterwards)…", style="dim italic")
            if info.ref not in self._answered and info.ref != self._asking:
                # one question at a time: the next highlight's worker replaces this one and stops its
                # child, so scrolling through ten models never runs ten children
                self._asking = info.ref
                self._ask_exact(info)
        self.query_one("#model-preview", Static).update(preview)

    class Exact(Message):
        def __init__(self, info: ModelInfo) -> None:
            super().__init__()
            self.info = info

    @work(thread=True, exclusive=True, group="model-exact", exit_on_error=False, description="Exact shape")
    def _ask_exact(self, info: ModelInfo) -> None:
        """The exact count from transformers, off the UI thread (the TUI never waits for it). A newer
        highlight replaces this worker: its child is stopped (`cancelled`), not left importing."""
        from backend.oracle import OracleCancelled

        worker = get_current_worker()
        try:
            exact = exact_info(info, cancelled=lambda: worker.is_cancelled)
        except OracleCancelled:
            return
        self.post_message(self.Exact(exact))

    @on(Exact)
    def _exact(self, event: Exact) -> None:
        info = event.info
        if info.ref not in self.models:
            return
        self._answered.add(info.ref)
        self.models[info.ref] = info
        options = self.query_one("#model-list", OptionList)
        origin = ORIGIN_LABELS.get(info.origin, info.origin)
        size = f"  {info.shape.describe()[-1][1]}" if info.shape else ""
        options.replace_option_prompt(info.ref, Text.assemble((info.label, "bold"), (f"  [{origin}]", "dim"), size))
        highlighted = options.highlighted_option
        if highlighted is not None and highlighted.id == info.ref:
            self.query_one("#model-preview", Static).update(model_details_text(info))

    @on(OptionList.OptionSelected, "#model-list")
    def _selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id in self.models:
            self.dismiss(event.option.id)

    @on(Input.Submitted, "#model-input")
    def _typed(self, event: Input.Submitted) -> None:
        if event.value.strip():
            self.dismiss(event.value.strip())
