"""#26: all-linear on a mixture-of-experts model whose experts transformers fuses into 3-D tensors trains the
attention only; validate says so with the numbers and how to reach the experts (swift's target_parameters)."""

from __future__ import annotations

from pathlib import Path

from backend.hardware.machine import HardwareInfo
from backend.launch.validate import validate
from backend.models.shape_exact import exact_shape
from backend.profile import LaunchProfile

MIXTRAL = Path(__file__).parent / "fixtures" / "mixtral_8x7b"
CPU_BOX = HardwareInfo(gpus=(), cpu_count=4, ram_total_bytes=2**50)


def _warnings(**extra: object) -> list[str]:
    profile = LaunchProfile.model_validate({"model": {"source": str(MIXTRAL)}, "extra_swift_args": extra})
    return [f"{p.message} | {p.fix}" for p in validate(profile, CPU_BOX) if p.field == "tuner.target_modules"]


def test_all_linear_on_mixtral_names_what_is_trained_and_how_to_reach_the_experts() -> None:
    exact_shape(MIXTRAL)  # transformers answers once (a child, cached): validate itself only reads the cache
    # by hand: 32 layers x r=8 x (q 4096+4096, k 4096+1024, v 4096+1024, o 4096+4096) = 32 x 8 x 26,624;
    # experts 32 layers x 8 experts x 3 x 4096 x 14,336; the whole model 46,702,792,704 (transformers' count)
    assert _warnings() == [
        "all-linear on MixtralForCausalLM trains k_proj, o_proj, q_proj, v_proj only: 6,815,744 LoRA parameters "
        "at rank 8; its experts (45,097,156,608 of 46,702,792,704 parameters) are fused 3-D tensors, not linear "
        "modules, and stay untouched. | To train the experts too, name their tensors in [extra_swift_args]: "
        "target_parameters = [\"mlp.experts.down_proj\", \"mlp.experts.gate_up_proj\"] (swift's --target_parameters)."]
    assert _warnings(target_parameters=["mlp.experts.down_proj"]) == []  # asked for: nothing to say
