"""A save through the TUI keeps the user's file: comments (top, inline, between sections), key order and
formatting stay, only the values that changed are rewritten (tomlkit)."""

from __future__ import annotations

from pathlib import Path

from backend.profile import load_profile, save_profile
from tui.profile_document import ProfileDocument

USERS_FILE = '''# My 7B run: keep the rank low, the box has one 24 GB card.
name = "mine"  # shown in the runs list
description = "first try"

[tuner]
# rank before type, as I think of it
lora_rank = 16  # 8 was too small
type = "lora"
lora_alpha = 32  # the default, written on purpose

# the data comes before the model in my files
[data]
train = ["./a.jsonl", "./b.jsonl"]  # two sets

[model]
source = "Qwen/Qwen2.5-7B-Instruct"
template = "qwen2_5"  # swift infers it, but I like to see it

[training]
learning_rate = 0.0002
'''


def test_a_save_keeps_the_users_comments_and_key_order(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(USERS_FILE, encoding="utf-8")
    profile = load_profile(path)
    profile.tuner.lora_rank = 32  # changed
    profile.model.template = None  # set back to its default: the key goes
    profile.training.max_steps = 50  # new
    profile.description = "second try\nwith a longer note"  # changed, now two lines
    save_profile(profile, path, layout=path)
    assert path.read_text(encoding="utf-8") == '''# My 7B run: keep the rank low, the box has one 24 GB card.
name = "mine"  # shown in the runs list
description = """
second try
with a longer note"""

[tuner]
# rank before type, as I think of it
lora_rank = 32  # 8 was too small
type = "lora"
lora_alpha = 32  # the default, written on purpose

# the data comes before the model in my files
[data]
train = ["./a.jsonl", "./b.jsonl"]  # two sets

[model]
source = "Qwen/Qwen2.5-7B-Instruct"

[training]
learning_rate = 0.0002
max_steps = 50
'''
    assert load_profile(path) == profile


def test_an_unchanged_save_leaves_the_users_file_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(USERS_FILE, encoding="utf-8")
    save_profile(load_profile(path), path, layout=path)
    assert path.read_text(encoding="utf-8") == USERS_FILE


def test_a_new_top_level_value_lands_above_the_tables(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('name = "mine"\n\n[model]\nsource = "builtin:tiny-qwen2"  # the small one\n', encoding="utf-8")
    profile = load_profile(path)
    profile.task = "pt"
    save_profile(profile, path, layout=path)
    assert path.read_text(encoding="utf-8") == ('name = "mine"\ntask = "pt"\n\n[model]\n'
                                                'source = "builtin:tiny-qwen2"  # the small one\n')


def test_ctrl_s_and_save_as_in_the_tui_keep_the_comments(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(USERS_FILE, encoding="utf-8")
    document = ProfileDocument.open(path)
    assert document.set("tuner.lora_rank", 64) is None
    document.save()  # ctrl+s
    saved = path.read_text(encoding="utf-8")
    assert saved == USERS_FILE.replace("lora_rank = 16  # 8 was too small", "lora_rank = 64  # 8 was too small")
    assert not document.is_dirty
    copy = document.save_as(tmp_path / "copy.toml")
    assert copy.read_text(encoding="utf-8") == saved  # the copy keeps the comments too
