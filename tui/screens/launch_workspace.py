"""What the launch screen builds right after its first frame (#41): the form and the details pane, bound to the
screen's reactives, and what follows from the profile document — the validation, the plan and the questions the
model, data and forecast widgets answer in their workers.

These modules (the profile's pydantic models, the command builder, the validators, the form's widgets) are the
bulk of the workspace's start-up, so `tui/screens/launch.py` imports this module only once its frame is drawn.
"""

from __future__ import annotations

from typing import Any

from textual.screen import Screen

from backend.hardware.machine import HardwareInfo
from backend.launch.command import LaunchPlan, build_launch
from backend.launch.validate import Problem, resolve_profile, validate
from backend.rundir.layout import preview_dir
from tui.profile_document import ProfileDocument
from tui.widgets.dataset_details import DataQuery, DatasetSummary
from tui.widgets.details_pane import DetailsPane
from tui.widgets.memory_line import ForecastQuery
from tui.widgets.model_details import ModelDetails, ModelQuery
from tui.widgets.settings_tabs import SettingsTabs
from tui.widgets.swift_report import SwiftDataQuery, SwiftDataReport


def workspace_widgets(screen: Screen, document: ProfileDocument) -> tuple[SettingsTabs, DetailsPane]:
    """The form (with the model, data and swift-data notes under their fields) and the details pane, each bound
    to the screen's reactives (called from the screen's own handler: the binding's owner)."""
    owner: Any = type(screen)  # the launch screen's class: its reactives (not imported: it imports this module)
    beside = {  # shown under their fields, styled as the tab's notes (.tab-info)
        "model.source": ModelDetails(id="model-details", classes="tab-info").data_bind(question=owner.model_query),
        "data.train": DatasetSummary(id="dataset-summary", classes="tab-info").data_bind(question=owner.data_query),
        "data.split_dataset_ratio": SwiftDataReport(id="swift-data", classes="tab-info").data_bind(
            question=owner.swift_data_query)}
    form = SettingsTabs(document, beside=beside, id="settings").data_bind(
        owner.revision, owner.problems, owner.hardware, owner.suggestions)
    details = DetailsPane(id="details").data_bind(owner.problems, owner.plan, owner.plan_error)
    return form, details


def check(document: ProfileDocument, hardware: HardwareInfo,
          model_problems: tuple[Problem, ...]) -> tuple[tuple[Problem, ...], LaunchPlan | None, str]:
    """What is wrong with the form, the plan launch would run (built in memory for a preview folder, nothing
    written) and why there is none."""
    problems = [Problem(path, "error", f"the typed value is refused: {message}",
                        "Correct it; until then the profile keeps the last accepted value.")
                for path, message in document.refused.items()]
    resolved = resolve_profile(document.profile, document.base_dir)  # once: the Command tab names what was validated
    problems += validate(document.profile, hardware, base_dir=document.base_dir, resolved=resolved)
    problems += model_problems
    problems.sort(key=lambda p: p.severity != "error")
    try:
        plan = build_launch(document.profile, preview_dir(document.profile.name), hardware,
                            base_dir=document.base_dir, resolved=resolved)
    except Exception as err:  # a half-edited profile may not build: say why instead of a stale plan
        return tuple(problems), None, f"The command cannot be built yet: {err}"
    return tuple(problems), plan, ""


def queries(document: ProfileDocument, hardware: HardwareInfo | None
            ) -> tuple[ModelQuery, DataQuery, SwiftDataQuery, ForecastQuery | None]:
    """What the model, data, swift-data and memory widgets are asked about the profile (the forecast once the
    hardware is known)."""
    p, base_dir = document.profile, document.base_dir
    forecast = ForecastQuery(p.model_copy(deep=True), base_dir, hardware) if hardware is not None else None
    return (ModelQuery(p.model.source, p.model.model_type, p.model.template, base_dir),
            DataQuery((*p.data.train, *p.data.val), base_dir), SwiftDataQuery.of(p, base_dir), forecast)
