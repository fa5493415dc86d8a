"""save.request is a request only when it is a regular file holding one, and the trainer takes it by a rename
(#34 item 7): hand-made run folders, `workbench save` through the CLI, the trainer's side called as its
callback calls it at every step end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import backend.contract.save_request as save_request
from backend.contract.save_request import read_save_request, take_save_request, write_save_request
from tests.faults import helpers as h


@pytest.fixture
def workspace(isolated_runs: Path) -> Path:
    isolated_runs.mkdir(parents=True, exist_ok=True)
    return isolated_runs


def test_a_save_request_that_is_a_folder_is_no_request_and_save_says_so(workspace: Path) -> None:
    run = h.fake_run(workspace, status="running")
    (run.path / "save.request").mkdir()
    for _step in range(3):  # the trainer's look at every step end: no save asked
        assert take_save_request(run.path) is None
    assert (run.path / "save.request").is_dir()

    result = h.cli("save", run.run_id, "--timeout", "0")

    h.assert_clean_exit(result, (2,))
    said = " ".join(result.output.split())
    assert (f"cannot ask run {run.run_id} for a checkpoint: {run.path / 'save.request'} is a folder, not a request "
            f"file, so the trainer cannot be asked through it; remove it (rm -r {run.path / 'save.request'}) and "
            "ask again") in said


@pytest.mark.parametrize("content", ["", "not json", '{"action": "explode"}', "[1, 2]"])
def test_a_file_that_is_not_a_request_asks_nothing(tmp_path: Path, content: str) -> None:
    (tmp_path / "save.request").write_text(content)
    assert read_save_request(tmp_path) is None
    assert take_save_request(tmp_path) is None
    assert not (tmp_path / "save.request").exists()  # taken away: it is not looked at again every step


def test_a_stop_written_while_the_trainer_takes_a_save_is_not_lost(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    write_save_request(tmp_path, "save")
    real_loads = json.loads
    written: list[str] = []

    def loads_while_a_stop_comes(text: str | bytes) -> object:
        if not written:  # the workbench asks "save and stop" between the trainer's look and its cleanup
            written.append("")
            written[0] = write_save_request(tmp_path, "stop", "SIGUSR1").id
        return real_loads(text)

    monkeypatch.setattr(save_request.json, "loads", loads_while_a_stop_comes)
    first = take_save_request(tmp_path)
    monkeypatch.setattr(save_request.json, "loads", real_loads)

    assert first is not None and first.action == "save"
    second = take_save_request(tmp_path)
    assert second is not None and (second.action, second.reason, second.id) == ("stop", "SIGUSR1", written[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == []
