"""Exact model shapes from transformers itself (parent side of the `model_shape` oracle question).

The first shape of a config costs one child process (transformers + PEFT imports, the model
built on the meta device: seconds, announced through `progress`); afterwards the answer comes
from the oracle cache, keyed by the transformers/PEFT/torch versions and the config's content
(a few milliseconds, no child). `cached_shape` never starts a child: the TUI calls it on its
thread and asks `exact_shape` in a worker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from backend.estimate.shape import ConfigError, ModelShape, read_config
from backend.oracle.cache import register_shape

QUESTION = "model_shape"
LIBRARIES = ("transformers", "peft", "torch")
DEFAULT_TARGETS: tuple[str, ...] = ("all-linear",)
PEFT_RANK = 8  # PEFT is asked at this rank; LoRA counts scale linearly with r (A is r x in, B is out x r)


def _decode(answer: dict[str, Any]) -> None:
    """Raises when a kept answer is not of this question's shape (the cache then asks again): one
    config's answer, or several under `answers`; each through the same conversion the planner uses."""
    for one in answer["answers"].values() if "answers" in answer else (answer,):
        if not isinstance(one.get("known"), bool):
            raise ValueError("no 'known' flag")
        if one["known"]:
            try:
                ModelShape.from_oracle({}, one)
            except ConfigError:
                pass  # transformers' own verdict on a config: a real answer, said as such when used


register_shape(QUESTION, _decode)


def payload(config: dict[str, Any], targets: Iterable[str] = DEFAULT_TARGETS) -> dict[str, Any]:
    lora = [{"r": PEFT_RANK, "target_modules": "all-linear"}]
    chosen = sorted(set(targets))
    if chosen != ["all-linear"]:
        lora.append({"r": PEFT_RANK, "target_modules": chosen})
    return {"config": config, "lora": lora}


def cached_answer(config: dict[str, Any], targets: Iterable[str] = DEFAULT_TARGETS) -> dict[str, Any] | None:
    from backend.oracle import cached

    return cached(QUESTION, payload(config, targets), libraries=LIBRARIES)


def ask_answer(config: dict[str, Any], targets: Iterable[str] = DEFAULT_TARGETS, *,
               progress: Callable[[str], None] | None = None, timeout: float = 300.0,
               cancelled: Callable[[], bool] | None = None) -> dict[str, Any]:
    from backend.oracle import ask

    return ask(QUESTION, payload(config, targets), libraries=LIBRARIES, progress=progress, timeout=timeout,
               cancelled=cancelled)


def shape_from(config: dict[str, Any], answer: dict[str, Any] | None, source: str = "config.json") -> ModelShape:
    """The exact shape when transformers answered, else the formula shape labelled 'estimated'."""
    reason = answer.get("reason") if answer else None
    if answer and answer.get("known"):
        try:
            return ModelShape.from_oracle(config, answer, source=source)
        except ConfigError as err:  # transformers built something the planner cannot size
            reason = str(err)
    shape = ModelShape.from_config_dict(config, source=source)
    return shape.with_note(f"estimated, not exact: {reason}") if reason else shape


def cached_shape(folder_or_file: str | Path, targets: Iterable[str] = DEFAULT_TARGETS) -> ModelShape:
    """Exact if transformers answered before (cache), else the formula estimate: never a child."""
    config, file = read_config(folder_or_file)
    return shape_from(config, cached_answer(config, targets), str(file))


def exact_shape(folder_or_file: str | Path, targets: Iterable[str] = DEFAULT_TARGETS, *,
                progress: Callable[[str], None] | None = None,
                cancelled: Callable[[], bool] | None = None) -> ModelShape:
    """Ask transformers (one child process the first time, cached afterwards).

    Falls back to the formula estimate, labelled as such, when transformers does not know the
    architecture or the child fails (the failure is named in the shape's notes).
    """
    from backend.oracle import OracleCancelled, OracleError

    config, file = read_config(folder_or_file)
    if not config.get("model_type"):  # transformers cannot pick a config class: no child needed
        return shape_from(config, {"known": False, "reason": "config.json has no model_type"}, str(file))
    try:
        answer = ask_answer(config, targets, progress=progress, cancelled=cancelled)
    except OracleCancelled:
        raise  # nobody waits for this shape: no fallback to show
    except OracleError as err:
        answer = {"known": False, "reason": f"transformers could not be asked ({err})"}
    return shape_from(config, answer, str(file))
