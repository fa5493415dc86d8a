"""What the monitor does to its run, each after asking: stop it (x), merge its newest LoRA
checkpoint (m), chat with its newest model (t). A mixin of MonitorScreen: it needs `feed`
(the run folder) and posts the screen's `Changed` after a stop."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from textual import work
from textual.worker import get_current_worker

from backend.runs.manager import stop_run
from tui.messages import ChatRequested
from tui.modals.dialogs import ConfirmModal

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

    @work(thread=True, group="monitor-stop", exit_on_error=False, description="Stopping the run")
    def _stop_run(self) -> None:
        lines = stop_run(self.feed.run)
        self.app.notify("\n".join(lines), title=f"Stopped {self.feed.run.run_id}")
        self.stopped()

    def action_merge(self) -> None:
        body = ("Runs `swift export --merge_lora true` on the newest checkpoint as a job of this run. The merged "
                "model goes into a new folder under merged/; nothing existing is overwritten.")

        def answered(yes: bool | None) -> None:
            if yes:
                self._merge()

        self.app.push_screen(ConfirmModal("Merge the LoRA", body, "Merge", danger=False), answered)

    @work(thread=True, group="monitor-merge", exclusive=True, exit_on_error=False, description="Merging the LoRA")
    def _merge(self) -> None:
        """Start `swift export --merge_lora` as a tracked job and report how it ends."""
        from backend.jobs.job import refresh_job
        from backend.jobs.merge import MergeRefused, start_merge

        try:
            job = start_merge(self.feed.run)
        except MergeRefused as err:
            self.app.notify(str(err), title="Merge refused", severity="error", timeout=10, markup=False)
            return
        target = job.read_spec().output
        self.app.notify(f"merging into {target} (job {job.job_id})", title="Merge started", markup=False)
        while (state := refresh_job(job)).is_active and not get_current_worker().is_cancelled:
            time.sleep(1.0)
        if state.status == "finished":
            self.app.notify(f"{target}\npick it in the launch workspace, or press t to chat", title="Merged", markup=False)
        elif state.is_active:
            return  # the screen closed; the job goes on and `workbench jobs RUN` shows it
        else:
            self.app.notify(f"{state.status}: {state.failure_reason or 'see the job log'}", title="Merge failed",
                            severity="error", timeout=15)

    def action_chat(self) -> None:
        from backend.jobs.targets import TargetError, newest_model_of_run

        try:
            target = newest_model_of_run(self.feed.run.path)
        except TargetError as err:
            self.app.notify(str(err), title="Cannot open the chat", severity="error", timeout=15, markup=False)
            return
        self.app.post_message(ChatRequested(target))
