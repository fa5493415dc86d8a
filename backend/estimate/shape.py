"""The shape of a decoder-only transformer, read from its `config.json` alone (no weights).

Everything the memory planner needs is here: layer count, widths, heads, vocabulary, and
the parameter count computed from those shapes (not taken from the model card), split the
way the planner needs it (decoder linears that bitsandbytes would quantise, embeddings,
lm_head, norms, biases).

Supported: Llama / Mistral / Qwen2 / Qwen2.5 / Qwen3-style dense models (GQA attention,
SwiGLU MLP with gate/up/down, RMSNorm). Other configs that carry the same keys are read the
same way and flagged `family_known=False`; mixture-of-experts configs are refused, because
their expert weights would be counted wrongly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# model_type -> do q/k/v projections carry a bias?  (o_proj never does in these families)
_QKV_BIAS_BY_FAMILY = {"qwen2": True, "qwen2_vl": True, "qwen2_5_vl": True}
# families with an RMSNorm over head_dim on q and k (Qwen3)
_QK_NORM_FAMILIES = {"qwen3"}
KNOWN_FAMILIES = {"llama", "mistral", "qwen2", "qwen3", "qwen2_vl", "qwen2_5_vl"}
_MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size")
_DTYPE_NAMES = {
    "float32": "fp32", "float": "fp32", "fp32": "fp32",
    "float16": "fp16", "half": "fp16", "fp16": "fp16",
    "bfloat16": "bf16", "bf16": "bf16",
}
# the decoder's linear layers, as PEFT/ms-swift name them
LINEAR_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class ConfigError(ValueError):
    """config.json is missing, unreadable, or lacks a key the planner needs."""


@dataclass(frozen=True)
class LinearSpec:
    """One linear layer of a decoder block: its PEFT name and its (in, out) features."""

    name: str
    in_features: int
    out_features: int
    bias: bool = False

    @property
    def weight_params(self) -> int:
        return self.in_features * self.out_features


@dataclass(frozen=True)
class ModelShape:
    """Architecture numbers of one model, and parameter counts derived from them."""

    architecture: str
    model_type: str
    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int | None = None
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    torch_dtype: str | None = None  # as stored in config.json, normalised to fp32/fp16/bf16
    family_known: bool = True

    # ------------------------------------------------------------ construction

    @classmethod
    def from_config_dir(cls, path: str | Path) -> ModelShape:
        """Read `<path>/config.json` (or `path` itself when it names the file)."""
        path = Path(path).expanduser()
        file = path if path.is_file() else path / "config.json"
        if not file.exists():
            raise ConfigError(f"no config.json in {path}: pass the model folder that holds config.json")
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ConfigError(f"cannot read {file}: {err}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{file} does not hold a JSON object")
        return cls.from_config_dict(data, source=str(file))

    @classmethod
    def from_config_dict(cls, d: dict[str, Any], source: str = "config.json") -> ModelShape:
        """Build a shape from the parsed config; raise ConfigError naming any missing key."""
        cfg = _text_config(d)
        if any(cfg.get(key) for key in _MOE_KEYS):
            raise ConfigError(f"{source}: mixture-of-experts models are not supported by the memory planner")
        hidden = _required(cfg, "hidden_size", source)
        heads = _required(cfg, "num_attention_heads", source)
        model_type = str(cfg.get("model_type") or d.get("model_type") or "unknown")
        architectures = cfg.get("architectures") or d.get("architectures") or ["unknown"]
        head_dim = cfg.get("head_dim") or hidden // heads
        return cls(
            architecture=str(architectures[0]),
            model_type=model_type,
            num_layers=_required(cfg, "num_hidden_layers", source),
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
            qk_norm=model_type in _QK_NORM_FAMILIES,
            torch_dtype=_DTYPE_NAMES.get(str(cfg.get("torch_dtype") or cfg.get("dtype") or "").lower()),
            family_known=model_type in KNOWN_FAMILIES,
        )

    # ------------------------------------------------------------ module shapes

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of k_proj / v_proj outputs: smaller than q under GQA."""
        return self.num_kv_heads * self.head_dim

    def linear_layers(self) -> tuple[LinearSpec, ...]:
        """The seven linear layers of one decoder block, with real (GQA) sizes."""
        h, i = self.hidden_size, self.intermediate_size
        return (
            LinearSpec("q_proj", h, self.q_dim, self.qkv_bias),
            LinearSpec("k_proj", h, self.kv_dim, self.qkv_bias),
            LinearSpec("v_proj", h, self.kv_dim, self.qkv_bias),
            LinearSpec("o_proj", self.q_dim, h, self.o_bias),
            LinearSpec("gate_proj", h, i, self.mlp_bias),
            LinearSpec("up_proj", h, i, self.mlp_bias),
            LinearSpec("down_proj", i, h, self.mlp_bias),
        )

    # ------------------------------------------------------------ parameter counts

    @property
    def linear_weight_params_per_layer(self) -> int:
        """Weights of the decoder linears (what bitsandbytes quantises), one block."""
        return sum(spec.weight_params for spec in self.linear_layers())

    @property
    def bias_params_per_layer(self) -> int:
        return sum(spec.out_features for spec in self.linear_layers() if spec.bias)

    @property
    def norm_params_per_layer(self) -> int:
        """Two RMSNorm weights per block, plus Qwen3's q/k norms over head_dim."""
        return 2 * self.hidden_size + (2 * self.head_dim if self.qk_norm else 0)

    @property
    def params_per_layer(self) -> int:
        return self.linear_weight_params_per_layer + self.bias_params_per_layer + self.norm_params_per_layer

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """0 when tied: the output layer reuses the embedding matrix."""
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def final_norm_params(self) -> int:
        return self.hidden_size

    @property
    def linear_weight_params(self) -> int:
        return self.num_layers * self.linear_weight_params_per_layer

    @property
    def dense_kept_params(self) -> int:
        """Parameters QLoRA keeps in 16-bit: embeddings, lm_head, norms and biases."""
        return self.total_params - self.linear_weight_params

    @property
    def total_params(self) -> int:
        return (
            self.num_layers * self.params_per_layer
            + self.embedding_params
            + self.lm_head_params
            + self.final_norm_params
        )

    @property
    def non_embedding_params(self) -> int:
        """Model cards quote this too (e.g. Qwen2.5-7B: 6.53B)."""
        return self.total_params - self.embedding_params - self.lm_head_params

    @property
    def largest_module_params(self) -> int:
        """Largest single nn.Module (DeepSpeed's 'largest layer'): often the embedding."""
        return max(
            self.embedding_params,
            self.lm_head_params,
            max(spec.weight_params + (spec.out_features if spec.bias else 0) for spec in self.linear_layers()),
        )

    def summary(self) -> dict[str, Any]:
        """Plain dict for JSON output."""
        return {
            "architecture": self.architecture,
            "model_type": self.model_type,
            "num_layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_heads": self.num_heads,
            "num_kv_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "vocab_size": self.vocab_size,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "total_params": self.total_params,
            "family_known": self.family_known,
        }


def _text_config(d: dict[str, Any]) -> dict[str, Any]:
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
