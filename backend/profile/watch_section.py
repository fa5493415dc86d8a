"""The profile's `[watch]` and `[notify]` sections: the models, a leaf the profile and the watch package
both import (the profile sits on the ground floor, the watchdog and sinks that read it above).

`[watch]` sets the thresholds of the watchdog that runs in each run's supervisor and what it does
for each alert kind (`alert`, or `stop`: a clean stop that keeps the last checkpoint; for `overfit`, at
the next checkpoint, so the evaluation that raised it has its checkpoint).
`[notify]` says where alerts go; keys left unset come from the user-level notify.toml
(backend.watch.config).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ALERT_KINDS = ("finished", "stopped", "failed", "hang", "nonfinite", "divergence", "loss_scale",
               "gpu_memory", "host_memory", "disk", "throughput", "overfit", "resume_drift", "memory_creep", "watchdog")
ActionableKind = Literal["hang", "nonfinite", "divergence", "loss_scale", "gpu_memory", "host_memory", "disk",
                         "throughput", "overfit", "resume_drift", "memory_creep"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class WatchSection(_Section):
    enabled: bool = Field(True, description="Run the watchdog in the run's supervisor.")
    hang_factor: float = Field(10.0, gt=1, description="Hang: no progress for this many times the median time between logged steps ...")
    hang_min_seconds: float = Field(300.0, gt=0, description="... and at least this many seconds.")
    nonfinite: bool = Field(True, description="Alert when the loss or (outside fp16) the grad norm is NaN/inf.")
    divergence_factor: float = Field(3.0, gt=1, description="Divergence: the loss EMA rose by this factor ...")
    divergence_window: int = Field(50, ge=2, description="... within this many steps.")
    loss_scale_min: float = Field(1.0, gt=0, description="fp16: alert when the dynamic loss scale falls below this.")
    overflow_run: int = Field(10, ge=1, description="fp16: alert after this many overflowed (skipped) steps in a row.")
    gpu_memory_fraction: float = Field(0.97, gt=0, le=1, description="Alert when a GPU's used memory passes this fraction.")
    creep_min_mib: float = Field(64.0, gt=0, description="Memory creep: alert when memory grows at equal batch length "
                                                          "by at least this many MiB over the steps seen ...")
    creep_min_steps: int = Field(20, ge=4, description="... measured over at least this many equal-length steps.")
    host_memory_min_fraction: float = Field(0.05, ge=0, lt=1, description="Alert when available host RAM falls below this fraction.")
    disk_margin: float = Field(1.2, ge=1, description="Disk: alert when free space < this x the next checkpoint's forecast size.")
    throughput_fraction: float = Field(0.5, gt=0, lt=1, description="Alert when steps/s stays below this fraction of its median ...")
    throughput_window: int = Field(3, ge=1, description="... for this many log records in a row.")
    overfit_evals: int = Field(3, ge=1, description="Overfit: the eval loss rose at this many evaluations in a "
                                                    "row while the train loss fell (action stop: at the next checkpoint).")
    resume_logs: int = Field(5, ge=1, description="After a resume: compare this many logged steps with the tail "
                                                   "before the stop (loss band, learning rate, data position) ...")
    resume_loss_factor: float = Field(1.5, gt=1, description="... and alert when their loss passes this many times "
                                                             "the top of the band before the stop.")
    flight_recorder: bool = Field(True, description="Several processes: PyTorch's flight recorder keeps each rank's last "
                                                   "collectives, dumped into the run folder at an NCCL timeout or a "
                                                   "hang alert (TORCH_FR_BUFFER_SIZE and friends; false: not set).")
    poll_seconds: float = Field(1.0, gt=0, le=60, description="How often the watchdog reads the events file.")
    stop_grace_seconds: float = Field(20.0, ge=0, description="A `stop` action: seconds between SIGINT, SIGTERM and SIGKILL.")
    actions: dict[ActionableKind, Literal["alert", "stop", "off"]] = Field(
        default_factory=dict, description="Per alert kind: alert (default), stop (a clean stop keeping the last "
                                          "checkpoint) or off, e.g. {hang = \"stop\", throughput = \"off\"}.")


WebhookFormat = Literal["json", "ntfy", "slack"]


class NotifySection(_Section):
    """Unset (None) keys come from the user-level notify.toml."""

    webhook: str | None = Field(None, description="URL to POST each alert to; ${NAME} is read from the environment.")
    webhook_format: WebhookFormat | None = Field(
        None, description="json (the alert), ntfy (plain text + Title/Priority headers) or slack (Slack/Discord {text}).")
    webhook_token_env: str | None = Field(None, description="Environment variable holding a bearer token for the webhook.")
    webhook_retries: int | None = Field(None, ge=0, le=10, description="Retries of a failed POST, 1 s, 2 s, 4 s ... apart (default 4).")
    command: str | None = Field(None, description="Shell command run for each alert, with the alert as JSON on stdin.")
    desktop: bool | None = Field(None, description="Desktop notification via notify-send, when it is installed.")
    bell: bool | None = Field(None, description="Terminal bell in an open TUI / `workbench watch` for each alert.")
    kinds: list[str] | None = Field(None, description="Alert kinds sent to the sinks (empty/unset = all).")
