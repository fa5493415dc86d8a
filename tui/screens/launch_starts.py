"""The launch workspace's Launch (F5): refused with the first error, else asked (start now, queue, cancel), then
started as a detached run (its monitor opens) or queued with the keeper started.

A mixin of `LaunchScreen`: the run's start is backend.runs.start's, the queue's backend.queue's, each in a
thread worker; a refusal is said as such.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from textual import work

from tui.messages import RunLaunched

if TYPE_CHECKING:
    from textual.screen import Screen

    from backend.hardware.machine import HardwareInfo
    from backend.launch.validate import Problem
    from backend.profile import LaunchProfile
    from tui.profile_document import ProfileDocument

    _Base = Screen
else:
    _Base = object


class LaunchChoice(Enum):
    """What the launch dialog answers (Escape: None)."""

    NOW = "now"
    QUEUE = "queue"
    CANCEL = "cancel"


class LaunchStarts(_Base):
    document: ProfileDocument
    hardware: HardwareInfo | None
    problems: tuple[Problem, ...] | None

    def action_launch(self) -> None:
        if self.hardware is None:
            self.notify("Still detecting this machine's hardware; try again in a moment.", severity="warning")
            return
        from backend.launch.validate import errors
        from tui.modals.dialogs import Choice, ConfirmScreen
        from tui.screens.launch_support import launch_summary
        from tui.widgets.details_pane import DetailsPane

        blocking = errors(list(self.problems or ()))
        if blocking:
            self.query_one(DetailsPane).show("details-problems")
            first = blocking[0]
            self.notify(f"{first.field}: {first.message}\nFix: {first.fix}", title=f"Launch refused: "
                        f"{len(blocking)} error(s)", severity="error", timeout=10, markup=False)
            return
        choices = [Choice("Start now", LaunchChoice.NOW, "success", "launch"),
                   Choice("Queue", LaunchChoice.QUEUE, "primary", "queue"),
                   Choice("Cancel", LaunchChoice.CANCEL, "default", "cancel")]
        summary = launch_summary(self.document.profile, self.problems or (), self.document.base_dir)
        self.app.push_screen(ConfirmScreen("Launch this run?", summary, choices, id="confirm-launch"),
                             self._launch_confirmed)

    def _launch_confirmed(self, launch: LaunchChoice | None) -> None:
        if launch is LaunchChoice.NOW:
            self.notify("Starting the run…", timeout=4)
            self._start_run(self.document.profile.model_copy(deep=True), self.document.base_dir)
        elif launch is LaunchChoice.QUEUE:
            self._queue_run(self.document.profile.model_copy(deep=True), self.document.base_dir)

    @work(thread=True, exclusive=True, group="launch", exit_on_error=False, description="Queueing the run")
    def _queue_run(self, profile: LaunchProfile, base_dir: Path) -> None:
        """Queue it (a sweep: every combination) and start the keeper (#25); the queue screen (F7) lists it."""
        from backend.queue.add import add_profiles
        from backend.queue.keeper import ensure_keeper
        from backend.queue.store import QueueDamaged, QueueRefused
        from backend.queue.sweep import SweepError

        try:
            added = add_profiles([(profile, base_dir)])
            ensure_keeper()
        except (SweepError, QueueRefused, QueueDamaged) as err:
            self.app.notify(str(err), title="Not queued", severity="error", timeout=15, markup=False)
            return
        self.app.notify("\n".join(f"{e.id}  {e.name}" for e in added), title=f"Queued {len(added)} run(s) (F7: "
                        f"the queue)", markup=False)

    @work(thread=True, exclusive=True, group="launch", exit_on_error=False, description="Starting the run")
    def _start_run(self, profile: LaunchProfile, base_dir: Path) -> None:
        from backend.runs.errors import LaunchRefused
        from backend.runs.start import start_run

        try:
            run = start_run(profile, base_dir=base_dir, hardware=self.hardware)
        except LaunchRefused as err:  # the refusal, said as such (any other error takes the failure path)
            self.app.notify("\n".join(str(p) for p in err.problems), title="Launch refused", severity="error",
                            timeout=15, markup=False)
            return
        self.post_message(RunLaunched(run.path))

    def on_run_launched(self, event: RunLaunched) -> None:  # by name: @on is not seen in a mixin
        self.notify(f"Run started: {event.run_dir.name}", title="Launched", markup=False)
        self.app.open_run(event.run_dir)  # type: ignore[attr-defined]

