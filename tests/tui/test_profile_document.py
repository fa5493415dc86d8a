"""The profile document without a screen: refused values, save, save as with rebased paths, diff."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from backend.core.paths import BUILTIN_DATASETS
from backend.profile import load_profile
from tests.tui.conftest import QUICKSTART
from tui.profile_document import ProfileDocument, SaveRefused


@pytest.fixture
def doc_with_local_data(tmp_path: Path) -> ProfileDocument:
    """A user's profile in `a/` training on `a/data/train.jsonl`, named relative to the profile."""
    (tmp_path / "a" / "data").mkdir(parents=True)
    shutil.copy(BUILTIN_DATASETS["self-cognition"], tmp_path / "a" / "data" / "train.jsonl")
    shutil.copy(QUICKSTART, tmp_path / "a" / "mine.toml")
    doc = ProfileDocument.open(tmp_path / "a" / "mine.toml")
    assert doc.set("data.train", ["./data/train.jsonl"]) is None
    doc.save()
    return doc


def test_save_as_rebases_relative_paths_onto_the_new_folder(doc_with_local_data: ProfileDocument,
                                                           tmp_path: Path) -> None:
    doc = doc_with_local_data
    (tmp_path / "b").mkdir()
    doc.save_as(tmp_path / "b" / "copy.toml")
    assert doc.path == (tmp_path / "b" / "copy.toml").resolve()
    assert doc.profile.data.train == ["../a/data/train.jsonl"]
    assert load_profile(tmp_path / "b" / "copy.toml").data.train == ["../a/data/train.jsonl"]
    assert load_profile(tmp_path / "a" / "mine.toml").data.train == ["./data/train.jsonl"]  # untouched
    assert not doc.is_dirty


def test_a_refused_save_as_changes_nothing(doc_with_local_data: ProfileDocument, tmp_path: Path) -> None:
    doc = doc_with_local_data
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the folder should be")
    with pytest.raises(SaveRefused):
        doc.save_as(blocker / "copy.toml")
    assert doc.profile.data.train == ["./data/train.jsonl"]  # not rebased onto a folder it never reached
    assert doc.path == (tmp_path / "a" / "mine.toml").resolve()


def test_refused_values_keep_the_document_modified_and_block_saving(doc_with_local_data: ProfileDocument) -> None:
    doc = doc_with_local_data
    assert "greater than or equal to -1" in (doc.set("training.max_steps", -5) or "")
    assert doc.is_dirty and doc.profile.training.max_steps != -5
    with pytest.raises(SaveRefused, match="training.max_steps"):
        doc.save()
    assert doc.set("training.max_steps", 7) is None and not doc.refused
    assert "-max_steps" not in doc.diff_text() and "+max_steps = 7\n" in doc.diff_text()


def test_a_value_that_hides_a_field_drops_its_refused_text(doc_with_local_data: ProfileDocument) -> None:
    doc = doc_with_local_data
    doc.refuse("tuner.lora_rank", "a number is needed")
    assert doc.set("tuner.type", "full") is None  # full fine-tuning has no LoRA rank to fix
    assert doc.refused == {}


def test_choosing_qlora_in_the_form_picks_a_quantization_method(doc_with_local_data: ProfileDocument) -> None:
    doc = doc_with_local_data
    assert doc.profile.tuner.quant_method is None
    assert doc.set("tuner.type", "qlora") is None
    assert doc.profile.tuner.quant_method == "bnb"  # swift 4.6 quantizes nothing with quant_bits alone
    doc.set("tuner.quant_method", "hqq")
    doc.set("tuner.type", "lora")
    doc.set("tuner.type", "qlora")
    assert doc.profile.tuner.quant_method == "hqq"  # a method the user chose is kept


def test_leaving_qlora_takes_back_the_method_it_chose(doc_with_local_data: ProfileDocument) -> None:
    doc = doc_with_local_data
    doc.set("tuner.type", "qlora")
    doc.set("tuner.type", "lora")
    assert doc.profile.tuner.quant_method is None and not doc.is_dirty  # back to what the file says
