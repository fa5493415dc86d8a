"""Text rendering and the JSON shape."""

from __future__ import annotations

import json

from estimate_helpers import GIB

from backend.estimate import EstimateRequest, ModelShape, estimate, render_table, render_text
from backend.estimate.report import bar


def test_bar_scales_to_the_largest_term() -> None:
    assert bar(10, 10, width=8) == "█" * 8
    assert bar(5, 10, width=8) == "█" * 4
    assert bar(0, 10) == "" and bar(1, 0) == ""
    assert bar(1, 16, width=8) == "▌"  # half a cell


def test_text_has_breakdown_seed_host_and_fit(qwen7b: ModelShape) -> None:
    text = render_text(estimate(qwen7b, EstimateRequest(tuner="qlora", gpu_memory_bytes=24 * GIB)))
    for needle in ("Per-device GPU memory", "weights_quantized", "quant_constants", "logits", "█",
                   "Textbook (seed formulas", "16*Phi", "Host RAM per node", "FITS",
                   "largest batch size that fits", "cheapest strategy"):
        assert needle in text, needle
    assert "\x1b[" not in text  # plain text, no colour codes


def test_narrow_text_drops_term_descriptions(qwen7b: ModelShape) -> None:
    e = estimate(qwen7b, EstimateRequest())
    assert "what it is" in render_text(e, width=140)
    assert "what it is" not in render_text(e, width=90)


def test_render_table_is_a_rich_renderable(qwen7b: ModelShape) -> None:
    assert hasattr(render_table(estimate(qwen7b, EstimateRequest())), "__rich_console__")


def test_json_is_serialisable_and_has_the_promised_keys(qwen7b: ModelShape) -> None:
    data = estimate(qwen7b, EstimateRequest(gpu_memory_bytes=80 * GIB)).to_json()
    json.dumps(data)
    assert {"per_device_total_bytes", "host_total_bytes", "breakdown", "seed", "fit"} <= set(data)
    assert data["per_device_total_bytes"] == sum(data["breakdown"].values())
    assert data["model"]["total_params"] == qwen7b.total_params
    assert data["request"]["target_modules"] == ["all-linear"]
