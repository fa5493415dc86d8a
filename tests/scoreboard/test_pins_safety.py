"""Pins never reach out of the run folder (#34 item 1) and keep a shared folder's permissions (#34 item 17):
`workbench checkpoints RUN --pin/--unpin N` on hand-made run folders."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from backend.cli import full_app
from tests.scoreboard.scoreboard_helpers import fake_run, log, saved
from tests.scoreboard.test_checkpoints_cli import RUNNER, checkpoints

EVENTS = [log(15, 2.0), saved(15), log(40, 1.0), saved(40)]


def test_unpin_through_a_symlinked_pinned_folder_deletes_nothing_outside(tmp_path: Path) -> None:
    run = fake_run(tmp_path / "runs", EVENTS, {15: True, 40: True})
    code, out = checkpoints(str(run.path), "--pin", "40")
    assert code == 0, out
    elsewhere = tmp_path / "elsewhere"
    foreign = elsewhere / "checkpoint-15"
    foreign.mkdir(parents=True)
    (foreign / "theirs.bin").write_bytes(b"not the run's")
    (run.path / "pinned").rename(run.path / "pinned.real")
    (run.path / "pinned").symlink_to(elsewhere)
    (run.path / "pins.json").write_text('{"pinned": [15, 40]}')

    code, out = checkpoints(str(run.path), "--unpin", "15")

    assert code == 2, out
    assert f"{run.path / 'pinned'} is a symlink" in out and "nothing was changed" in out
    assert (foreign / "theirs.bin").read_bytes() == b"not the run's"
    assert json.loads((run.path / "pins.json").read_text()) == {"pinned": [15, 40]}
    code, out = checkpoints(str(run.path), "--pin", "15")  # nor is anything written through the link
    assert code == 2 and "is a symlink" in out
    assert sorted(p.name for p in elsewhere.iterdir()) == ["checkpoint-15"]


def test_unpin_of_a_pinned_copy_that_is_a_symlink_deletes_nothing(tmp_path: Path) -> None:
    run = fake_run(tmp_path / "runs", EVENTS, {15: True, 40: True})
    foreign = tmp_path / "elsewhere" / "checkpoint-15"
    foreign.mkdir(parents=True)
    (run.path / "pinned").mkdir()
    (run.path / "pinned" / "checkpoint-15").symlink_to(foreign)
    (run.path / "pins.json").write_text('{"pinned": [15]}')

    code, out = checkpoints(str(run.path), "--unpin", "15")

    assert code == 2 and "is not a folder the workbench made (a symlink or a file)" in out, out
    assert foreign.is_dir() and (run.path / "pinned" / "checkpoint-15").is_symlink()


def test_unpin_rewrites_pins_json_only_once_the_copy_is_out_of_the_way(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    run = fake_run(tmp_path / "runs", EVENTS, {15: True, 40: True})
    assert checkpoints(str(run.path), "--pin", "15")[0] == 0
    pinned = run.path / "pinned"

    def refused(_src: object, _dst: object) -> None:
        raise PermissionError(13, "Permission denied")

    with monkeypatch.context() as patch:  # the copy cannot leave (a read-only folder, another owner's files)
        patch.setattr("backend.checkpoints.pins.os.rename", refused)
        code, out = checkpoints(str(run.path), "--unpin", "15")
    assert code == 2 and f"cannot remove the pinned copy {pinned / 'checkpoint-15'} (Permission denied); " \
        "nothing was changed" in out, out
    assert json.loads((run.path / "pins.json").read_text()) == {"pinned": [15]}
    assert (pinned / "checkpoint-15").is_dir()
    assert checkpoints(str(run.path), "--unpin", "15")[0] == 0
    assert sorted(p.name for p in pinned.iterdir()) == []
    assert json.loads((run.path / "pins.json").read_text()) == {"pinned": []}


def test_rewritten_files_keep_their_mode_and_new_ones_follow_the_umask(tmp_path: Path) -> None:
    run = fake_run(tmp_path / "runs", EVENTS, {15: True, 40: True})
    old = os.umask(0o002)  # a team's shared data folder: group-writable
    try:
        assert checkpoints(str(run.path), "--pin", "15")[0] == 0
        assert stat.S_IMODE((run.path / "pins.json").stat().st_mode) == 0o664
        (run.path / "pins.json").chmod(0o644)
        assert checkpoints(str(run.path), "--pin", "40")[0] == 0
        assert stat.S_IMODE((run.path / "pins.json").stat().st_mode) == 0o644
    finally:
        os.umask(old)
    shutil.rmtree(run.path / "pinned")


def test_delete_names_the_pinned_checkpoints_it_takes_with_it(tmp_path: Path) -> None:
    run = fake_run(tmp_path / "runs", EVENTS, {15: True, 40: True})
    for step in ("15", "40"):
        assert checkpoints(str(run.path), "--pin", step)[0] == 0

    asked = RUNNER.invoke(full_app(), ["delete", str(run.path)], input="n\n")

    assert asked.exit_code == 1 and run.path.is_dir()
    assert f"delete {run.path} and its checkpoints? (its pinned checkpoints go too: checkpoint-15, checkpoint-40)" \
        in " ".join(asked.output.split())
