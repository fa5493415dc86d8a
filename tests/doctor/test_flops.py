"""FLOPs per token of the tiny Qwen2 from its exact shape, computed here by hand from its config.json; the MFU
peak table by GPU name (#38)."""

from __future__ import annotations

import json
from pathlib import Path

from backend.doctor.flops import token_flops
from backend.doctor.peaks import gpu_peak
from backend.models.shape_exact import exact_shape


def test_tiny_qwen2_flops_per_token_full_and_lora_by_hand(tiny_model: Path) -> None:
    config = json.loads((tiny_model / "config.json").read_text())
    h, i, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    heads, kv, vocab = config["num_attention_heads"], config["num_key_value_heads"], config["vocab_size"]
    d = h // heads
    # q, k, v, o, gate, up, down: in x out of each; the output layer multiplies by the tied embedding (vocab x h)
    block = h * heads * d + 2 * h * kv * d + heads * d * h + 3 * h * i
    n = layers * block + vocab * h
    length = 100  # the attended length
    attention = 12 * layers * length * heads * d  # QK^T and AV, forward (4) and backward (8)
    shape = exact_shape(tiny_model)
    full = token_flops(shape, tuner="full", sequence=length)
    assert full.model == 6 * n + attention
    # LoRA r=16 on every linear: A (r x in) and B (out x r) per adapted linear
    adapters = layers * 16 * ((h + heads * d) + 2 * (h + kv * d) + (heads * d + h) + 2 * (h + i) + (i + h))
    lora = token_flops(shape, tuner="lora", sequence=length, lora_rank=16, targets=("all-linear",))
    assert lora.adapter_params == adapters
    assert lora.model == 4 * n + 6 * adapters + attention
    # gradient checkpointing: one more forward, counted as hardware FLOPs only
    again = token_flops(shape, tuner="lora", sequence=length, lora_rank=16, recompute=True)
    assert again.model == lora.model
    assert again.hardware == lora.model + 2 * (n + adapters) + 4 * layers * length * heads * d


def _tflops(name: str, precision: str = "bf16") -> float:
    peak = gpu_peak(name)
    assert peak is not None, name
    return peak.tflops(precision)


def test_the_peak_table_knows_gpus_by_name_and_says_unknown_otherwise() -> None:
    assert _tflops("NVIDIA H100 80GB HBM3", "bf16") == 989.0
    assert _tflops("NVIDIA H100 PCIe", "bf16") == 756.0
    assert _tflops("NVIDIA H200", "bf16") == 989.0
    assert _tflops("NVIDIA A100-SXM4-80GB", "fp16") == 312.0
    assert _tflops("NVIDIA A100-SXM4-80GB", "fp32") == 19.5
    assert _tflops("NVIDIA L40S", "bf16") == 362.0
    assert _tflops("NVIDIA A10", "bf16") == 125.0
    assert _tflops("NVIDIA GeForce RTX 4090", "bf16") == 165.2
    assert _tflops("NVIDIA GeForce RTX 3090", "bf16") == 71.0
    assert gpu_peak("NVIDIA T4") is None
    assert gpu_peak(None) is None
