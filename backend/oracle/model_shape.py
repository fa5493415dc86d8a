"""Oracle question `model_shape`: a model's exact shape, from transformers itself (child side).

The config class fills in its own defaults (`tie_word_embeddings` of Gemma-2, DBRX's nested
`ffn_config`, ...), the model is built on the `meta` device (no weights, no memory) and walked:
exact parameter count, tied embeddings, the decoder layer class (FSDP's wrap unit), the paths of the
modules a `target_modules` entry can name, every linear layer of a decoder block (name, in/out features, bias, how many per block), fused projections,
mixture-of-experts layout (experts, experts per token, shared experts, router), and PEFT's own
trainable count for the LoRA configurations asked for.

Payload: `{"config": <config.json as a dict>, "lora": [{"r": 8, "target_modules": "all-linear"}]}`.
Architectures transformers does not know (or only through remote code, which is never run) are
answered as data: `{"known": false, "reason": ...}`; the parent then uses the formula path.

The parent side (ask + cache + conversion into the planner's ModelShape) is
`backend.models.shape_exact`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

# config attributes naming the MoE layout, in the spellings transformers' config classes use
_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
_TOP_K_KEYS = ("num_experts_per_tok", "moe_top_k", "top_k", "num_experts_per_token")
_SHARED_KEYS = ("n_shared_experts", "num_shared_experts")
_EXPERT_WIDTH_KEYS = ("moe_intermediate_size", "ffn_hidden_size", "expert_intermediate_size")
_SIZE_KEYS = {
    "hidden_size": ("hidden_size", "d_model", "n_embd"),
    "num_heads": ("num_attention_heads", "n_heads", "n_head"),
    "num_kv_heads": ("num_key_value_heads", "kv_n_heads", "num_kv_heads", "multi_query_group_num"),
    "head_dim": ("head_dim",),
    "intermediate_size": ("intermediate_size", "ffn_hidden_size", "n_inner"),
    "vocab_size": ("vocab_size",),
    "max_position_embeddings": ("max_position_embeddings", "max_seq_len", "n_positions"),
}


def answer(payload: dict[str, Any], progress: Callable[[str], None]) -> dict[str, Any]:
    """One config (`config`), or several at once (`configs`: name -> config; one child for all)."""
    progress("importing transformers")
    if "configs" in payload:
        return {"answers": {name: _answer_one(config, payload.get("lora") or [], progress)
                            for name, config in payload["configs"].items()}}
    return _answer_one(payload.get("config") or {}, payload.get("lora") or [], progress)


def _answer_one(config_dict: dict[str, Any], loras: list[dict[str, Any]],
                progress: Callable[[str], None]) -> dict[str, Any]:
    started = time.perf_counter()
    config_dict = dict(config_dict)
    import torch
    import transformers

    config, why, refused = _config(config_dict, transformers)
    if config is None:
        return {"known": False, "reason": why, "transformers": transformers.__version__,
                **({"refused": why} if refused else {})}
    model_class, why = _model_class(config, config_dict, transformers)
    if model_class is None:
        return {"known": False, "reason": why, "transformers": transformers.__version__}
    progress(f"building {model_class.__name__} on the meta device")
    try:
        model = _build(model_class, config, torch)
    except Exception as err:  # a config transformers cannot build: data, the parent falls back
        return {"known": False, "transformers": transformers.__version__,
                "reason": f"transformers {transformers.__version__} cannot build {model_class.__name__}: {err}"}
    refusal = _refusal(config, model, torch)
    if refusal:
        return {"known": False, "reason": refusal, "refused": refusal, "transformers": transformers.__version__}
    result = describe(model, config)
    result.update(known=True, transformers=transformers.__version__, model_class=model_class.__name__,
                  config_class=type(config).__name__)
    if loras:
        progress("counting LoRA parameters with PEFT")
        linear_names = sorted({lin["name"] for kind in result["layer_kinds"] for lin in kind["linears"]})
        result["peft"] = [_peft_count(model_class, config, spec, linear_names, torch, model if i == 0 else None)
                          for i, spec in enumerate(loras)]
    result["seconds"] = round(time.perf_counter() - started, 3)
    return result


# ---------------------------------------------------------------- config and class


def _config(config_dict: dict[str, Any], transformers: Any) -> tuple[Any, str, bool]:
    """(the config object, why not, whether transformers refused it: its class raised on these values)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    model_type = config_dict.get("model_type")
    if not model_type:
        return None, "config.json has no model_type", False
    if model_type not in CONFIG_MAPPING:
        remote = " (the model ships its own code, which the workbench does not run)" if config_dict.get(
            "auto_map") else ""
        return None, f"transformers {transformers.__version__} does not know model_type {model_type!r}{remote}", False
    clean = {k: v for k, v in config_dict.items() if k not in ("auto_map", "_name_or_path")}
    try:
        return CONFIG_MAPPING[model_type].from_dict(clean), "", False
    except Exception as err:  # a config the class rejects: data, not a crash
        words = " ".join(str(err).split())
        return None, f"{CONFIG_MAPPING[model_type].__name__} raises {type(err).__name__}: {words}", True


# sizes a decoder cannot have at zero (or below): the built config's own values
_POSITIVE = ("hidden_size", "num_heads", "num_kv_heads", "head_dim", "intermediate_size", "vocab_size",
             "max_position_embeddings")


def _refusal(config: Any, model: Any, torch: Any) -> str | None:
    """Why a config transformers built cannot train, in transformers' words where it has them: a size that
    is not positive, hidden_size not a multiple of the heads (LlamaConfig's own check, asked of any config
    that leaves head_dim to it), query heads not a multiple of the key/value heads (what the model's own
    forward raises on it, on the meta device)."""
    text = _text_config(config)
    sizes = {name: _first_attr(text, keys) for name, keys in _SIZE_KEYS.items()}
    for name in _POSITIVE:
        value = sizes.get(name)
        if value is not None and value < 1:
            key = next((k for k in _SIZE_KEYS[name] if getattr(text, k, None) == value), name)
            return (f"{key} = {value}: {type(config).__name__} accepts it, but a model needs at least 1 "
                    f"({_WHAT.get(name, name)})")
    hidden, heads, kv_heads = sizes.get("hidden_size"), sizes.get("num_heads"), sizes.get("num_kv_heads")
    derived = sizes.get("head_dim") in (None, (hidden or 0) // (heads or 1))  # a head_dim of its own is no error
    if hidden and heads and hidden % heads and derived:
        from transformers import LlamaConfig

        try:
            LlamaConfig.validate_architecture(text)
        except ValueError as err:
            return f"{' '.join(str(err).split())} (transformers' check of LlamaConfig; " \
                   f"{type(config).__name__} would give each head {hidden // heads} of its {hidden} dimensions)"
    if heads and kv_heads and heads % kv_heads:
        said = f"num_attention_heads ({heads}) is not a multiple of num_key_value_heads ({kv_heads})"
        raised = _forward_refusal(model, torch)
        return f"{said}: {raised}" if raised else said
    return None


_WHAT = {"max_position_embeddings": "the longest sequence the model takes, in tokens",
         "vocab_size": "tokens in the vocabulary", "hidden_size": "the width of every layer"}


def _forward_refusal(model: Any, torch: Any) -> str | None:
    """What the model's own forward raises on 4 tokens, on the meta device (no memory, no compute)."""
    try:
        with torch.no_grad():
            model(input_ids=torch.zeros(1, 4, dtype=torch.long, device="meta"))
    except Exception as err:  # transformers' words on this config: data for the parent
        return f"{type(model).__name__}'s forward raises {type(err).__name__}: {' '.join(str(err).split())}"
    return None


def _model_class(config: Any, config_dict: dict[str, Any], transformers: Any) -> tuple[Any, str]:
    """The class named in `architectures`, else the causal-LM class registered for the config."""
    for name in config_dict.get("architectures") or []:
        cls = getattr(transformers, str(name), None)
        if cls is not None and hasattr(cls, "_from_config"):
            return cls, ""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    if type(config) in MODEL_FOR_CAUSAL_LM_MAPPING:
        return MODEL_FOR_CAUSAL_LM_MAPPING[type(config)], ""
    names = ", ".join(config_dict.get("architectures") or []) or "no architectures"
    return None, f"transformers {transformers.__version__} has no model class for {names}"


def _build(model_class: Any, config: Any, torch: Any) -> Any:
    with torch.device("meta"):
        return model_class._from_config(config)


# ---------------------------------------------------------------- walking the model


def describe(model: Any, config: Any) -> dict[str, Any]:
    """Everything the planner and the picker need, as plain JSON."""
    params = dict(model.named_parameters())  # named_parameters drops tied duplicates
    total = sum(p.numel() for p in params.values())
    inputs = model.get_input_embeddings()
    outputs = model.get_output_embeddings()
    tied = bool(outputs is not None and inputs is not None and outputs.weight is inputs.weight)
    prefix, layers = _decoder_layers(model)
    kinds = _layer_kinds(layers)
    text = _text_config(config)
    lm_head = 0 if (outputs is None or tied) else sum(p.numel() for p in outputs.parameters())
    return {
        "model_type": getattr(config, "model_type", None),
        "architecture": (getattr(config, "architectures", None) or [type(model).__name__])[0],
        "parameters": total,
        "tied_embeddings": tied,
        "embedding_params": inputs.weight.numel() if inputs is not None else 0,
        "lm_head_params": lm_head,
        "layers_prefix": prefix,
        "num_layers": len(layers),
        "decoder_layer_class": type(layers[0]).__name__ if len(layers) else None,
        "no_split_modules": sorted(getattr(model, "_no_split_modules", None) or []),
        "layer_kinds": kinds,
        "root_linears": _root_linears(model, prefix),
        "sizes": {name: _first_attr(text, keys) for name, keys in _SIZE_KEYS.items()},
        "moe": _moe(text, kinds),
        "fused": sorted({lin["name"] for kind in kinds for lin in kind["linears"] if lin["fused"]}),
        "module_paths": _leaf_paths(model),
    }


def _leaf_paths(model: Any) -> list[str]:
    """What a `target_modules` entry can name (PEFT matches it as a suffix of a module's path): every module
    holding weights of its own and no sub-modules, indices as '*' (layers.*.self_attn.q_proj)."""
    return sorted({re.sub(r"\.\d+(?=\.|$)", ".*", name) for name, module in model.named_modules()
                   if name and not any(True for _ in module.children())
                   and any(True for _ in module.parameters(recurse=False))})


def _decoder_layers(model: Any) -> tuple[str, list[Any]]:
    """The ModuleList of decoder blocks: the one of `_no_split_modules` classes, else the longest."""
    import torch.nn as nn

    wanted = set(getattr(model, "_no_split_modules", None) or [])
    best: tuple[str, list[Any]] = ("", [])
    for name, module in model.named_modules():
        if not isinstance(module, nn.ModuleList) or not len(module):
            continue
        children = list(module)
        if type(children[0]).__name__ in wanted:
            return name, children
        if len(children) > len(best[1]) and "vision" not in name and "visual" not in name:
            best = (name, children)
    return best


def _layer_kinds(layers: list[Any]) -> list[dict[str, Any]]:
    """Decoder blocks grouped by layout (DeepSeek's first dense layers differ from its MoE ones)."""
    kinds: dict[tuple, dict[str, Any]] = {}
    for layer in layers:
        signature = tuple((n, tuple(p.shape)) for n, p in layer.named_parameters())
        if signature in kinds:
            kinds[signature]["count"] += 1
            continue
        kinds[signature] = {
            "count": 1,
            "params": sum(p.numel() for _, p in layer.named_parameters()),
            "linears": _linears(layer),
            "experts": _fused_experts(layer),
            "router": _router(layer),
            "norm_params": sum(p.numel() for n, m in layer.named_modules() if "norm" in type(m).__name__.lower()
                               for p in m.parameters(recurse=False)),
        }
    return list(kinds.values())


_FUSED = re.compile(r"(qkv|query_key_value|wqkv|gate_up|w13|c_attn|fc1_gate)", re.IGNORECASE)


def _linears(layer: Any) -> list[dict[str, Any]]:
    """Linear layers of one block, grouped by path with indices as '*' (experts 0..n-1 -> one row)."""
    rows: dict[str, dict[str, Any]] = {}
    for name, module in layer.named_modules():
        shape = _linear_shape(module)
        if shape is None:
            continue
        path = re.sub(r"\.\d+(?=\.|$)", ".*", name)
        row = rows.get(path)
        if row is None:
            leaf = name.rsplit(".", 1)[-1]
            rows[path] = {"name": leaf, "path": path, "in": shape[0], "out": shape[1],
                          "bias": getattr(module, "bias", None) is not None, "count": 1,
                          "expert": "expert" in path and "shared" not in path,
                          "fused": bool(_FUSED.search(leaf))}
        else:
            row["count"] += 1
    return list(rows.values())


def _linear_shape(module: Any) -> tuple[int, int] | None:
    import torch.nn as nn

    if isinstance(module, nn.Linear):
        return module.in_features, module.out_features
    if type(module).__name__ == "Conv1D" and hasattr(module, "weight"):  # GPT-2 style (in, out) weight
        return tuple(module.weight.shape)
    return None


def _fused_experts(layer: Any) -> list[dict[str, Any]]:
    """Expert weights held outside nn.Linear: transformers 5 fuses each layer's experts into one
    tensor ([experts, out, in] for Mixtral/Qwen-MoE/DeepSeek, [experts * ffn, d_model] for DBRX)."""
    linear_params = {f"{n}.{pn}" if n else pn for n, m in layer.named_modules() if _linear_shape(m) is not None
                     for pn, _ in m.named_parameters(recurse=False)}
    rows = []
    for name, param in layer.named_parameters():
        if name in linear_params or param.dim() < 2 or "shared" in name:
            continue
        if param.dim() == 3 or "expert" in name:
            rows.append({"path": name, "shape": list(param.shape), "params": param.numel()})
    return rows


def _router(layer: Any) -> dict[str, Any] | None:
    """The module that scores experts: a `*Router`/`*TopkRouter` class, or an MLP's `gate`/`router`."""
    for name, module in layer.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        kind = type(module).__name__.lower()
        if "router" in kind or leaf == "router" or (leaf == "gate" and "expert" not in name):
            params = sum(p.numel() for p in module.parameters())
            if params:
                return {"path": name, "class": type(module).__name__, "params": params}
    return None


def _root_linears(model: Any, prefix: str) -> list[dict[str, Any]]:
    rows = []
    for name, module in model.named_modules():
        shape = _linear_shape(module)
        if shape is not None and not (prefix and name.startswith(prefix + ".")):
            rows.append({"name": name.rsplit(".", 1)[-1], "path": name, "in": shape[0], "out": shape[1],
                         "bias": getattr(module, "bias", None) is not None})
    return rows


def _text_config(config: Any) -> Any:
    getter = getattr(config, "get_text_config", None)
    return getter() if callable(getter) else config


def _first_attr(config: Any, keys: tuple[str, ...]) -> Any:
    for source in (config, getattr(config, "attn_config", None), getattr(config, "ffn_config", None)):
        for key in keys:
            value = getattr(source, key, None) if source is not None else None
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None


def _moe(config: Any, kinds: list[dict[str, Any]]) -> dict[str, Any] | None:
    experts = _first_attr(config, _EXPERT_KEYS)
    has_expert_weights = any(k["experts"] or any(lin["expert"] for lin in k["linears"]) for k in kinds)
    if not experts or not has_expert_weights:
        return None
    shared = _first_attr(config, _SHARED_KEYS)
    shared_width = _first_attr(config, ("shared_expert_intermediate_size",))
    if shared is None and shared_width:
        shared = 1  # Qwen-MoE: one shared expert of its own width
    moe_layers = sum(k["count"] for k in kinds if k["experts"] or any(lin["expert"] for lin in k["linears"]))
    router = next((k["router"] for k in kinds if k["router"]), None)
    return {
        "num_experts": experts,
        "experts_per_token": _first_attr(config, _TOP_K_KEYS),
        "shared_experts": shared or 0,
        "shared_expert_intermediate_size": shared_width,
        "expert_intermediate_size": _first_attr(config, _EXPERT_WIDTH_KEYS),
        "moe_layers": moe_layers,
        "router": router,
    }


# ---------------------------------------------------------------- PEFT


def _peft_count(model_class: Any, config: Any, spec: dict[str, Any], linear_names: list[str], torch: Any,
                model: Any) -> dict[str, Any]:
    """PEFT's own trainable count for one LoRA config, on a meta model.

    `all-linear` is expanded the way ms-swift does before it calls PEFT (swift's
    `get_target_modules` -> `find_all_linears`: the leaf names of every nn.Linear, lm_head
    excluded), so fused MoE expert tensors are not adapted, exactly as in a `swift sft` run
    (PEFT's own "all-linear" string would also wrap them through `target_parameters`).
    """
    from peft import LoraConfig, get_peft_model

    asked = spec.get("target_modules", "all-linear")
    targets = [asked] if isinstance(asked, str) else list(asked)
    expanded: list[str] = []
    for target in targets:
        for name in (linear_names if target in ("all-linear", "all_linear") else [target]):
            if name not in expanded:
                expanded.append(name)
    lora = LoraConfig(r=int(spec.get("r", 8)), lora_alpha=int(spec.get("lora_alpha", 32)), lora_dropout=0.0,
                      target_modules=expanded)
    base = model if model is not None else _build(model_class, config, torch)
    try:
        with torch.device("meta"):  # the adapters too: no memory, however many experts they wrap
            peft_model = get_peft_model(base, lora)
    except Exception as err:  # e.g. a target name the model does not have
        return {"r": lora.r, "target_modules": asked, "error": str(err)[:500]}
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    return {"r": lora.r, "target_modules": asked, "expanded": expanded, "trainable": trainable}
