"""`workbench import` keeps what a script pinned (#35): a flag equal to today's default (`--lora_rank 8
--lora_alpha 32 --target_modules all-linear`) is written into the profile and named in the report, so that a
later swift with other defaults trains the same run. Reads swift's schema (a child the first time)."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.profile import load_profile
from tests.faults import helpers as h

SCRIPT = ("swift sft --model /models/m --model_type qwen2 --template qwen --dataset /data/d.jsonl --tuner_type lora "
          "--lora_rank 8 --lora_alpha 32 --target_modules all-linear --learning_rate 1e-4\n")


@pytest.mark.slow
def test_flags_equal_to_the_default_are_kept_and_named(tmp_path: Path) -> None:
    script, output = tmp_path / "train.sh", tmp_path / "imported.toml"
    script.write_text(SCRIPT)
    result = h.cli("import", str(script), "-o", str(output))
    said = " ".join(result.output.split())
    assert result.exit_code == 0, said
    written = output.read_text()
    assert "[tuner]\ntype = \"lora\"\nlora_rank = 8\nlora_alpha = 32\ntarget_modules = [\n    \"all-linear\",\n]\n" \
        in written, written
    assert ("note: tuner.lora_rank, tuner.lora_alpha, tuner.target_modules: equal to the default with ms-swift "
            in said), said
    assert "kept so that a later swift does not change them" in said
    assert {"lora_rank", "lora_alpha", "target_modules"} <= load_profile(output).tuner.model_fields_set
