"""Rules on precision (fp16, bf16, tf32, the injected overflows) and the tuner (QLoRA, LoRA targets)."""

from __future__ import annotations

from collections.abc import Iterator

from backend.hardware.machine import HardwareInfo
from backend.launch.validate.core import Problem, installed, on_cpu, rule
from backend.profile import LaunchProfile

# ---------------------------------------------------------------- precision


@rule
def _fp16_and_bf16(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    if profile.precision.fp16 and profile.precision.bf16:
        yield Problem("precision.fp16", "error", "fp16 and bf16 are both on; a run uses one mixed precision.",
                      "Turn one off: bf16 on Ampere or newer GPUs, fp16 (with loss scaling) on older ones.")


@rule
def _bf16_needs_hardware(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    if not profile.precision.bf16 or on_cpu(profile, hardware):
        return
    if hardware.has_cuda and not hardware.bf16_ready:
        names = ", ".join(f"{g.name} (sm {g.compute_capability})" for g in hardware.gpus)
        yield Problem("precision.bf16", "error",
                      f"bf16 asked but this machine is not bf16-ready (needs CUDA >= 11, compute capability "
                      f">= 8.0, NCCL >= 2.10); found: {names}, CUDA driver {hardware.cuda_driver_version}.",
                      "Use fp16 with dynamic loss scaling, or fp32.")


@rule
def _tf32_needs_ampere(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    if profile.precision.tf32 and (on_cpu(profile, hardware) or not hardware.bf16_ready):
        yield Problem("precision.tf32", "error",
                      "TF32 needs an Ampere or newer NVIDIA GPU; transformers refuses it elsewhere.",
                      "Set tf32 = false.")


@rule
def _fp16on_cpu(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    if profile.precision.fp16 and on_cpu(profile, hardware):
        yield Problem("precision.fp16", "warning",
                      "fp16 on CPU: the workbench runs fp16 autocast with a CPU GradScaler (real dynamic loss "
                      "scaling), slower than fp32 on most CPUs.",
                      "Fine for learning how loss scaling behaves; use fp32 or bf16 for speed.")


@rule
def _overflow_injection_needs_fp16(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    if profile.debug.inject_overflow_steps and not profile.precision.fp16:
        yield Problem("debug.inject_overflow_steps", "error",
                      "an injected overflow is only caught by an fp16 loss scaler; without one the non-finite "
                      "gradient would reach the weights.",
                      "Set precision.fp16 = true, or empty inject_overflow_steps.")


# ---------------------------------------------------------------- tuner


@rule
def _qlora_needs_bitsandbytes(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    if profile.tuner.type == "qlora" and not installed("bitsandbytes"):
        yield Problem("tuner.type", "error", "QLoRA needs bitsandbytes, which is not installed.",
                      "pip install bitsandbytes, or use tuner type lora.")


@rule
def _fsdp_qlora_storage(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    t = profile.tuner
    if profile.distribution.strategy == "fsdp" and t.type == "qlora" and t.quant_bits == 4:
        if t.bnb_4bit_quant_storage is None and profile.distribution.fsdp.version == 2:
            # accelerate's fsdp2_prepare_model puts non-float Params4bit in fully_shard's ignored_params
            yield Problem("tuner.bnb_4bit_quant_storage", "warning",
                          "FSDP2 does not shard 4-bit weights packed as uint8 (accelerate leaves them out of "
                          "sharding): every GPU holds all of them, CPU offload or not.",
                          f"Set bnb_4bit_quant_storage = \"{t.bnb_4bit_compute_dtype}\" to shard them.")
        elif t.bnb_4bit_quant_storage != t.bnb_4bit_compute_dtype:
            yield Problem("tuner.bnb_4bit_quant_storage", "error",
                          f"FSDP + QLoRA shards the packed 4-bit weights as {t.bnb_4bit_quant_storage or 'uint8'}; "
                          f"FSDP needs every parameter of a unit in one dtype, the compute dtype "
                          f"{t.bnb_4bit_compute_dtype}.",
                          f"Set bnb_4bit_quant_storage = \"{t.bnb_4bit_compute_dtype}\".")


@rule
def _lora_targets(profile: LaunchProfile, hardware: HardwareInfo) -> Iterator[Problem]:
    if profile.tuner.type != "full" and not profile.tuner.target_modules:
        yield Problem("tuner.target_modules", "error", "LoRA needs at least one target module.",
                      "Use [\"all-linear\"] or names such as q_proj, v_proj.")
