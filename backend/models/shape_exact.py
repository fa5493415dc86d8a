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

from backend.models.shape import EXACT, LinearSpec, ModelShape
from backend.models.shape_formula import (
    QK_NORM_FAMILIES,
    ConfigError,
    as_list,
    dtype_name,
    read_config,
    shape_from_config,
    text_config,
)
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
                oracle_shape({}, one)
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


class ConfigRefused(ConfigError):
    """transformers refuses the model's config (its config class raised, or the model it builds cannot run):
    nothing is sized from it. `words`: what transformers said."""

    def __init__(self, source: str, words: str, version: str | None) -> None:
        self.words = words
        super().__init__(f"{source}: transformers{f' {version}' if version else ''} refuses this model's config, "
                         f"so nothing is sized from it: {words}")


def shape_from(config: dict[str, Any], answer: dict[str, Any] | None, source: str = "config.json") -> ModelShape:
    """The exact shape when transformers answered, else the formula shape labelled 'estimated'; ConfigRefused
    when transformers refused the config."""
    if answer and answer.get("refused"):
        raise ConfigRefused(source, str(answer["refused"]), answer.get("transformers"))
    reason = answer.get("reason") if answer else None
    if answer and answer.get("known"):
        try:
            return oracle_shape(config, answer, source=source)
        except ConfigError as err:  # transformers built something the planner cannot size
            reason = str(err)
    shape = shape_from_config(config, source=source)
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


def oracle_shape(d: dict[str, Any], answer: dict[str, Any], source: str = "config.json") -> ModelShape:
    """The exact shape transformers answered (backend/oracle/model_shape.py)."""
    sizes = answer.get("sizes") or {}
    hidden = int(sizes.get("hidden_size") or 0)
    heads = int(sizes.get("num_heads") or 0)
    if not (hidden and heads and answer.get("num_layers")):
        raise ConfigError(f"{source}: transformers built {answer.get('model_class')} but no decoder sizes")
    kinds = answer.get("layer_kinds") or []
    linears = tuple(
        LinearSpec(lin["name"], int(lin["in"]), int(lin["out"]), bool(lin["bias"]), int(lin["count"]),
                   int(kind["count"]), lin["path"], bool(lin["fused"]), bool(lin["expert"]))
        for kind in kinds for lin in kind["linears"])
    moe = answer.get("moe") or {}
    routed = sum(e["params"] * k["count"] for k in kinds for e in k["experts"])
    routed += sum(lin.weight_params * lin.count * (lin.layers or 1) for lin in linears if lin.expert)
    num_experts = int(moe.get("num_experts") or 0)
    block_modules = [lin.weight_params + (lin.out_features if lin.bias else 0) for lin in linears]
    block_modules += [sum(e["params"] for e in k["experts"]) for k in kinds]
    ei = moe.get("expert_intermediate_size") or (
        routed // max(1, moe.get("moe_layers") or 1) // max(1, num_experts) // (3 * hidden) if num_experts else 0)
    architectures = d.get("architectures") or [answer.get("model_class") or "unknown"]
    return ModelShape(
        architecture=str(architectures[0]),
        model_type=str(answer.get("model_type") or d.get("model_type") or "unknown"),
        num_layers=int(answer["num_layers"]),
        hidden_size=hidden,
        intermediate_size=int(sizes.get("intermediate_size") or 4 * hidden),
        num_heads=heads,
        num_kv_heads=int(sizes.get("num_kv_heads") or heads),
        head_dim=int(sizes.get("head_dim") or hidden // heads),
        vocab_size=int(sizes.get("vocab_size") or 0),
        max_position_embeddings=sizes.get("max_position_embeddings"),
        tie_word_embeddings=bool(answer.get("tied_embeddings")),
        qkv_bias=any(lin.bias for lin in linears if lin.name in ("q_proj", "qkv_proj", "query_key_value")),
        o_bias=any(lin.bias for lin in linears if lin.name in ("o_proj", "dense", "out_proj")),
        qk_norm=str(answer.get("model_type")) in QK_NORM_FAMILIES,
        torch_dtype=dtype_name(text_config(d)),
        family_known=True,
        source=EXACT,
        exact_params=int(answer["parameters"]),
        block_linears=linears,
        largest_block_params=max((int(k["params"]) for k in kinds), default=0),
        largest_block_module_params=max(block_modules, default=0),
        decoder_layer_class=answer.get("decoder_layer_class"),
        fused_projections=tuple(answer.get("fused") or ()),
        peft_counts=tuple((tuple(sorted(as_list(p["target_modules"]))), int(p["trainable"]))
                          for p in answer.get("peft") or () if "trainable" in p),
        num_experts=num_experts,
        experts_per_token=int(moe.get("experts_per_token") or 0),
        shared_experts=int(moe.get("shared_experts") or 0),
        expert_intermediate_size=int(ei or 0),
        shared_expert_intermediate_size=int(moe.get("shared_expert_intermediate_size") or 0) or (
            int(moe.get("shared_experts") or 0) * int(ei or 0)),
        moe_layers=int(moe.get("moe_layers") or 0),
        routed_expert_params=routed if num_experts else 0,
        router_params=int((moe.get("router") or {}).get("params") or 0) * int(moe.get("moe_layers") or 0),
    )
