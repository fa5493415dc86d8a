"""Small numbers shown as small, and one precision for the forecast and the launch (#37 items 3 and 4).

The built-in tiny Qwen2 (vocab 638, hidden 64, intermediate 176, 2 layers, 4 heads / 2 kv heads, tied
embeddings) has, by hand: embeddings 638 x 64 = 40,832; a layer q 64x64+64 = 4,160, k and v 64x32+32 =
2,080 each, o 64x64 = 4,096, gate/up/down 3 x 64x176 = 33,792, two norms 128: 46,336; two layers 92,672;
the final norm 64: 133,568 parameters. LoRA r=16 on its 7 linears: 16 x (in + out) = 18,688 a layer, 37,376.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from backend.cli.estimate import register
from backend.core.units import GIB, KIB, MIB, count, unit_for
from backend.hardware.machine import HardwareInfo, trains_on_cpu

REPO = Path(__file__).resolve().parents[2]


def test_counts_are_said_as_people_say_them() -> None:
    assert [count(n) for n in (7_615_616_512, 1_234_567, 350_000, 133_568, 37_376, 638)] == \
        ["7.62B", "1.23M", "350K", "134K", "37.4K", "638"]


def test_a_table_takes_the_unit_of_its_largest_value() -> None:
    assert unit_for(600 * MIB) == ("MiB", MIB)
    assert unit_for(3 * GIB) == ("GiB", GIB)
    assert unit_for(521 * KIB) == ("KiB", KIB)


def test_auto_trains_on_the_cpu_only_on_a_machine_without_cuda() -> None:
    assert trains_on_cpu("auto", HardwareInfo())
    assert trains_on_cpu("cpu", None) and not trains_on_cpu("auto", None) and not trains_on_cpu("cuda", HardwareInfo())


@pytest.mark.slow
def test_the_tiny_models_estimate_says_small_numbers_and_the_launchs_precision(tiny_model: Path) -> None:
    """On this machine (no CUDA) the quickstart trains in fp32: `workbench show` passes --fp16 false and
    --bf16 false, and the estimate says the same instead of swift's GPU rule (fp16)."""
    app = typer.Typer()
    register(app)

    @app.callback()
    def main() -> None:
        """workbench"""

    result = CliRunner().invoke(app, ["estimate", str(REPO / "profiles" / "quickstart.toml")], terminal_width=120)
    assert result.exit_code == 0, result.output
    assert "134K parameters" in result.output and "trainable 37.4K parameters" in result.output
    assert "fp32 (weights fp32)" in result.output
    assert "0.00B" not in result.output and "│ weights            │ 0.00" not in result.output
    assert "│ weights            │   0.51 │" in result.output  # 133,568 x 4 bytes = 0.51 MiB, in a MiB table
