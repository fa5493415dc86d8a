"""The throughput doctor in the monitor (#38, key d): where the step's time goes, real and padded tokens per
second, MFU (or why there is none), and the verdicts, each with its evidence, the gain it expects and its profile
change; `a` (or enter) on a verdict applies it as `workbench doctor RUN --apply N` does, after asking: the
changed profile is written beside the run's and queued, and a notice names the queue entry.

Built on first use (the monitor mounts it when d is first pressed). The run folder is read by a thread worker
(backend.doctor is imported there, never on the UI thread: its model shape may start the oracle's child) when the
panel is first shown and again whenever events.jsonl changed while it is shown. Text from the run is never markup.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Static

from backend.contract.events import EVENTS_FILE_NAME
from backend.core.tail import FileMark, mark
from tui.safe import plain
from tui.worker_failures import WorkerFailures, failure_text

if TYPE_CHECKING:
    from textual.screen import Screen

    from backend.doctor.report import Diagnosis
    from backend.doctor.verdicts import Verdict

LOADING = "loading… (the doctor reads the run's step times)"


def _summary(diagnosis: Diagnosis, active: list[tuple[int | None, Verdict]]) -> str:
    if diagnosis.lead is None:
        return "no step timed yet"
    if not active:
        return "no verdict (no evidence of a fixable slowdown)"
    changes = sum(1 for number, _ in active if number)
    return f"{len(active)} {'verdict' if len(active) == 1 else 'verdicts'}, {changes} with a profile change"


class VerdictCard(Static, can_focus=True):
    """One verdict found: its lines; `a` or enter applies it when it changes the profile."""

    BINDINGS = [
        Binding(
            "a",
            "apply",
            "Apply it",
            id="doctor-apply",
            tooltip="Write this verdict's profile change beside the run's profile and queue it (asks first)",
        ),
        Binding("enter", "apply", show=False, id="doctor-apply-enter", tooltip="Apply this verdict (asks first)"),
        Binding("up", "app.focus_previous", show=False, id="doctor-previous", tooltip="The verdict above"),
        Binding("down", "app.focus_next", show=False, id="doctor-next", tooltip="The verdict below"),
    ]

    @dataclass
    class ApplyAsked(Message):
        number: int | None
        verdict: Verdict

    def __init__(self, number: int | None, verdict: Verdict, lines: list[str]) -> None:
        super().__init__(plain("\n".join(lines)), markup=False, classes="verdict")
        self.number, self.verdict = number, verdict

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.number is not None if action == "apply" else True  # a finding with nothing to change: no key

    def action_apply(self) -> None:
        self.post_message(self.ApplyAsked(self.number, self.verdict))

    def on_focus(self) -> None:
        self.call_after_refresh(self.scroll_visible, animate=False)  # whole, once its height is laid out


class DoctorPanel(WorkerFailures, Vertical):
    RELOAD_SECONDS = 5.0  # while shown: read again when events.jsonl changed (a live run logs new step times)

    DEFAULT_CSS = """
    DoctorPanel {
        display: none;
        height: 1fr;
        margin: 0 1;
        border: round $panel;
        border-title-color: $text-accent;
        &.-shown { display: block; }
        .summary { height: auto; color: $text-muted; }
        .measured, .skipped, .verdicts { height: auto; }
        .skipped { color: $text-muted; }
        .verdict { height: auto; padding: 0 1; margin: 1 0 0 0; }
        .verdict:focus { background: $accent 30%; }
    }
    """

    @dataclass
    class Loaded(Message, bubble=False):
        """A worker read the run's diagnosis."""

        diagnosis: Diagnosis
        mark: FileMark | None
        cards: list[tuple[int | None, Verdict, list[str]]]  # each verdict found: its number, its lines

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, DoctorPanel.Loaded)

    def __init__(self, run_dir: Path, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.run_dir = Path(run_dir)
        self.diagnosis: Diagnosis | None = None
        self.loads = 0  # diagnoses read (tests wait on it)
        self._mark: FileMark | None = None
        self._shown_verdicts: list[tuple[int | None, Verdict]] | None = None

    @classmethod
    def toggle_in(cls, screen: Screen[Any], run_dir: Path, before: Any) -> None:
        """Show the screen's panel, built now if it has none, or hide it (the screen's class `-doctor` lets its
        CSS give the panel the plots' room)."""
        panel = next(iter(screen.query(cls)), None)
        if panel is None:
            panel = cls(run_dir, id="doctor")
            screen.mount(panel, before=before)
        shown = not panel.has_class("-shown")
        panel.set_class(shown, "-shown")
        screen.set_class(shown, "-doctor")
        if shown:
            panel.reload()
            panel.call_after_refresh(panel.focus_first)
        else:
            screen.set_focus(None)

    def compose(self) -> ComposeResult:
        yield Static(LOADING, classes="summary", markup=False)
        with VerticalScroll():
            yield Static("", classes="measured", markup=False)
            yield Vertical(classes="verdicts")
            yield Static("", classes="skipped", markup=False)

    def on_mount(self) -> None:
        self.border_title = "Throughput doctor  (d: close · ↑↓: verdict · a: apply it)"
        self.set_interval(self.RELOAD_SECONDS, self._reload_if_shown)

    def focus_first(self) -> None:
        cards = self.query(VerdictCard)
        if cards:
            cards.first().focus()
        else:
            self.query_one(VerticalScroll).focus()

    # ------------------------------------------------------------ reading

    def _reload_if_shown(self) -> None:
        if self.has_class("-shown"):
            self.reload()

    def reload(self) -> None:
        self._read(self._mark if self.diagnosis is not None else None)

    @work(thread=True, exclusive=True, group="doctor-read", exit_on_error=False, description="Reading the doctor")
    def _read(self, known: FileMark | None) -> None:
        from backend.doctor.report import diagnose, verdict_text
        from backend.rundir.layout import RunFolder

        now = mark(self.run_dir / EVENTS_FILE_NAME)
        if known is not None and now == known:
            return
        diagnosis = diagnose(RunFolder(self.run_dir))
        cards = [
            (number, verdict, verdict_text(verdict, number, "(a: apply it)"))
            for number, verdict in diagnosis.numbered()
        ]
        self.post_message(self.Loaded(diagnosis, now, cards))

    @on(Loaded)
    async def _loaded(self, message: Loaded) -> None:
        self.diagnosis, self._mark = message.diagnosis, message.mark
        diagnosis = message.diagnosis
        active = diagnosis.numbered()
        self.query_one(".summary", Static).update(Text(f"run {diagnosis.run_id}: {_summary(diagnosis, active)}"))
        self.query_one(".measured", Static).update(plain("\n".join(diagnosis.measured_lines())))
        skipped = diagnosis.skipped_lines() if diagnosis.lead is not None else []  # problems are said above then
        self.query_one(".skipped", Static).update(plain("\n".join(skipped)))
        if active != self._shown_verdicts:
            self._shown_verdicts = active
            box = self.query_one(".verdicts", Vertical)
            had_focus = any(card.has_focus for card in self.query(VerdictCard))
            await box.remove_children()
            await box.mount_all([VerdictCard(number, verdict, lines) for number, verdict, lines in message.cards])
            if had_focus or self.has_class("-shown"):
                self.focus_first()
        self.loads += 1  # counted once shown whole, its cards mounted and the first one focused

    # ------------------------------------------------------------ applying

    @on(VerdictCard.ApplyAsked)
    def _apply_asked(self, event: VerdictCard.ApplyAsked) -> None:
        event.stop()
        number, verdict = event.number, event.verdict
        if number is None:
            self.app.notify("this verdict changes nothing in the profile", severity="warning", markup=False)
            return
        from tui.modals.dialogs import ConfirmModal

        body = (
            f"Apply verdict {number}: {verdict.change_text()}. The run's profile with this change is written "
            f"beside it (profile.doctor-{verdict.code}.toml) and queued as a new run; the doctor compares the "
            "two once it has run."
        )

        def answered(yes: bool | None) -> None:
            if yes:
                self._apply(number)

        self.app.push_screen(ConfirmModal("Apply the doctor's change", body, "Queue it", danger=False), answered)

    @work(thread=True, group="doctor-apply", exit_on_error=False, description="Queueing the doctor's change")
    def _apply(self, number: int) -> None:
        from backend.doctor.apply import ApplyRefused, apply_verdict
        from backend.queue.store import QueueRefused
        from backend.rundir.layout import RunFolder

        if self.diagnosis is None:
            return
        try:
            applied = apply_verdict(RunFolder(self.run_dir), self.diagnosis, number)
        except (ApplyRefused, QueueRefused) as err:
            self.app.notify(str(err), title="Not queued", severity="error", timeout=20, markup=False)
            return
        self.app.notify(
            f"queued as entry {applied.entry_id}: {applied.verdict.change_text()}; wrote {applied.profile_file}",
            title="The doctor's change is queued",
            markup=False,
            timeout=20,
        )

    # ------------------------------------------------------------ failures

    def show_failure(self, message: str) -> None:
        self.query_one(".summary", Static).update(failure_text(message))

    def retry(self) -> None:
        self._read(None)
