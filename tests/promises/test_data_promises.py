"""README, "Datasets": `validate` warns about rows over max_length and rows that train no token, naming the
rows; `data inspect --sample-limit N` encodes a sample of N rows and says so. Swift reads the data (a child)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.faults import helpers as h

SHORT = [{"messages": [{"role": "user", "content": f"hi {i}"}, {"role": "assistant", "content": f"hello {i}"}]}
         for i in range(4)]
# rows 5 and 7 are over max_length 64: cut on the right, nothing of their answers is left
PROMPT_ONLY = {"messages": [{"role": "user", "content": "long " * 200}, {"role": "assistant", "content": "ok"}]}
LONG_ANSWER = {"messages": [{"role": "user", "content": "x " * 58}, {"role": "assistant", "content": "a b c " * 8}]}


def _profile(folder: Path, rows: list[dict], extra: str = "") -> Path:
    (folder / "d.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    profile = folder / "p.toml"
    profile.write_text('name = "d"\n[model]\nsource = "builtin:tiny-qwen2"\nmodel_type = "qwen2"\ntemplate = "qwen"\n'
                       '[data]\ntrain = ["./d.jsonl"]\n[training]\nper_device_train_batch_size = 1\n'
                       'gradient_accumulation_steps = 1\nmax_length = 64\n' + extra)
    return profile


@pytest.mark.slow
def test_validate_warns_of_rows_over_max_length_and_rows_that_train_nothing(tiny_model: Path, tmp_path: Path) -> None:
    profile = _profile(tmp_path, [*SHORT, PROMPT_ONLY, SHORT[0], LONG_ANSWER],
                       '[extra_swift_args]\ntruncation_strategy = "right"\n')
    result = h.cli("validate", str(profile))
    h.assert_clean_exit(result, (0,))  # warnings only
    said = " ".join(result.output.split())
    assert "warning: [data.train] 2 of 7 rows of './d.jsonl' are longer than max_length 64: swift truncates them (" \
        in said, said
    assert " tokens lost; rows 5, 7)." in said  # the truncated rows, not the no-token warning's (rows 5, 7) too
    assert "warning: [data.train] 2 rows of './d.jsonl' train no token at all (rows 5, 7)." in said


@pytest.mark.slow
def test_data_inspect_sample_limit_encodes_a_sample_and_says_so(tiny_model: Path, tmp_path: Path) -> None:
    profile = _profile(tmp_path, SHORT * 3)
    result = h.cli("data", "inspect", str(profile), "--sample-limit", "5")
    h.assert_clean_exit(result, (0,))
    said = " ".join(result.output.split())
    assert "(a random sample of 5 rows; the dataset has more than 5)" in said, said
