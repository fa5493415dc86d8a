"""Offline truth (#35): a model or dataset that is neither a local path nor in a local hub cache is
downloaded by swift at launch. validate says so (a warning), and refuses it (an error) when the machine is
offline: an offline variable is set, or, when validate may take its time, the hub does not answer a
short, bounded probe."""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Iterator

from backend.core.paths import is_builtin
from backend.launch.validate.core import Problem
from backend.models.refs import dataset_cached, is_hub_id
from backend.models.resolved import ResolvedProfile
from backend.profile import LaunchProfile

OFFLINE_ENV = ("HF_HUB_OFFLINE", "MODELSCOPE_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
PROBE_SECONDS = 3.0
HUB_HOSTS = {"hf": "huggingface.co", "modelscope": "www.modelscope.cn"}


def hub_downloads(profile: LaunchProfile, resolved: ResolvedProfile, *, probe: bool) -> Iterator[Problem]:
    """Each hub reference with no local copy: a warning, or an error when offline (`probe`: may try the hub)."""
    missing = list(_not_local(resolved))
    if not missing:
        return
    hub = "hf" if _uses_hf(profile) else "modelscope"
    offline = offline_reason(hub, probe=probe)
    for field, ref, what in missing:
        said = f"{ref!r} is a hub id with no local copy (neither a folder nor in the Hugging Face or ModelScope " \
               f"cache): swift downloads {what} from {HUB_HOSTS[hub]} at launch"
        if offline:
            unset = " (or unset the variable)" if offline.endswith("is set") else ""
            yield Problem(field, "error", f"{said}, and this machine is offline ({offline}).",
                          f"Download it on a machine with network access and give its local path{unset}.")
        else:
            yield Problem(field, "warning", f"{said}.", "Nothing to do if this machine reaches the hub; to start "
                          "faster, download it once (`huggingface-cli download` / `modelscope download`).")


def _not_local(resolved: ResolvedProfile) -> Iterator[tuple[str, str, str]]:
    source = resolved.source
    if is_hub_id(source) and resolved.model.origin == "hub":
        yield "model.source", source, "the whole model (weights and tokenizer)"
    for found in resolved.datasets():
        if is_builtin(found.ref):
            continue
        hub_id = found.ref.partition("#")[0]
        if found.found.kind == "hub" and is_hub_id(hub_id) and not dataset_cached(hub_id):
            yield found.field, found.ref, "the dataset"


def _uses_hf(profile: LaunchProfile) -> bool:
    wanted = profile.extra_swift_args.get("use_hf", os.environ.get("USE_HF", ""))
    return str(wanted).lower() in ("1", "true", "yes")


def offline_reason(hub: str, *, probe: bool) -> str | None:
    """Why this machine cannot download from `hub` (None when it can, as far as is known)."""
    for name in OFFLINE_ENV:
        if os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on"):
            return f"{name} is set"
    if probe and not hub_reachable(HUB_HOSTS[hub]):
        return f"{HUB_HOSTS[hub]} did not answer within {PROBE_SECONDS:g} s"
    return None


@functools.cache  # once a process: validate asks it per hub reference
def hub_reachable(host: str) -> bool:
    """A TCP connection to the hub's port 443 within PROBE_SECONDS (name lookup included)."""
    try:
        with socket.create_connection((host, 443), timeout=PROBE_SECONDS):
            return True
    except OSError:
        return False
