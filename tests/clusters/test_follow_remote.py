"""The run folder follows the run (#40 item 3): a run's folder where it runs (here: a real finished run's folder,
copied into a "bucket" folder) is copied by `workbench sync RUN --from DIR` into the run's local folder in a
second data dir; `workbench status` then reads it as a local run and says how old what it sees is."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest

from backend.rundir import index
from backend.rundir.layout import RunFolder
from tests.faults import helpers as h

pytestmark = pytest.mark.slow  # the remote side is a real training (the session's short_lora_run)


def _mirror(workspace: Path, run_id: str) -> RunFolder:
    """The run's local folder as `workbench run --on sky` leaves it: submitted, nothing seen yet."""
    mirror = RunFolder.create(workspace, run_id)
    mirror.write_state(mirror.new_state("quickstart").model_copy(update={"host": "skypilot", "boot_id": None}))
    index.register(mirror.path)
    return mirror


def test_a_synced_run_is_read_as_a_local_one_with_the_age_of_what_is_seen(
        short_lora_run: RunFolder, workspace: Path, tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    remote = Path(shutil.copytree(short_lora_run.path, bucket / short_lora_run.run_id, symlinks=True))
    mirror = _mirror(workspace, short_lora_run.run_id)
    before = h.cli("status", mirror.run_id)
    assert "step" not in before.output

    synced = h.cli("sync", mirror.run_id, "--from", str(remote))
    h.assert_clean_exit(synced, (0,))
    assert synced.output.startswith(f"synced {mirror.run_id} from {remote}: state.json, events.jsonl, output.log")
    shown = h.cli("status", mirror.run_id)
    h.assert_clean_exit(shown, (0,))
    assert f"run {mirror.run_id}  finished" in shown.output
    assert "  step 4/4  loss " in shown.output
    last = max(e["time"] for e in map(json.loads, (remote / "events.jsonl").read_text().splitlines()))
    seen = next(line for line in shown.output.splitlines() if line.startswith("  seen: "))
    age = re.fullmatch(r"  seen: events as of (\d+) (s|min) ago; synced ([01]) s ago from (.+) \(`workbench sync` "
                       r"copies it again\)", seen)
    assert age is not None, seen
    # the session's shared run may have ended minutes ago: under 120 s said in seconds, then in minutes
    said = int(age.group(1)) * (60 if age.group(2) == "min" else 1)
    assert abs(said - (time.time() - last)) <= (2 if age.group(2) == "s" else 31), seen
    assert age.group(4) == str(remote)


def test_sync_takes_only_the_same_run_s_folder_and_no_link(short_lora_run: RunFolder, workspace: Path,
                                                          tmp_path: Path) -> None:
    other = h.fake_run(tmp_path / "elsewhere", "20260101-000000-other-0001")
    mirror = _mirror(workspace, short_lora_run.run_id)
    refused = h.cli("sync", mirror.run_id, "--from", str(other.path))
    h.assert_clean_exit(refused, (2,))
    assert f"--from: {other.path} is run 20260101-000000-other-0001, not {mirror.run_id}" in refused.output

    remote = Path(shutil.copytree(short_lora_run.path, tmp_path / "bucket" / short_lora_run.run_id, symlinks=True))
    secret = tmp_path / "secret.txt"
    secret.write_text("not the run's\n")
    (remote / "output.log").unlink()
    (remote / "output.log").symlink_to(secret)
    synced = h.cli("sync", mirror.run_id, "--from", str(remote))
    h.assert_clean_exit(synced, (0,))
    assert "output.log (not a file: skipped)" in synced.output
    assert not (mirror.path / "output.log").exists()
