"""The shape of a decoder-only transformer: the one ModelShape of the workbench.

Two ways to get one:

* **exact** (`oracle_shape` in backend/models/shape_exact.py): transformers' own config
  class and the model built on the meta device, in a child process, cached. Exact parameter
  count, every linear layer of every block (fused projections such as Phi-3's `qkv_proj`
  included), tied embeddings by the config class's default, the decoder layer class, the
  mixture-of-experts layout, and PEFT's trainable count.
* **formula** (`shape_from_config` / `shape_from_config_dir` in
  backend/models/shape_formula.py): pure Python from config.json, well under
  a millisecond, for speed and for the textbook view. Exact for Llama / Mistral / Qwen2 / Qwen2.5
  / Qwen3-style dense models (a test checks it against transformers to the parameter); anything
  else is labelled "estimated, not exact", MoE configs included (Llama-style experts).

Everything the memory planner needs is here: layer count, widths, heads, vocabulary, and the
parameter count split the way the planner needs it (decoder linears that bitsandbytes would
quantise, embeddings, lm_head, norms, biases, experts).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

# the decoder's linear layers of the formula's (Llama-style) layout, as PEFT/ms-swift name them
LINEAR_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
EXACT, FORMULA = "transformers", "formula"


@dataclass(frozen=True)
class LinearSpec:
    """One linear layer of a decoder block: its PEFT name and its (in, out) features."""

    name: str
    in_features: int
    out_features: int
    bias: bool = False
    count: int = 1  # instances per block (experts kept as separate nn.Linear: one per expert)
    layers: int | None = None  # blocks holding it (None: every block)
    path: str = ""  # inside the block, indices as '*' (e.g. "mlp.experts.*.w1")
    fused: bool = False  # several projections in one matrix (qkv_proj, gate_up_proj, Wqkv)
    expert: bool = False

    @property
    def weight_params(self) -> int:
        return self.in_features * self.out_features

    def matches(self, target: str) -> bool:
        """PEFT's rule for a target name: the module's leaf name, or a suffix of its path."""
        return target == self.name or bool(self.path) and (self.path == target or self.path.endswith("." + target))


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
    # ---- from transformers (exact); empty/None on the formula path
    source: str = FORMULA  # EXACT ("transformers") or FORMULA
    exact_params: int | None = None
    block_linears: tuple[LinearSpec, ...] = ()
    largest_block_params: int | None = None
    largest_block_module_params: int | None = None
    decoder_layer_class: str | None = None
    fused_projections: tuple[str, ...] = ()
    peft_counts: tuple[tuple[tuple[str, ...], int], ...] = ()  # (sorted targets, PEFT trainable at r=8)
    # ---- mixture of experts (0 for dense models)
    num_experts: int = 0
    experts_per_token: int = 0
    shared_experts: int = 0
    expert_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    moe_layers: int = 0
    routed_expert_params: int = 0  # every routed expert of every layer
    router_params: int = 0
    notes: tuple[str, ...] = ()

    @property
    def exact(self) -> bool:
        return self.source == EXACT

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def trusted(self) -> bool:
        """Exact from transformers, or the formula of a family a test checks against transformers."""
        return self.exact or (self.family_known and not self.is_moe)

    @property
    def count_label(self) -> str:
        if self.exact:
            return "exact (transformers)"
        if self.trusted:
            return "formula (checked against transformers)"
        return "estimated, not exact (formula)"

    def with_note(self, note: str) -> ModelShape:
        return replace(self, notes=(*self.notes, note))

    @property
    def parameters(self) -> int:
        return self.total_params

    def describe(self) -> list[tuple[str, str]]:
        """(label, value) rows for display; the parameter row says where its count comes from."""
        kv = f" ({self.num_kv_heads} key/value)" if self.num_kv_heads != self.num_heads else ""
        rows = [
            ("architecture", self.architecture if self.architecture != "unknown" else self.model_type),
            ("layers", f"{self.num_layers:,}" + (f" ({self.decoder_layer_class})" if self.decoder_layer_class else "")),
            ("hidden size", f"{self.hidden_size:,}"),
            ("heads", f"{self.num_heads:,}{kv}"),
            ("vocab", f"{self.vocab_size:,}" + (" (tied embeddings)" if self.tie_word_embeddings else "")),
            ("context", f"{self.max_position_embeddings:,}" if self.max_position_embeddings else "?"),
        ]
        if self.fused_projections:
            rows.append(("fused", ", ".join(self.fused_projections)))
        if self.is_moe:
            shared = f", {self.shared_experts} shared" if self.shared_experts else ""
            rows.append(("experts", f"{self.num_experts} ({self.experts_per_token} per token{shared})"))
            rows.append(("active", format_count(self.active_params, exact=self.trusted) + " per token"))
        rows.append(("parameters", f"{format_count(self.total_params, exact=self.trusted)} \u2014 {self.count_label}"))
        return rows

    # ------------------------------------------------------------ module shapes

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of k_proj / v_proj outputs: smaller than q under GQA."""
        return self.num_kv_heads * self.head_dim

    @property
    def mlp_width(self) -> int:
        """Width of the MLP a token goes through: the dense MLP, or its top-k experts plus the shared ones."""
        if not self.is_moe:
            return self.intermediate_size
        return self.experts_per_token * self.expert_intermediate_size + self.shared_expert_intermediate_size

    def linear_layers(self) -> tuple[LinearSpec, ...]:
        """The linear layers of one decoder block, with real (GQA, fused) sizes."""
        if self.block_linears:
            seen: dict[str, LinearSpec] = {}
            for spec in self.block_linears:
                seen.setdefault(spec.path or spec.name, spec)
            return tuple(seen.values())
        h, i = self.hidden_size, self.intermediate_size
        attention = (
            LinearSpec("q_proj", h, self.q_dim, self.qkv_bias),
            LinearSpec("k_proj", h, self.kv_dim, self.qkv_bias),
            LinearSpec("v_proj", h, self.kv_dim, self.qkv_bias),
            LinearSpec("o_proj", self.q_dim, h, self.o_bias),
        )
        if self.is_moe:
            i = self.shared_expert_intermediate_size
            if not i:
                return attention
        return attention + (
            LinearSpec("gate_proj", h, i, self.mlp_bias),
            LinearSpec("up_proj", h, i, self.mlp_bias),
            LinearSpec("down_proj", i, h, self.mlp_bias),
        )

    def all_linears(self) -> tuple[LinearSpec, ...]:
        """Every decoder linear kind, with its instances per block and the blocks holding it."""
        return self.block_linears or tuple(replace(s, layers=self.num_layers) for s in self.linear_layers())

    def targeted(self, targets: tuple[str, ...]) -> tuple[LinearSpec, ...]:
        """The linears a LoRA target list adapts (`all-linear`: every decoder linear, never lm_head)."""
        if any(t.lower() in ("all-linear", "all_linear", "all") for t in targets):
            return self.all_linears()
        return tuple(s for s in self.all_linears() if any(s.matches(t) for t in targets))

    def lora_params(self, rank: int, targets: tuple[str, ...]) -> int:
        """Trainable LoRA parameters: PEFT's own count when transformers answered for these targets
        (scaled by rank: A is r x in, B is out x r), else r * (in + out) for every targeted linear."""
        key = tuple(sorted(targets))
        for asked, trainable in self.peft_counts:
            if asked == key:
                return trainable * rank // 8
        return sum(rank * (s.in_features + s.out_features) * s.count * (s.layers or self.num_layers)
                   for s in self.targeted(targets))

    # ------------------------------------------------------------ parameter counts

    @property
    def linear_weight_params_per_layer(self) -> int:
        """Weights of the decoder linears (what bitsandbytes quantises), one block."""
        if self.block_linears:
            return self.linear_weight_params // max(1, self.num_layers)
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
        """One decoder block (the largest one when blocks differ); routed experts included."""
        if self.largest_block_params:
            return self.largest_block_params
        experts = (self.routed_expert_params + self.router_params) // max(1, self.num_layers)
        return self.linear_weight_params_per_layer + self.bias_params_per_layer + self.norm_params_per_layer + experts

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
        """Weights of every decoder nn.Linear (what QLoRA packs in 4 bits); fused 3-D expert
        tensors are not nn.Linear modules and stay in 16 bits."""
        if self.block_linears:
            return sum(s.weight_params * s.count * (s.layers or self.num_layers) for s in self.block_linears)
        return self.num_layers * self.linear_weight_params_per_layer

    @property
    def dense_kept_params(self) -> int:
        """Parameters QLoRA keeps in 16-bit: embeddings, lm_head, norms and biases."""
        return self.total_params - self.linear_weight_params

    @property
    def total_params(self) -> int:
        if self.exact_params is not None:
            return self.exact_params
        return (
            self.num_layers * (self.linear_weight_params_per_layer + self.bias_params_per_layer
                               + self.norm_params_per_layer)
            + self.routed_expert_params
            + self.router_params
            + self.embedding_params
            + self.lm_head_params
            + self.final_norm_params
        )

    @property
    def active_params(self) -> int:
        """Parameters one token goes through: all but the routed experts it is not sent to."""
        if not self.is_moe:
            return self.total_params
        idle = self.routed_expert_params * (self.num_experts - self.experts_per_token) // self.num_experts
        return self.total_params - idle

    @property
    def non_embedding_params(self) -> int:
        """Model cards quote this too (e.g. Qwen2.5-7B: 6.53B)."""
        return self.total_params - self.embedding_params - self.lm_head_params

    @property
    def largest_module_params(self) -> int:
        """Largest single nn.Module (DeepSpeed's 'largest layer'): often the embedding."""
        block = self.largest_block_module_params or max(
            spec.weight_params + (spec.out_features if spec.bias else 0) for spec in self.linear_layers())
        if self.is_moe and not self.largest_block_module_params:
            block = max(block, self.routed_expert_params // max(1, self.moe_layers))
        return max(self.embedding_params, self.lm_head_params, block)

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
            "source": self.source,
            "count": self.count_label,
            "decoder_layer_class": self.decoder_layer_class,
            "fused_projections": list(self.fused_projections),
            "moe": {"num_experts": self.num_experts, "experts_per_token": self.experts_per_token,
                    "shared_experts": self.shared_experts, "routed_expert_params": self.routed_expert_params,
                    "router_params": self.router_params, "active_params": self.active_params,
                    "expert_parallelism": "not modelled: every GPU holds every expert"} if self.is_moe else None,
            "notes": list(self.notes),
        }


def format_count(count: int | None, *, exact: bool = True) -> str:
    """1234567 -> '1.23 M (1,234,567)'; approximate counts get a leading '\u2248'."""
    if count is None:
        return "?"
    prefix = "" if exact else "\u2248 "
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= size:
            return f"{prefix}{count / size:.3g} {unit} ({count:,})"
    return f"{prefix}{count:,}"
