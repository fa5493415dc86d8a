"""Each renamed flag of the README's migration list (`workbench import`, "Arguments: ms-swift is the source
of truth"): the note the user reads, and the ms-swift 4.x flag that `workbench show` then passes to swift."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from tests.faults import helpers as h

MIGRATIONS = [
    # (what the old script says, the note printed, what `show` passes to swift instead)
    ("--train_type lora", "--train_type renamed to --tuner_type (ms-swift 4.x)", "--tuner_type lora"),
    ("--sft_type full", "--sft_type renamed to --tuner_type (ms-swift 4.x)", "--tuner_type full"),
    ("--model_id_or_path Qwen/Qwen2.5-0.5B-Instruct", "--model_id_or_path renamed to --model (ms-swift 4.x)",
     "--model Qwen/Qwen2.5-0.5B-Instruct"),
    ("--custom_train_dataset_path old.jsonl", "--custom_train_dataset_path renamed to --dataset (ms-swift 4.x)",
     "--dataset old.jsonl"),
    ("--batch_size 3", "--batch_size renamed to --per_device_train_batch_size (ms-swift 4.x)",
     "--per_device_train_batch_size 3"),
    ("--lora_target_modules q_proj v_proj", "--lora_target_modules renamed to --target_modules (ms-swift 4.x)",
     "--target_modules q_proj v_proj"),
    ("--dataset_test_ratio 0.05", "--dataset_test_ratio renamed to --split_dataset_ratio (ms-swift 4.x)",
     "--split_dataset_ratio 0.05"),
    ("--quantization_bit 4 --quant_method bnb", "--quantization_bit renamed to --quant_bits (ms-swift 4.x)",
     "--quant_bits 4"),
    ("--use_flash_attn true", "--use_flash_attn renamed to --attn_impl flash_attn (ms-swift 3.x+)",
     "--attn_impl=flash_attn"),
    ("--deepspeed default-zero2", "--deepspeed default-zero2 renamed to zero2 (ms-swift 3.x+ preset name)",
     "--deepspeed zero2"),
]


def _swift_words(show_output: str) -> list[str]:
    """The words after `swift.cli.sft` on the command line `workbench show` prints."""
    line = next(line for line in show_output.splitlines() if " -m swift.cli.sft " in line)
    return shlex.split(line.split(" -m swift.cli.sft ", 1)[1])


@pytest.mark.parametrize(("old", "note", "passed"), MIGRATIONS, ids=[m[0].split()[0].lstrip("-") for m in MIGRATIONS])
def test_an_old_flag_is_migrated_with_a_note(old: str, note: str, passed: str, tmp_path: Path) -> None:
    given = {"--model": "--model m", "--dataset": "--dataset d.jsonl"}
    if "--model_id_or_path" in old:
        del given["--model"]
    if "--custom_train_dataset_path" in old:
        del given["--dataset"]
    profile = tmp_path / "imported.toml"
    imported = h.cli("import", " ".join(["swift sft", *given.values(), old]), "-o", str(profile))
    h.assert_clean_exit(imported, (0,))
    assert f"note: {note}" in imported.output
    shown = h.cli("show", str(profile))
    h.assert_clean_exit(shown, (0,))
    words = _swift_words(shown.output)
    wanted = passed.split()
    assert any(words[i:i + len(wanted)] == wanted for i in range(len(words))), (passed, words)
    old_words = old.split()
    assert old_words[0] not in words or old_words[0] == "--deepspeed"  # the old name is gone...
    assert "default-zero2" not in words  # ...and so is the old preset name


def test_use_flash_attn_false_is_said_dropped_not_renamed(tmp_path: Path) -> None:
    profile = tmp_path / "imported.toml"
    imported = h.cli("import", "swift sft --model m --dataset d.jsonl --use_flash_attn false", "-o", str(profile))
    h.assert_clean_exit(imported, (0,))
    assert "renamed to --attn_impl" not in imported.output
    assert ("note: --use_flash_attn false dropped: without it ms-swift 4.x picks its default attention "
            "(--attn_impl unset)") in " ".join(imported.output.split())
    assert "--attn_impl" not in " ".join(_swift_words(h.cli("show", str(profile)).output))


@pytest.mark.parametrize("order", ["dataset first", "custom path first"])
def test_custom_train_dataset_path_joins_dataset_as_swift_2_read_both(order: str, tmp_path: Path) -> None:
    flags = ["--dataset d.jsonl", "--custom_train_dataset_path e.jsonl"]
    if order == "custom path first":
        flags.reverse()
    profile = tmp_path / "imported.toml"
    imported = h.cli("import", " ".join(["swift sft --model m", *flags]), "-o", str(profile))
    h.assert_clean_exit(imported, (0,))
    words = _swift_words(h.cli("show", str(profile)).output)
    at = words.index("--dataset")
    assert sorted(words[at + 1:at + 3]) == ["d.jsonl", "e.jsonl"], words
