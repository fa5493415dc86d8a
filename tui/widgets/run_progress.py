"""One line over the monitor: status, progress bar, step, elapsed, ETA, steps/s and tokens/s."""

from __future__ import annotations

from rich.table import Table
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.reactive import reactive
from textual.renderables.bar import Bar
from textual.widget import Widget
from textual.widgets import Label, Static

from backend.rundir.layout import RunState
from backend.series import Throughput
from tui.widgets.quiet import show_text
from tui.widgets.units import duration, number, step_of

STATUS_CLASSES = ("-running", "-finished", "-failed", "-stopped", "-starting", "-stopping")


def elapsed_seconds(state: RunState | None, now: float) -> float | None:
    if state is None or state.started_at is None:
        return None
    end = state.ended_at if state.ended_at and not state.is_active else now
    return max(0.0, end - state.started_at)


class StepBar(Widget):
    """The run's progress: a thin bar and a percentage, hidden until the run's length is known.

    Repainted only when what it draws changes (a half cell of the bar, a percent): Textual's ProgressBar
    repaints itself every second for its ETA, shown or not, which over SSH is ~256 B/s for nothing."""

    BAR_WIDTH = 20
    COMPONENT_CLASSES = {"step-bar--done", "step-bar--complete", "step-bar--left"}
    DEFAULT_CSS = """
    StepBar {
        display: none;
        width: 27;
        height: 1;
        padding: 0 1;
        &.-known { display: block; }
        & > .step-bar--done { color: $primary; }
        & > .step-bar--complete { color: $success; }
        & > .step-bar--left { color: $foreground 20%; }
    }
    """
    drawn: reactive[tuple[int, int]] = reactive((0, 0))
    """(half cells filled, percent) as drawn."""

    def show(self, step: float, total: float) -> None:
        fraction = min(1.0, max(0.0, step / total)) if total else 0.0
        self.drawn = (round(fraction * self.BAR_WIDTH * 2), int(fraction * 100))
        self.add_class("-known")

    def render(self) -> Table:
        halves, percent = self.drawn
        done = "step-bar--complete" if percent == 100 else "step-bar--done"
        bar = Bar((0, halves / 2), highlight_style=self.get_component_rich_style(done),
                  background_style=self.get_component_rich_style("step-bar--left"), width=self.BAR_WIDTH)
        row = Table.grid(padding=(0, 1))
        row.add_row(bar, f"{percent:>3d}%")
        return row


class RunProgress(Horizontal):
    DEFAULT_CSS = """
    RunProgress {
        height: 1;
        #run-status { width: auto; padding: 0 1; text-style: bold; }
        #run-status.-running, #run-status.-starting { background: $primary; }
        #run-status.-finished { background: $success; }
        #run-status.-failed { background: $error; }
        #run-status.-stopped, #run-status.-stopping { background: $warning; color: $background; }
        #run-numbers { width: 1fr; }
    }
    """

    def compose(self) -> ComposeResult:
        yield Label("…", id="run-status")
        yield StepBar(id="run-bar")
        yield Static("", id="run-numbers", markup=False)

    def show(self, state: RunState | None, numbers: Throughput, now: float) -> None:
        status = state.status if state else "unknown"
        label = self.query_one("#run-status", Label)
        show_text(label, status)
        for name in STATUS_CLASSES:
            label.set_class(name == f"-{status}", name)
        bar = self.query_one(StepBar)
        if numbers.max_steps:
            bar.show(numbers.step or 0, numbers.max_steps)
        elif state is not None and not state.is_active:
            bar.show(0, 1)  # ended before its first step
        parts = [
            f"step {step_of(numbers.step, numbers.max_steps)}",
            f"elapsed {duration(elapsed_seconds(state, now))}",
            f"ETA {duration(numbers.eta_seconds)}" if state is not None and state.is_active else "",
            f"{number(numbers.steps_per_second, 3)} steps/s",
            f"{number(numbers.tokens_per_second, 4)} tok/s",
        ]
        show_text(self.query_one("#run-numbers", Static), "  ".join(p for p in parts if p))
