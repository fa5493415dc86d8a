"""Shared by the dataset tests: the format files, swift's report on them (one child per session), and
swift's own encoding of the same files computed here, in the test process, as the reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from backend.data.swift_view import DataRequest, ask_report
from tests.data_inspect.formats import Format, write_formats

MAX_LENGTH = 1024  # the tiny model's context; every format's rows fit


@pytest.fixture(scope="session")
def format_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("formats")


@pytest.fixture(scope="session")
def formats(format_dir: Path) -> list[Format]:
    return write_formats(format_dir)


@pytest.fixture(scope="session")
def formats_request(format_dir: Path, formats: list[Format], tiny_model: Path) -> DataRequest:
    return DataRequest(refs=[str(format_dir / f.ref) for f in formats], model=str(tiny_model),
                       model_type="qwen2", template="qwen", max_length=MAX_LENGTH)


@pytest.fixture(scope="session")
def formats_report(formats_request: DataRequest) -> dict[str, Any]:
    return ask_report(formats_request)


@pytest.fixture(scope="session")
def swift_reference(format_dir: Path, formats: list[Format], tiny_model: Path) -> dict[str, Any]:
    """Per format: [(length, trained tokens)] for each row, straight from swift's load_dataset and
    template.encode (None for a file swift cannot load)."""
    from swift import get_processor, get_template
    from swift.dataset import load_dataset

    processor = get_processor(str(tiny_model), model_type="qwen2")
    template = get_template(processor, template_type="qwen", max_length=None)
    template.set_mode("train")
    reference: dict[str, Any] = {}
    for fmt in formats:
        try:
            train, _ = load_dataset([str(format_dir / fmt.ref)], num_proc=1, load_from_cache_file=False)
        except Exception:
            reference[fmt.name] = None
            continue
        rows = []
        for row in train:
            try:
                encoded = template.encode(row)
            except Exception:
                rows.append(None)
                continue
            rows.append((len(encoded["input_ids"]), sum(1 for x in encoded["labels"] if x != -100)))
        reference[fmt.name] = rows
    return reference


@pytest.fixture(scope="session")
def data_profile(format_dir: Path, formats: list, tiny_model: Path) -> Path:
    """Three datasets (3 + 4 + 3 rows, two of the last dropped by swift), batch 2, accumulation 2."""
    path = format_dir / "data.toml"
    path.write_text(
        'name = "data"\n[model]\nsource = "builtin:tiny-qwen2"\nmodel_type = "qwen2"\ntemplate = "qwen"\n'
        '[data]\ntrain = ["./messages.jsonl", "./folder", "./malformed.jsonl"]\n'
        '[training]\nper_device_train_batch_size = 2\ngradient_accumulation_steps = 2\nmax_length = 512\n',
        encoding="utf-8")
    return path
