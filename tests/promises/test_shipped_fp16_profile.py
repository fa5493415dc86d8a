"""The shipped `profiles/cpu-fp16-loss-scale.toml` (README, "Shipped profiles"): fp16 with a real dynamic loss
scaler on CPU, overflows injected at steps 30 and 60, both inside its run. The injection itself (the scale
halves, the step is skipped) is tests/runs/test_run_lifecycle.py::test_cpu_fp16_injected_overflow_halves_the_scale_and_skips_the_step."""

from __future__ import annotations

import shlex

from backend.core.paths import SHIPPED_PROFILES_DIR
from tests.faults import helpers as h


def test_the_fp16_profile_injects_overflows_at_steps_30_and_60_of_its_100_steps() -> None:
    shown = h.cli("show", str(SHIPPED_PROFILES_DIR / "cpu-fp16-loss-scale.toml"))
    h.assert_clean_exit(shown, (0,))
    line = next(line for line in shown.output.splitlines() if " -m swift.cli.sft " in line)
    words = shlex.split(line)
    assert "WORKBENCH_INJECT_OVERFLOW_STEPS=30,60" in words
    assert words[words.index("--fp16") + 1] == "true" and words[words.index("--use_cpu") + 1] == "true"
    assert words[words.index("--max_steps") + 1] == "100"  # both overflows happen within the run
