"""How far is the memory planner from published measured peaks? (issue 26: the calibration you can rerun)

Each case is one published measurement with its source: a training script whose header records the peak
it measured (ms-swift prints `memory(GiB)`, i.e. torch.cuda.max_memory_reserved), or a table of the longest
context that still fit on a card of a given size (Unsloth's "Hugging Face + FA2" column: at that length the
peak is the card, so the card's memory stands for the measured peak, an upper bound within one step).
For each: the planner's forecast, the signed error in percent of the measurement (positive: the planner
said more), then the mean of the absolute errors, the largest, and the worst under-forecast.

    .venv/bin/python bench/memory_truth.py            # the planner in this tree
    PYTHONPATH=/tmp/old-g .venv/bin/python bench/memory_truth.py   # another tree's planner

One case measures host RAM, not the GPU: philschmid's FSDP-QLoRA + CPU offload notebook gives "127 GB CPU RAM"
beside its "22 GB/GPU" (the node's four processes; the planner's host peak per node). It is printed apart and
kept out of the GPU figures' mean, max and worst.

Not used, and why: LLaMA-Factory's "hardware requirement" table is a rule of thumb per size class, not a
measurement; ms-swift's FSDP-QLoRA 70B script header ("2 GPU * 24G") names the cards, not a peak.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(os.environ.get("PYTHONPATH", "").split(os.pathsep)[0] or Path(__file__).resolve().parents[1])
sys.path.insert(0, str(REPO))
FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "estimate" / "fixtures"
GIB = 2**30
GOAL = {"mean": 8.0, "max": 15.0, "under": -5.0}


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    model: str  # fixture folder under tests/estimate/fixtures
    measured_gib: float
    request: dict[str, Any] = field(default_factory=dict)
    host: bool = False  # the measurement is the node's host RAM, not one GPU's peak


QWEN_README = ("github.com/QwenLM/Qwen README, 'Profiling of Memory and Speed' (Qwen-7B, LoRA row; its shape in Qwen2's "
               "layout: tests/estimate/fixtures/qwen_7b_v1)")
UNSLOTH = "github.com/unslothai/unsloth README, 'Llama 3.1 (8B) max. context length', Hugging Face + FA2"
# the Hugging Face baseline is PEFT's QLoRA recipe: prepare_model_for_kbit_training upcasts embeddings, lm_head
# and norms to fp32 (so the logits come out fp32 and stay held by the output); ms-swift does not do that
UNSLOTH_8B = dict(tuner="qlora", lora_rank=32, lora_dropout=0.0, attn_implementation="flash_attn",
                  upcast_non_quantized=True)
# accelerate's FSDP1 config in the notebook, bnb_4bit_quant_storage=bfloat16 (FSDP1 needs a float storage)
PHILSCHMID_70B = dict(tuner="qlora", distribution="fsdp", num_gpus=4, offload=True, max_length=3072, lora_rank=16,
                      lora_dropout=0.05, attn_implementation="sdpa", fsdp_version=1, bnb_4bit_quant_storage="bf16")

CASES = (
    Case("ms-swift full, Qwen2-7B, 1 GPU", "ms-swift examples/train/full/train.sh ('# 76GiB'; rows < 512 "
         "tokens, adamw_torch foreach)", "qwen2_5_7b", 76,
         dict(tuner="full", max_length=512, optimizer="adamw_foreach")),
    Case("ms-swift LoRA, Qwen2.5-7B, packed 2048", "ms-swift examples/train/packing/llm.sh ('# 22GB')",
         "qwen2_5_7b", 22, dict(max_length=2048, attn_implementation="flash_attn")),
    Case("ms-swift QLoRA, Qwen2.5-7B, 2048", "ms-swift examples/train/qlora/bnb.sh ('# 10GB'; rows shorter "
         "than 2048)", "qwen2_5_7b", 10, dict(tuner="qlora", max_length=2048)),
    Case("ms-swift full ZeRO-3 x4, Qwen2.5-7B, 16k liger", "ms-swift examples/train/packing/liger_kernel.sh "
         "('GPU Memory: 4 * 42GB')", "qwen2_5_7b", 42,
         dict(tuner="full", distribution="deepspeed", zero_stage=3, num_gpus=4, max_length=16384,
              liger_kernel=True, attn_implementation="flash_attn")),
    *(Case(f"Unsloth HF+FA2 Llama-3.1-8B QLoRA, {tokens:,} tokens on {card} GB", UNSLOTH, "llama3_1_8b", card,
           dict(UNSLOTH_8B, max_length=tokens))
      for card, tokens in ((12, 932), (16, 2_551), (24, 5_789), (40, 12_264), (48, 15_502), (80, 28_454))),
    # long context: Qwen-7B LoRA (r 64, alpha 16, dropout 0.05, every linear; adapters in the model's bf16 as PEFT
    # kept them then), flash attention 2, batch 1, gradient checkpointing, one A100-80G; "G" read as 10^9 bytes
    *(Case(f"Qwen-7B LoRA, {tokens:,} tokens, FA2", QWEN_README, "qwen_7b_v1", measured * 10**9 / GIB,
           dict(tuner="lora", lora_rank=64, lora_alpha=16, lora_dropout=0.05, adapter_dtype="bf16",
                attn_implementation="flash_attn", max_length=tokens))
      for tokens, measured in ((4096, 29.7), (8192, 36.6))),
    # nvidia-smi's per-GPU figure (reserved memory + CUDA context), rounded by its author: an upper bound
    Case("FSDP QLoRA + CPU offload x4, Llama-3-70B, 3072", "philschmid/deep-learning-pytorch-huggingface "
         "training/fsdp-qlora-distributed-llama3.ipynb ('FSDP + Q-Lora + CPU offloading needs 4x24GB GPUs, "
         "with 22 GB/GPU ... sequence length of 3072 and a batch size of 1'; LoRA r=16 all-linear, SDPA)",
         "llama3_3_70b", 22 * 10**9 / GIB,
         PHILSCHMID_70B),
    Case("host RAM: FSDP QLoRA + CPU offload x4, Llama-3-70B", "philschmid/deep-learning-pytorch-huggingface "
         "training/fsdp-qlora-distributed-llama3.ipynb ('... with 22 GB/GPU and 127 GB CPU RAM with a sequence "
         "length of 3072 and a batch size of 1')", "llama3_3_70b", 127 * 10**9 / GIB,
         PHILSCHMID_70B,
         host=True),
    Case("Unsloth HF+FA2 Llama-3.3-70B QLoRA, 6,916 tokens on 80 GB", "github.com/unslothai/unsloth README, "
         "'Llama 3.3 (70B) max. context length', Hugging Face + FA2", "llama3_3_70b", 80,
         dict(UNSLOTH_8B, max_length=6_916)),
)


def forecast_gib(case: Case) -> tuple[float, list[str]]:
    """The forecast in GiB, and the request's fields this planner does not know (an older tree: left out)."""
    from dataclasses import fields

    from backend.estimate import EstimateRequest, estimate
    from backend.models.shape_formula import shape_from_config_dir

    known = {f.name for f in fields(EstimateRequest)}
    shape = shape_from_config_dir(FIXTURES / case.model)
    request = EstimateRequest(**{k: v for k, v in case.request.items() if k in known})
    result = estimate(shape, request)
    peak = result.host_total_bytes if case.host else result.per_device_total_bytes
    return peak / GIB, sorted(set(case.request) - known)


def main() -> int:
    import backend.estimate

    print(f"planner: {Path(backend.estimate.__file__).parent}")
    errors = []
    print(f"{'case':<58} {'measured':>9} {'forecast':>9} {'error':>8}")
    for case in CASES:
        ours, unknown = forecast_gib(case)
        error = (ours - case.measured_gib) / case.measured_gib * 100
        if not case.host:
            errors.append((error, case))
        left_out = f"  (not in this planner: {', '.join(unknown)})" if unknown else ""
        print(f"{case.name:<58} {case.measured_gib:>8.1f}G {ours:>8.1f}G {error:>+7.1f}%{left_out}")
    mean = sum(abs(e) for e, _ in errors) / len(errors)
    largest, worst_case = max(errors, key=lambda pair: abs(pair[0]))
    under, under_case = min(errors, key=lambda pair: pair[0])
    print(f"mean |error| {mean:.1f}% (goal <= {GOAL['mean']:.0f}%); max {largest:+.1f}% ({worst_case.name}; goal "
          f"<= {GOAL['max']:.0f}%); worst under-forecast {min(under, 0.0):+.1f}% "
          f"({under_case.name if under < 0 else 'none'}; goal >= {GOAL['under']:.0f}%)")
    print("sources:")
    for case in {c.source: c for c in CASES}.values():
        print(f"  {case.source}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
