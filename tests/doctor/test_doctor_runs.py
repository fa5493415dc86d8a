"""The throughput doctor on real runs of the tiny model on CPU (#38): the padding share of a skewed-length dataset
(the session's shared run, tests/doctor/padding_run.py) equals the share computed here from swift's own token counts
of its rows, with the verdict that fixes it (absent from a run without padding); a data loader slowed by a fault
hook gives the data-wait verdict (absent without the hook), and `--apply` writes a profile that differs only in the
verdict's key, queues it, and the doctor then compares the two runs."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from backend.cli.app import full_app
from backend.contract.events import read_all
from backend.core.paths import SHIPPED_PROFILES_DIR
from backend.data.swift_view import ask_report, request_for
from backend.doctor.report import diagnose
from backend.plugin.fault_hooks import INJECT_DATA_DELAY_ENV, INJECT_SLOW_RANK_ENV
from backend.profile import LaunchProfile, load_profile
from backend.queue.store import read_queue
from tests.doctor.padding_run import MAX_LENGTH, ROWS, STEPS, no_keeper_left, padding_run  # noqa: F401
from tests.jobs.jobs_helpers import train_quickstart
from tests.timing import wait_until

pytestmark = pytest.mark.slow


def _swift_lengths(path: Path) -> tuple[int, int, int]:
    """The rows' total, longest and shortest length in swift's own tokens (its template's input_ids), from one
    report of the data oracle (one child, where a question per row took one child each)."""
    data = load_profile(SHIPPED_PROFILES_DIR / "quickstart.toml").model_dump()
    data["data"]["train"] = [str(path)]
    data["training"]["max_length"] = MAX_LENGTH
    report = ask_report(request_for(LaunchProfile.model_validate(data), SHIPPED_PROFILES_DIR))
    assert (report["rows"], report["train_rows"], report["truncated_rows"]) == (ROWS, ROWS, 0), report
    return report["datasets"][0]["tokens"], report["token_lengths"]["max"], report["token_lengths"]["min"]


def _codes(run: Any) -> list[str]:
    return [v.code for v in diagnose(run).verdicts if v.skipped is None]


def test_padding_share_of_skewed_rows_is_measured_exactly_and_the_fix_removes_the_verdict(
        isolated_runs: Path) -> None:
    run = padding_run()
    path = run.path.parent / "skewed.jsonl"
    total, longest, shortest = _swift_lengths(path)
    assert longest > 2 * shortest  # skewed indeed
    # every step takes all 8 rows (whatever the shuffle): each is padded to the longest
    real, padded = STEPS * total, STEPS * (ROWS * longest - total)
    assert read_all(run.events_path)[-1]["type"] == "run_end"  # the timing's last event comes before it
    diagnosis = diagnose(run)
    assert (diagnosis.measured.real_tokens, diagnosis.measured.padded_tokens) == (real, padded)
    assert diagnosis.measured.padding_share == pytest.approx(padded / (real + padded))
    padding = [v for v in diagnosis.verdicts if v.code == "padding"]
    # all 8 rows in every micro-batch: grouping alone would change nothing, so smaller micro-batches grouped
    assert padding and padding[0].change == {"training.per_device_train_batch_size": 4,
                                             "training.gradient_accumulation_steps": 2,
                                             "extra_swift_args.group_by_length": True}
    assert diagnosis.measured.begin is not None and diagnosis.measured.begin.train_rows == ROWS
    assert f"pad {padded / (real + padded):.0%} of tokens" in padding[0].said
    # no slow loader here: no fetch waits like the slow-loader run's 0.4 s (the share alone sits near the verdict's
    # 10 % on this tiny model, whose steps take milliseconds: a loaded machine tips it either way)
    lead = diagnosis.measured.lead
    assert lead is not None and lead.seconds["data_wait"] / len(lead.step_seconds) < 0.05
    printed = CliRunner().invoke(full_app(), ["doctor", run.run_id])
    assert printed.exit_code == 0, printed.output
    assert f"tokens: {real:,} real, {padded:,} padding" in printed.output
    assert "MFU: none on CPU" in printed.output
    assert "skipped: flash attention: no GPU in this run" in printed.output

    unpadded = train_quickstart(isolated_runs, data={"train": [str(path)]},  # one row per micro-batch: no padding
                                training={"max_steps": STEPS, "logging_steps": 2, "per_device_train_batch_size": 1,
                                          "gradient_accumulation_steps": 1, "save_steps": 100,
                                          "max_length": MAX_LENGTH})
    assert diagnose(unpadded).measured.padded_tokens == 0
    assert "padding" not in _codes(unpadded)


@pytest.mark.usefixtures("no_keeper_left")
def test_a_slow_data_loader_gets_the_workers_verdict_and_apply_queues_and_compares(
        isolated_runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(INJECT_DATA_DELAY_ENV, "0.4")  # the run (and the keeper's runs) inherit it
    run = train_quickstart(isolated_runs, training={"max_steps": 6, "logging_steps": 2, "save_steps": 100,
                                                    "dataloader_num_workers": 0})
    diagnosis = diagnose(run)
    waits = [v for v in diagnosis.verdicts if v.code == "data_wait"]
    assert waits, diagnosis.lines()
    better = max(1, min(8, max(2, (os.cpu_count() or 1))))
    assert waits[0].change == {"training.dataloader_num_workers": better}
    assert "with dataloader_num_workers = 0" in waits[0].said
    lead = diagnosis.measured.lead
    assert lead is not None and lead.seconds["data_wait"] >= 6 * 0.4  # every fetch waited the injected delay
    number = diagnosis.applicable().index(waits[0]) + 1

    applied = CliRunner().invoke(full_app(), ["doctor", run.run_id, "--apply", str(number)])
    assert applied.exit_code == 0, applied.output
    written = run.path / "profile.doctor-data_wait.toml"
    assert f"wrote {written}" in applied.output
    before = tomllib.loads(run.profile_path.read_text(encoding="utf-8"))
    after = tomllib.loads(written.read_text(encoding="utf-8"))
    assert after["training"].pop("dataloader_num_workers") == better
    assert before["training"].pop("dataloader_num_workers") == 0
    assert after == before  # the verdict's key is the only difference
    entry_id = json.loads((run.path / "doctor-applied.json").read_text())[0]["entry"]
    assert f"queued as entry {entry_id}" in applied.output

    def ended() -> Any:
        entry = next(e for e in read_queue().entries if e.id == entry_id)
        return entry if entry.outcome else None

    entry = wait_until(ended, 900, "the queued run's end")
    assert entry.outcome == "finished", entry.reason
    compared = CliRunner().invoke(full_app(), ["doctor", run.run_id])
    assert compared.exit_code == 0, compared.output
    new_id = entry.run_id
    assert f"data_wait (training.dataloader_num_workers = {better}) as queue entry {entry_id} -> run {new_id}" \
        in compared.output
    assert f"(run {run.run_id}) -> " in compared.output and f"(run {new_id})" in compared.output


def test_the_per_rank_view_names_the_rank_a_fault_hook_slows(isolated_runs: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(INJECT_SLOW_RANK_ENV, "1:0.3")  # rank 1 sleeps 0.3 s in every forward
    run = train_quickstart(isolated_runs, distribution={"strategy": "ddp", "device": "cpu", "nproc_per_node": 2},
                           training={"max_steps": 6, "logging_steps": 2, "save_steps": 100,
                                     "dataloader_num_workers": 0, "gradient_checkpointing_use_reentrant": False})
    diagnosis = diagnose(run)
    assert sorted(diagnosis.measured.ranks) == [0, 1]
    slow = [v for v in diagnosis.verdicts if v.code == "slow_rank"]
    assert slow and slow[0].said.startswith("rank 1 is "), diagnosis.lines()
    assert slow[0].said.endswith(" at its own work: the others wait for it")
    # both ranks' steps last as long (rank 0 waits for rank 1): its own work is what names rank 1
    assert diagnosis.measured.ranks[1].own_work >= 0.3  # type: ignore[operator]
