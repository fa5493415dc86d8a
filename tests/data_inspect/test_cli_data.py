"""`workbench data inspect|show` and `workbench validate` reading the data through swift."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from backend.cli import full_app

runner = CliRunner()


def test_inspect_profile_json(data_profile: Path) -> None:
    result = runner.invoke(full_app(), ["data", "inspect", str(data_profile), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["rows"] == 3 + 4 + 1 and report["dropped"] == 2
    assert report["steps_per_epoch"] == 2  # 8 rows -> 4 batches of 2 -> 2 optimizer steps of 2 batches
    assert sorted(e["line"] for e in report["errors"]) == [2, 3]
    assert {e["dataset"] for e in report["errors"]} == {"./malformed.jsonl"}
    assert set(report["token_lengths"]) >= {"p50", "p90", "p99", "max"}
    assert report["truncated_rows"] == 0 and report["zero_trained_rows"] == 0
    assert 0 < report["trained_token_fraction"] < 0.5


def test_validate_reads_the_data_with_swift(data_profile: Path, format_dir: Path) -> None:
    result = runner.invoke(full_app(), ["validate", str(data_profile)])
    assert result.exit_code == 0, result.output  # dropped rows are a warning
    assert "warning: [data.train] swift drops 2 of 3 rows of './malformed.jsonl' (line 2, line 3)" in result.output
    broken = format_dir / "broken.toml"
    broken.write_text(data_profile.read_text().replace('"./folder", ', '"./broken.jsonl", '), encoding="utf-8")
    result = runner.invoke(full_app(), ["validate", str(broken)])
    assert result.exit_code == 1, result.output
    assert "error: [data.train] dataset './broken.jsonl' cannot be read by swift" in result.output
    assert "line 2: not valid JSON" in result.output


def test_show_a_row_with_markers_when_not_a_terminal(format_dir: Path, formats: list, tiny_model: Path) -> None:
    """Stands alone: `formats` writes the files it reads (run by itself it found an empty folder)."""
    result = runner.invoke(full_app(), ["data", "show", str(format_dir / "messages.jsonl"), "--row", "1"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"row 1 of {format_dir / 'messages.jsonl'}, line 1 · template qwen · ")
    expected = ("<|im_start|>system\nYou answer in one short sentence.<|im_end|>\n"
                "<|im_start|>user\nWhat colour is the sky?<|im_end|>\n"
                "<|im_start|>assistant\n⟦Blue on a clear day.<|im_end|>↵⟧\n"
                "<|im_start|>user\nAnd at night?<|im_end|>\n"
                "<|im_start|>assistant\n⟦Dark, with stars.<|im_end|>↵⟧\n")
    assert expected in result.stdout
    missing = runner.invoke(full_app(), ["data", "show", str(format_dir / "messages.jsonl"), "--row", "9"])
    assert missing.exit_code == 1
    assert "row 9 does not exist: the dataset has 3 rows" in missing.stdout
