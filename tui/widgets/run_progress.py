"""One line over the monitor: status, progress bar, step, elapsed, ETA, steps/s and tokens/s."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Label, ProgressBar, Static

from backend.runs.layout import RunState
from backend.series import Throughput
from tui.widgets.quiet import show_text
from tui.widgets.units import duration, number, step_of

STATUS_CLASSES = ("-running", "-finished", "-failed", "-stopped", "-starting", "-stopping")


def elapsed_seconds(state: RunState | None, now: float) -> float | None:
    if state is None or state.started_at is None:
        return None
    end = state.ended_at if state.ended_at and not state.is_active else now
    return max(0.0, end - state.started_at)


class RunProgress(Horizontal):
    DEFAULT_CSS = """
    RunProgress {
        height: 1;
        #run-status { width: auto; padding: 0 1; text-style: bold; }
        #run-status.-running, #run-status.-starting { background: $primary; }
        #run-status.-finished { background: $success; }
        #run-status.-failed { background: $error; }
        #run-status.-stopped, #run-status.-stopping { background: $warning; color: $background; }
        ProgressBar { width: auto; padding: 0 1; }
        Bar { width: 20; }
        #run-numbers { width: 1fr; }
    }
    """

    def compose(self) -> ComposeResult:
        yield Label("…", id="run-status")
        bar = ProgressBar(total=None, show_eta=False, id="run-bar")
        bar.display = False  # shown once the run's length is known
        yield bar
        yield Static("", id="run-numbers", markup=False)

    def show(self, state: RunState | None, numbers: Throughput, now: float) -> None:
        status = state.status if state else "unknown"
        label = self.query_one("#run-status", Label)
        show_text(label, status)
        for name in STATUS_CLASSES:
            label.set_class(name == f"-{status}", name)
        bar = self.query_one(ProgressBar)
        if numbers.max_steps:
            bar.update(total=numbers.max_steps, progress=numbers.step or 0)
        elif state is not None and not state.is_active:
            bar.update(total=1, progress=0)  # ended before its first step: no bouncing bar
        # no bouncing bar while the length is unknown either: its animation is 15 frames a second over SSH
        bar.display = bar.total is not None
        parts = [
            f"step {step_of(numbers.step, numbers.max_steps)}",
            f"elapsed {duration(elapsed_seconds(state, now))}",
            f"ETA {duration(numbers.eta_seconds)}" if state is not None and state.is_active else "",
            f"{number(numbers.steps_per_second, 3)} steps/s",
            f"{number(numbers.tokens_per_second, 4)} tok/s",
        ]
        show_text(self.query_one("#run-numbers", Static), "  ".join(p for p in parts if p))
