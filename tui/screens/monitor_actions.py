"""What the monitor does to its run, each after asking: stop it (x), merge its best LoRA checkpoint (m), chat
with its best model (t) (best: the scoreboard's, backend.checkpoints.scoreboard); and the panels that look into it
in place of the log: its checkpoints (c) and the throughput doctor (d). A mixin of MonitorScreen: it needs `feed`
(the run folder) and posts the screen's `Changed` after a stop."""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING

from textual import work
from textual.widgets import Footer
from textual.worker import get_current_worker

from backend.runs.stop import stop_run
from tui.messages import ChatRequested
from tui.modals.dialogs import ConfirmModal
from tui.widgets.log_tail import LogTail
from tui.widgets.scoreboard import ScoreboardPanel

if TYPE_CHECKING:
    from textual.screen import Screen

    from tui.feed import RunFeed

    _Base = Screen[None]
else:
    _Base = object


class RunActions(_Base):
    feed: RunFeed

    def stopped(self) -> None:
        """Called (from a worker thread) once the run was stopped: the screen reads it again."""

    def action_stop(self) -> None:
        state = self.feed.state
        if state is None or not state.is_active:
            self.notify(f"the run is {state.status if state else 'unknown'}; nothing to stop", severity="warning")
            return
        body = (f"Stop {self.feed.run.run_id}? Every process of the run gets SIGINT, then SIGTERM, then SIGKILL. "
                "It can be resumed later from its last checkpoint.")

        def answered(yes: bool | None) -> None:
            if yes:
                self.notify("stopping…", timeout=3)
                self._stop_run()

        self.app.push_screen(ConfirmModal("Stop the run", body, "Stop"), answered)

    def action_save_now(self) -> None:
        """A checkpoint now (#27): the trainer saves at the end of its current step and goes on."""
        state = self.feed.state
        if state is None or state.status not in ("running", "starting"):
            self.notify(f"the run is {state.status if state else 'unknown'}; only a running run can save now",
                        severity="warning")
            return
        self.notify("asked for a checkpoint at the end of this step…", timeout=3)
        self._save_now()

    @work(thread=True, group="monitor-save", exclusive=True, exit_on_error=False, description="Saving a checkpoint")
    def _save_now(self) -> None:
        from backend.runs.errors import RunRefused
        from backend.runs.save_now import ask_for_checkpoint

        try:
            outcome = ask_for_checkpoint(self.feed.run, timeout=120)
        except RunRefused as err:
            self.app.notify(str(err), title="Not saved", severity="warning", markup=False)
            return
        self.app.notify("\n".join(outcome.lines), title="Checkpoint saved" if outcome.checkpoint else "No checkpoint yet",
                        severity="information" if outcome.checkpoint else "warning", markup=False, timeout=10)

    @work(thread=True, group="monitor-stop", exit_on_error=False, description="Stopping the run")
    def _stop_run(self) -> None:
        lines = stop_run(self.feed.run)
        self.app.notify("\n".join(lines), title=f"Stopped {self.feed.run.run_id}")
        self.stopped()

    def action_merge(self, step: int | None = None) -> None:
        which = "the best checkpoint" if step is None else f"checkpoint-{step}"
        body = (f"Runs `swift export --merge_lora true` on {which} as a job of this run. The merged "
                "model goes into a new folder under merged/; nothing existing is overwritten.")

        def answered(yes: bool | None) -> None:
            if yes:
                self._merge(step)

        self.app.push_screen(ConfirmModal("Merge the LoRA", body, "Merge", danger=False), answered)

    @work(thread=True, group="monitor-merge", exclusive=True, exit_on_error=False, description="Merging the LoRA")
    def _merge(self, step: int | None = None) -> None:
        """Start `swift export --merge_lora` as a tracked job and report how it ends."""
        from backend.jobs.job import refresh_job
        from backend.merge.job import MergeRefused, start_merge

        try:
            job = start_merge(self.feed.run, step)
        except MergeRefused as err:
            self.app.notify(str(err), title="Merge refused", severity="error", timeout=10, markup=False)
            return
        spec = job.read_spec()
        target = spec.output
        name, _, why = next((n.removeprefix("checkpoint: ") for n in spec.notes if n.startswith("checkpoint: ")),
                            "").partition(": ")
        which = f"{name} ({why}) " if why else ""
        self.app.notify(f"merging {which}into {target} (job {job.job_id})", title="Merge started", markup=False)
        while (state := refresh_job(job)).is_active and not get_current_worker().is_cancelled:
            time.sleep(1.0)
        if state.status == "finished":
            self.app.notify(f"{target}\npick it in the launch workspace, or press t to chat", title="Merged", markup=False)
        elif state.is_active:
            return  # the screen closed; the job goes on and `workbench jobs RUN` shows it
        else:
            self.app.notify(f"{state.status}: {state.failure_reason or 'see the job log'}", title="Merge failed",
                            severity="error", timeout=15)

    def action_chat(self, step: int | None = None) -> None:
        """The chat opens at once; it looks up the model (the run's scoreboard: its events and checkpoints) in
        its own worker, and closes saying why when there is none."""
        from backend.checkpoints import targets

        path = self.feed.run.path
        lookup = partial(targets.best_model_of_run, path) if step is None else partial(targets.target_of_run, path,
                                                                                        checkpoint=step)
        self.app.post_message(ChatRequested(lookup))

    def action_toggle_scoreboard(self) -> None:
        board = self.query_one(ScoreboardPanel)
        shown = not board.has_class("-shown")
        board.set_class(shown, "-shown")
        self.query_one(LogTail).display = not shown
        if shown:
            board.reload()
            board.focus_rows()
        else:
            self.set_focus(None)

    def action_doctor(self) -> None:
        from tui.widgets.doctor_panel import DoctorPanel  # built on first use (#38)

        DoctorPanel.toggle_in(self, self.feed.run.path, before=self.query_one(Footer))
