"""What a profile's device asks of a cluster's nodes: one rule for every cluster submission (SLURM's batch
script and queue, SkyPilot's task).

A device of "auto" means "cuda when this machine has a GPU", which cannot be known of a cluster's nodes from
here. So "auto" asks for GPUs only when the submission names them itself (SLURM's `--gpus-per-node N`,
SkyPilot's `--accelerator NAME`), else for none; either way the submission says which it chose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from backend.profile import LaunchProfile


@dataclass(frozen=True)
class ClusterGpus:
    per_node: int
    note: str | None = None  # what was chosen for a device left to "auto"; None for "cpu" or "cuda"

    @property
    def device(self) -> Literal["cpu", "cuda"]:
        """The device the job runs on: the nodes' GPUs when it asks for any."""
        return "cuda" if self.per_node else "cpu"


def cluster_gpus(profile: LaunchProfile, *, named: int | None, how_to_name: str) -> ClusterGpus:
    """The GPUs a node of a cluster submission asks for. `named`: the GPUs per node the submission names itself
    (None: it names none); `how_to_name`: the option that names them, for the note."""
    device = profile.distribution.device
    if named is not None:
        if device != "auto":
            return ClusterGpus(named)
        asked = f"{named} GPU(s) per node, as {how_to_name} named" if named else f"no GPU, as {how_to_name} named"
        return ClusterGpus(named, f'[distribution] device is "auto": the job asks for {asked}')
    if device == "cuda":
        return ClusterGpus(profile.distribution.nproc_per_node)
    if device == "cpu":
        return ClusterGpus(0)
    return ClusterGpus(
        0,
        '[distribution] device is "auto": the job asks for no GPU (set device = "cuda" to ask '
        f"for nproc_per_node GPUs per node, or name them with {how_to_name})",
    )
