"""The Model tab's details: the chosen model's shape and what ms-swift will be told about it.

The widget owns its inspection: the screen binds `question` (what the form says about the model)
and the widget reads config.json and ms-swift's registry in a thread worker, shows the answer,
and posts `ModelDetails.Inferred` up (swift's warnings and the names to offer while typing).
An answer about a query that is no longer current is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.message import Message
from textual.reactive import var
from textual.widgets import Static
from textual.worker import get_current_worker

from backend.launch.validate import Problem
from backend.models.registry import (
    ModelInfo,
    SwiftInference,
    describe_source,
    exact_info,
    infer_swift_types,
    load_swift_registry,
)
from backend.oracle.errors import OracleCancelled
from tui.screens.launch_support import swift_type_problems
from tui.worker_failures import WorkerFailures, failure_text

ORIGIN_LABELS = {"builtin": "built-in", "local": "local", "hf-cache": "HF cache", "modelscope-cache": "ModelScope",
                 "hub": "hub"}


def model_details_text(info: ModelInfo | None, inference: SwiftInference | None = None) -> Text:
    """Shape rows, then what swift will be told (or must be told) about model_type/template."""
    text = Text()
    if info is None:
        return Text("no model chosen", style="dim")
    text.append(f"{info.label}", style="bold")
    text.append(f"  [{ORIGIN_LABELS.get(info.origin, info.origin)}]\n", style="dim")
    if info.shape is not None:
        rows = info.shape.describe()
        text.append("  ".join(f"{label}: {value}" for label, value in rows[:-1]) + "\n")
        text.append(f"{rows[-1][0]}: {rows[-1][1]}\n")
        for note in info.shape.notes:
            text.append(f"note: {note}\n", style="dim")
    for problem in info.problems:
        text.append(f"! {problem}\n", style="yellow")
    if inference is not None:
        text.append_text(_inference_text(inference))
    text.rstrip()
    return text


def _inference_text(inference: SwiftInference) -> Text:
    text = Text()
    if inference.how == "unknown" and not inference.warnings:
        return text
    if inference.model_type and inference.template:
        how = {"builtin": "built-in model", "name": "matched by name", "architecture": "matched by architecture",
               "profile": "set in the profile", "args.json": "from the folder's args.json"}.get(inference.how, "")
        text.append(f"swift: model_type {inference.model_type}, template {inference.template}", style="green")
        text.append(f" ({how})\n" if how else "\n", style="dim")
    for warning in inference.warnings:
        text.append(f"! {warning}\n", style="yellow")
    if inference.model_type_choices:
        text.append(f"  model_type choices: {', '.join(inference.model_type_choices)}\n")
    if inference.template_choices:
        text.append(f"  template choices: {', '.join(inference.template_choices)}\n")
    return text


@dataclass(frozen=True)
class ModelQuery:
    """What the profile says about the model."""

    source: str
    model_type: str | None
    template: str | None
    base_dir: Path


class ModelDetails(WorkerFailures, Static):
    """Shape rows and swift's model_type/template, for the model of `query`."""

    question: var[ModelQuery | None] = var(None, init=False)  # what to show: set by the screen (data_bind)
    """The model to describe (bound to the screen's)."""
    info: var[ModelInfo | None] = var(None, init=False)
    """The model described; None while being read."""
    inference: var[SwiftInference | None] = var(None, init=False)
    """What swift will use for model_type/template."""

    class Described(Message, bubble=False):
        def __init__(self, query: ModelQuery, info: ModelInfo, inference: SwiftInference,
                     registry: dict | None) -> None:
            super().__init__()
            self.question, self.info, self.inference, self.registry = query, info, inference, registry

    class Inferred(Message):
        """swift's verdict on the current model: warnings for the form, names to offer while typing."""

        def __init__(self, problems: tuple[Problem, ...], suggestions: dict[str, tuple[str, ...]]) -> None:
            super().__init__()
            self.problems = problems
            self.suggestions = suggestions

    def watch_question(self, query: ModelQuery | None) -> None:
        if query is not None:
            self._describe(query)

    def watch_info(self) -> None:
        self.update(model_details_text(self.info, self.inference))

    def watch_inference(self) -> None:
        self.update(model_details_text(self.info, self.inference))

    def show_failure(self, message: str) -> None:
        shown = model_details_text(self.info, self.inference) if self.info is not None else Text()
        self.update(Text("\n").join([t for t in (shown, failure_text(message)) if t.plain]))

    def retry(self) -> None:
        if self.question is not None:
            self._describe(self.question)

    @work(thread=True, exclusive=True, group="model-details", exit_on_error=False, description="Reading the model")
    def _describe(self, query: ModelQuery) -> None:
        info = describe_source(query.source, query.base_dir)
        registry = load_swift_registry()
        inference = infer_swift_types(info, registry, model_type=query.model_type, template=query.template)
        self.post_message(self.Described(query, info, inference, registry))
        if registry is None and inference.needs_choice and info.origin != "builtin":
            self.app.call_from_thread(self._read_swift_registry, query, info)
        if not (info.shape and info.shape.trusted) and info.path and (info.path / "config.json").is_file():
            # transformers' exact count (#13): one child process the first time, in this worker
            worker = get_current_worker()
            try:
                exact = exact_info(info, cancelled=lambda: worker.is_cancelled)
            except OracleCancelled:
                return  # another model was chosen: its child was stopped
            self.post_message(self.Described(query, exact, inference, registry))

    @work(thread=True, exclusive=True, group="swift-registry", exit_on_error=False,
          description="Reading ms-swift's model registry")
    def _read_swift_registry(self, query: ModelQuery, info: ModelInfo) -> None:
        from backend.models.registry import build_swift_registry

        self.app.notify("Asking ms-swift which model_type/template fit (first time only, about 15 s)…",
                        title="Model", timeout=8)
        worker = get_current_worker()
        try:
            registry = build_swift_registry(cancelled=lambda: worker.is_cancelled)
        except OracleCancelled:
            return
        inference = infer_swift_types(info, registry, model_type=query.model_type, template=query.template)
        self.post_message(self.Described(query, info, inference, registry))

    @on(Described)
    def _described(self, event: Described) -> None:
        if event.question != self.question:
            return  # an answer about a model that is no longer chosen
        self.info, self.inference = event.info, event.inference
        inference, registry = event.inference, event.registry
        suggestions = {}
        if registry is not None:  # typing in model_type / template completes from swift's names, likely first
            suggestions = {"model.model_type": (*inference.model_type_choices, *registry["model_types"]),
                           "model.template": (*inference.template_choices, *registry["templates"])}
        self.post_message(self.Inferred(tuple(swift_type_problems(inference)),
                                        {path: tuple(dict.fromkeys(names)) for path, names in suggestions.items()}))
