"""config.json read (`read_config`, `ConfigError`), and the formula shape from it: pure Python, well under
a millisecond (`shape_from_config`, `shape_from_config_dir`). Exact for Llama / Mistral / Qwen2 / Qwen2.5 /
Qwen3-style dense models (a test checks it against transformers to the parameter); anything else is
labelled "estimated, not exact", MoE configs included (Llama-style experts). The exact shape from
transformers is backend/models/shape_exact.py's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from backend.models.shape import ModelShape

# model_type -> do q/k/v projections carry a bias?  (o_proj never does in these families)
_QKV_BIAS_BY_FAMILY = {"qwen2": True, "qwen2_vl": True, "qwen2_5_vl": True}
# families with an RMSNorm over head_dim on q and k (Qwen3)
QK_NORM_FAMILIES = {"qwen3"}
KNOWN_FAMILIES = {"llama", "mistral", "qwen2", "qwen3", "qwen2_vl", "qwen2_5_vl"}
_DTYPE_NAMES = {
    "float32": "fp32", "float": "fp32", "fp32": "fp32",
    "float16": "fp16", "half": "fp16", "fp16": "fp16",
    "bfloat16": "bf16", "bf16": "bf16",
}


class ConfigError(ValueError):
    """config.json is missing, unreadable, or lacks a key the planner needs."""



def shape_from_config_dir(path: str | Path) -> ModelShape:
    """Read `<path>/config.json` (or `path` itself when it names the file)."""
    data, file = read_config(path)
    return shape_from_config(data, source=str(file))


def shape_from_config(d: dict[str, Any], source: str = "config.json") -> ModelShape:
    """Formula shape from the parsed config; raise ConfigError naming any missing key.

    Mixture-of-experts configs get a Llama-style expert layout (gate/up/down per expert, a
    linear router, optional shared experts), labelled as an estimate.
    """
    cfg = text_config(d)
    hidden = _required(cfg, "hidden_size", source)
    heads = _required(cfg, "num_attention_heads", source)
    model_type = str(cfg.get("model_type") or d.get("model_type") or "unknown")
    architectures = cfg.get("architectures") or d.get("architectures") or ["unknown"]
    head_dim = cfg.get("head_dim") or hidden // heads
    layers = _required(cfg, "num_hidden_layers", source)
    experts = _first_int(cfg, "num_local_experts", "num_experts", "n_routed_experts") or 0
    moe: dict[str, Any] = {}
    if experts:
        width = _first_int(cfg, "moe_intermediate_size") or _required(cfg, "intermediate_size", source)
        shared = _first_int(cfg, "n_shared_experts") or 0
        shared_width = _first_int(cfg, "shared_expert_intermediate_size") or shared * width
        moe = dict(num_experts=experts, experts_per_token=_first_int(cfg, "num_experts_per_tok") or 1,
                   shared_experts=shared or (1 if shared_width else 0), expert_intermediate_size=width,
                   shared_expert_intermediate_size=shared_width, moe_layers=layers,
                   routed_expert_params=layers * experts * 3 * hidden * width,
                   router_params=layers * hidden * experts)
    return ModelShape(
        architecture=str(architectures[0]),
        model_type=model_type,
        num_layers=layers,
        hidden_size=hidden,
        intermediate_size=_required(cfg, "intermediate_size", source),
        num_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(head_dim),
        vocab_size=_required(cfg, "vocab_size", source),
        max_position_embeddings=cfg.get("max_position_embeddings"),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", d.get("tie_word_embeddings", False))),
        qkv_bias=bool(cfg.get("attention_bias", _QKV_BIAS_BY_FAMILY.get(model_type, False))),
        o_bias=bool(cfg.get("attention_bias", False)),
        mlp_bias=bool(cfg.get("mlp_bias", False)),
        qk_norm=model_type in QK_NORM_FAMILIES,
        torch_dtype=dtype_name(cfg),
        family_known=model_type in KNOWN_FAMILIES and not experts,
        **moe,
    )


def dtype_name(cfg: dict[str, Any]) -> str | None:
    return _DTYPE_NAMES.get(str(cfg.get("torch_dtype") or cfg.get("dtype") or "").lower())


def _first_int(cfg: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def as_list(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [str(v) for v in value]


def text_config(d: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs nest the language model under `text_config`; use it when the top lacks keys."""
    nested = d.get("text_config")
    if "hidden_size" not in d and isinstance(nested, dict):
        return {**d, **nested}
    return d


def _required(cfg: dict[str, Any], key: str, source: str) -> int:
    value = cfg.get(key)
    if value is None:
        raise ConfigError(f"{source}: missing key {key!r} (needed to size the model)")
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{source}: key {key!r} must be a positive integer, got {value!r}")
    return value


def read_config(folder_or_file: str | Path) -> tuple[dict[str, Any], Path]:
    """config.json of a model folder, parsed; ConfigError naming the file when it cannot be read."""
    path = Path(folder_or_file).expanduser()
    file = path if path.is_file() else path / "config.json"
    if not file.exists():
        raise ConfigError(f"no config.json in {path}: pass the model folder that holds config.json")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConfigError(f"cannot read {file}: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{file} does not hold a JSON object")
    return data, file
