"""Issue #29, Medium 9 (and NODE_RANK, and the Low `$((...))` item): `workbench import` reads shell words as
bash plus swift's parser would, and refuses what it cannot know. An unset `$VAR`, a command substitution
or several words for a one-value flag were written as a wrong value (`system = "$(rm"`, `system = "You"`);
now each exits 2 naming the word, and nothing is written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from backend.importing.swift_flags import ImportError_, import_script
from backend.launch.swift_schema import SwiftSchema, require_schema
from tests.timing import scaled

BASE = "swift sft --model Qwen/Qwen2-0.5B --dataset d.jsonl "


@pytest.fixture(scope="module")
def schema() -> SwiftSchema:
    return require_schema()


@pytest.mark.parametrize("words, reason", [
    ('--system "$UNSET_VAR"', "line 1: $UNSET_VAR is not set in the script, so its value is unknown here"),
    ("--model_author $UNSET_AUTHOR", "line 1: $UNSET_AUTHOR is not set in the script"),
    ("--system $(rm -rf x)", "line 1: $(rm: the shell fills this in when the script runs"),
    ("--system `hostname`", "line 1: `hostname`: the shell fills this in when the script runs"),
    ('--system "${GREETING:-hi}"', "line 1: ${GREETING:-hi}: the shell fills this in when the script runs"),
    ('--lora_rank 8 "$@"', "line 1: $@: the shell fills this in when the script runs"),
    ("--system You are a helpful assistant", "--system You are a helpful assistant: swift takes one value for "
                                             "--system, the shell passes 5 words (quote the value if it is one)"),
    ("--gradient_accumulation_steps $((99999999999999999999 * 99999999999999999999))",
     "line 1: $((99999999999999999999: the shell fills this in"),
])
def test_words_bash_would_fill_in_or_split_are_refused(words: str, reason: str, schema: SwiftSchema) -> None:
    with pytest.raises(ImportError_) as refused:
        import_script(BASE + words, schema)
    assert any(reason in r for r in refused.value.reasons), refused.value.reasons


def test_what_the_script_sets_and_single_quotes_are_carried(schema: SwiftSchema) -> None:
    script = ("AUTHOR=me\nexport SYS='You are $HOME'\n" + BASE + "--model_author $AUTHOR --system \"$SYS\" "
              "--gradient_accumulation_steps $((16 / 2)) --model_name 'cost $5'\n")
    model = import_script(script, schema).profile.model
    assert (model.model_author, model.system, model.model_name) == ("me", "You are $HOME", "cost $5")
    assert import_script(script, schema).profile.training.gradient_accumulation_steps == 8


def test_an_unset_variable_in_another_line_does_not_matter(schema: SwiftSchema) -> None:
    profile = import_script("mkdir -p $OUT\n" + BASE + "--lora_rank 4\n", schema).profile
    assert profile.tuner.lora_rank == 4


@pytest.mark.parametrize("script", [
    "NNODES=2 NODE_RANK=1 MASTER_ADDR=10.0.0.1 NPROC_PER_NODE=2 " + BASE,
    "export NNODES=2\nexport NODE_RANK=1\nexport MASTER_ADDR=10.0.0.1\nexport NPROC_PER_NODE=2\n" + BASE,
    "torchrun --nnodes 2 --node_rank 1 --master_addr 10.0.0.1 --nproc_per_node 2 swift/cli/sft.py "
    "--model Qwen/Qwen2-0.5B --dataset d.jsonl",
])
def test_node_rank_becomes_the_machine_rank(script: str, schema: SwiftSchema) -> None:
    profile = import_script(script, schema).profile
    d = profile.distribution
    assert (d.machine_rank, d.num_machines, d.nproc_per_node, d.main_process_ip) == (1, 2, 2, "10.0.0.1")
    assert "NODE_RANK" not in profile.env


def test_the_cli_exits_2_and_writes_nothing(tmp_path: Path, schema: SwiftSchema) -> None:
    out = tmp_path / "p.toml"
    done = subprocess.run([sys.executable, "-m", "backend.cli", "import", BASE + "--system $(rm -rf x)", "-o",
                           str(out)], capture_output=True, text=True, timeout=scaled(300))
    assert done.returncode == 2 and not out.exists()
    assert "cannot import: line 1: $(rm: the shell fills this in" in done.stderr
    assert "nothing was written" in done.stderr
