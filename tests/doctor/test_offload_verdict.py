"""The doctor's "CPU offload over a slow link" verdict (#38) from step_time records written by hand: FSDP's
cpu_offload with an optimizer step that takes 40 % of the loop is said with its evidence, the gain it expects and
the profile change that turns it off (through `workbench doctor` on a run folder); a short optimizer step says
nothing; DeepSpeed's offload, whose optimizer step runs inside the backward, is skipped with that reason; on a CPU
the check is skipped with its reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from backend.cli.app import full_app
from backend.contract.events import StepTime
from backend.core.paths import SHIPPED_PROFILES_DIR
from backend.doctor.apply import changed_profile
from backend.doctor.measure import Measured, RankSteps
from backend.doctor.offload import offload_of
from backend.doctor.peaks import gpu_peak
from backend.doctor.verdicts import RunSettings, judge
from backend.profile import LaunchProfile, load_profile, save_profile
from tests.faults.helpers import fake_run, write_events

H100 = "NVIDIA H100 80GB HBM3"


def _profile(**distribution: Any) -> LaunchProfile:
    data = load_profile(SHIPPED_PROFILES_DIR / "quickstart.toml").model_dump()
    data["distribution"] |= distribution
    return LaunchProfile.model_validate(data)


FSDP_OFFLOAD = {"strategy": "fsdp", "device": "cuda", "nproc_per_node": 2, "fsdp": {"cpu_offload": True}}


def _step_time(optimizer: float, device_name: str | None) -> dict[str, Any]:
    """Ten steps of 0.5 s: forward + backward takes the rest of each step."""
    return {
        "first_step": 1,
        "last_step": 10,
        "step_seconds": [0.5] * 10,
        "optimizer": optimizer,
        "forward_backward": 5.0 - optimizer,
        "real_tokens": 10_000,
        "real_tokens_sq": 1_000_000,
        "device_name": device_name,
    }


def _measured(optimizer: float, device_name: str | None = H100) -> Measured:
    steps = RankSteps(0)
    steps.add(StepTime(rank=0, **_step_time(optimizer, device_name)))
    return Measured({0: steps}, None, [])


def _verdicts(measured: Measured, settings: RunSettings, on_gpu: bool = True) -> dict[str, Any]:
    return {v.code: v for v in judge(measured, settings, gpu_peak(H100) if on_gpu else None, on_gpu)}


def test_fsdp_offload_with_a_long_optimizer_step_is_said_with_the_change_that_turns_it_off(isolated_runs: Path) -> None:
    run = fake_run(isolated_runs)
    save_profile(_profile(**FSDP_OFFLOAD), run.profile_path)
    (run.path / "output").mkdir(exist_ok=True)
    (run.path / "output" / "args.json").write_text(json.dumps({"tuner_type": "lora", "attn_impl": "flash_attn"}))
    write_events(run, {"type": "step_time", **_step_time(2.0, H100)})  # 2.0 s of the 5.0 s: 40 %
    printed = CliRunner().invoke(full_app(), ["doctor", run.run_id])
    assert printed.exit_code == 0, printed.output
    assert (
        "    1. CPU offload over a slow link: the optimizer step takes 40% of step time with parameters and "
        "gradients in host memory -> distribution.fsdp.cpu_offload = false"
    ) in printed.output
    assert (
        "       evidence: 2.00 s of 5.00 s in the optimizer step over 10 steps (rank 0); FSDP keeps parameters "
        "and gradients in host memory"
    ) in printed.output
    assert "       expect: about 35% of the time back: each step now sends the gradients to the host" in printed.output
    assert (
        f"change: distribution.fsdp.cpu_offload = false  (`workbench doctor {run.run_id} --apply 1` queues it)"
        in printed.output
    )
    changed = changed_profile(run.read_profile(), {"distribution.fsdp.cpu_offload": False})
    assert changed.model_dump() == _profile(**{**FSDP_OFFLOAD, "fsdp": {"cpu_offload": False}}).model_dump()


def test_a_short_optimizer_step_under_offload_says_nothing() -> None:
    settings = RunSettings({}, offload=offload_of(_profile(**FSDP_OFFLOAD), {}))
    assert "cpu_offload" not in _verdicts(_measured(0.5), settings)  # 10 % of the loop


def test_deepspeed_offload_is_skipped_with_its_reason_and_turned_off_by_its_preset() -> None:
    profile = _profile(strategy="deepspeed", device="cuda", nproc_per_node=2, deepspeed={"config": "zero3_offload"})
    swift_args = {
        "deepspeed": {
            "zero_optimization": {
                "stage": 3,
                "offload_optimizer": {"device": "cpu"},
                "offload_param": {"device": "cpu"},
            }
        }
    }
    offload = offload_of(profile, swift_args)
    assert offload is not None and offload.change == {"distribution.deepspeed.config": "zero3"}
    verdict = _verdicts(_measured(0.0), RunSettings(swift_args, offload=offload))["cpu_offload"]
    assert verdict.skipped == (
        "DeepSpeed offloads the optimizer state and parameters, but it steps its optimizer "
        "inside the backward (accelerate's engine wrapper), so the measured phases cannot show "
        "the offload's share: compare with a run without it"
    )


def test_on_a_cpu_the_offload_check_is_skipped_with_its_reason() -> None:
    settings = RunSettings({}, offload=offload_of(_profile(**FSDP_OFFLOAD), {}))
    verdict = _verdicts(_measured(2.0, None), settings, on_gpu=False)["cpu_offload"]
    assert verdict.skipped == (
        "no GPU in this run: FSDP offload moves parameters and gradients between a GPU and "
        "host memory; on a CPU nothing is offloaded"
    )
    assert "cpu_offload" not in _verdicts(_measured(2.0, None), RunSettings({}), on_gpu=False)  # nothing offloaded
