"""A profile's `[sweep]`: a grid over dotted keys expanded into one profile per combination, its name
carrying the values (`quickstart-lr1e-04-rank8`)."""

from __future__ import annotations

import itertools
import re
from typing import Any

from pydantic import ValidationError

from backend.profile import LaunchProfile

SHORT_NAMES = {"learning_rate": "lr", "lora_rank": "rank", "lora_alpha": "alpha", "per_device_train_batch_size": "bs",
               "gradient_accumulation_steps": "acc", "num_train_epochs": "ep", "max_steps": "steps"}


class SweepError(ValueError):
    """A sweep key or value the profile does not accept (the message names the key and what to do)."""


def _label(key: str, value: Any) -> str:
    leaf = key.rsplit(".", 1)[-1]
    short = SHORT_NAMES.get(leaf, leaf)
    shown = f"{value:.0e}" if isinstance(value, float) and (abs(value) < 1e-3 and value) else str(value)
    return re.sub(r"[^A-Za-z0-9_.+-]", "", f"{short}{shown}")


def expand(profile: LaunchProfile) -> list[LaunchProfile]:
    """One profile per combination of the sweep's values (itself, without the sweep, when it has none);
    names `<name>-<label><value>-...`. SweepError for a key that is not a profile field or a value it
    refuses."""
    if not profile.sweep:
        return [profile]
    keys = list(profile.sweep)
    for key in keys:
        if not profile.sweep[key]:
            raise SweepError(f"sweep key {key!r} has no values: give a list of at least one")
    out = []
    for values in itertools.product(*(profile.sweep[k] for k in keys)):
        data = profile.model_dump()
        data["sweep"] = {}
        for key, value in zip(keys, values, strict=True):
            _assign(data, key, value)
        data["name"] = "-".join([profile.name, *(_label(k, v) for k, v in zip(keys, values, strict=True))])
        try:
            out.append(LaunchProfile.model_validate(data))
        except ValidationError as err:
            raise SweepError(f"sweep {dict(zip(keys, values, strict=True))}: {err.errors()[0]['msg']} "
                             f"(at {'.'.join(str(p) for p in err.errors()[0]['loc'])})") from None
    return out


def _assign(data: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node: Any = data
    for part in parts[:-1]:
        if not isinstance(node, dict) or part not in node or not isinstance(node[part], dict):
            raise SweepError(f"sweep key {key!r}: {part!r} is not a profile section (see `workbench schema`)")
        node = node[part]
    if parts[-1] not in node:
        raise SweepError(f"sweep key {key!r}: {parts[-1]!r} is not a profile field (see `workbench schema`)")
    node[parts[-1]] = value
