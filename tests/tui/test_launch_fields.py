"""The form covers the whole profile schema, and field text round-trips to values."""

from __future__ import annotations

import pytest

from backend.profile import LaunchProfile, load_profile
from tests.tui.conftest import QUICKSTART
from tui.profile_fields import (
    TABS,
    field_spec,
    format_value,
    get_value,
    is_visible,
    parse_text,
    section_paths,
    tab_paths,
)


def _all_paths() -> list[str]:
    return [p for p in section_paths("") if isinstance(p, str)]


def test_every_profile_field_is_in_exactly_one_tab_with_help() -> None:
    in_tabs = [p for _, _, sections in TABS for p in tab_paths(sections) if isinstance(p, str)]
    assert sorted(in_tabs) == sorted(_all_paths())
    for path in in_tabs:
        spec = field_spec(path)
        assert spec.help, f"{path} has no one-line help"


@pytest.mark.parametrize("path, text, value", [
    ("data.train", "builtin:self-cognition './my data.jsonl#20'", ["builtin:self-cognition", "./my data.jsonl#20"]),
    ("distribution.gpu_ids", "0, 1,3", [0, 1, 3]),
    # values kept as typed: a comma is no list separator (#11)
    ("extra_swift_args", "optim=adamw_torch use_liger_kernel=true lora_bias=none seq=1,2 system='Hi, you.'",
     {"optim": "adamw_torch", "use_liger_kernel": True, "lora_bias": "none", "seq": "1,2", "system": "Hi, you."}),
    ("model.system", "", None),
    ("debug.inject_overflow_steps", "3,7", [3, 7]),
])
def test_text_round_trips(path: str, text: str, value: object) -> None:
    spec = field_spec(path)
    parsed = parse_text(spec, text)
    assert parsed == value
    assert parse_text(spec, format_value(spec, parsed)) == value
    profile = LaunchProfile()
    section, _, name = path.rpartition(".")
    setattr(get_value(profile, section) if section else profile, name, parsed)  # pydantic accepts it


@pytest.mark.parametrize("path, text, message", [
    ("data.train", "'unclosed", "quote"),
    ("distribution.gpu_ids", "0,x", "whole numbers"),
    ("extra_swift_args", "novalue", "key=value"),
    ("training.max_steps", "", "number"),
])
def test_bad_text_says_how_to_write_it(path: str, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_text(field_spec(path), text)


def test_choices_and_optional_choices() -> None:
    assert [label for label, _ in field_spec("tuner.type").choices] == ["full", "lora", "qlora"]
    assert field_spec("tuner.bnb_4bit_quant_storage").choices[0][1] is None
    assert [v for _, v in field_spec("training.gradient_checkpointing_use_reentrant").choices] == [None, True, False]
    assert field_spec("precision.tf32").kind == "bool"
    assert [v for _, v in field_spec("precision.bf16").choices] == [None, True, False]  # unset = swift's rule


def test_fields_show_only_where_they_matter() -> None:
    profile = load_profile(QUICKSTART)
    assert is_visible("tuner.lora_rank", profile) and not is_visible("tuner.quant_bits", profile)
    profile.tuner.type = "qlora"
    assert is_visible("tuner.quant_bits", profile) and is_visible("tuner.bnb_4bit_quant_type", profile)
    profile.tuner.quant_bits = 8
    assert not is_visible("tuner.bnb_4bit_quant_type", profile)
    profile.distribution.strategy = "deepspeed"
    assert is_visible("distribution.deepspeed.stage", profile)
    assert not is_visible("distribution.deepspeed.offload_param", profile)  # ZeRO-3 only
    profile.distribution.deepspeed.stage = 3
    assert is_visible("distribution.deepspeed.offload_param", profile)
    assert not is_visible("distribution.fsdp.cpu_offload", profile)
