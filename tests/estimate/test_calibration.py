"""A forecast that learns from this machine's runs (#37 item 2): the host baseline measured by finished runs
replaces the textbook 3 GiB, with its evidence; a damaged run is named and skipped; switched off, or on a new
machine, the textbook terms, said so; queue admission takes the calibrated figure.

The runs are records of real quickstart-sized CPU trainings of the built-in model (tests/estimate/fixtures/
calibration_runs: state, forecast, events and profile as the workbench wrote them; only the recording host's
name was replaced), copied into a workspace of the test's own as this machine's runs. Expected figures are
read by hand from their events (numbers in the comments)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from backend.cli.app import full_app
from backend.core.process_identity import this_host
from backend.estimate.calibration import calibration_path
from backend.queue.admission import why_waiting
from backend.queue.store import Entry, QueueFile
from backend.rundir.layout import RunFolder

RECORDS = Path(__file__).parent / "fixtures" / "calibration_runs"
THREE = ("20261204-184842-quickstart-90c1", "20261204-191328-quickstart-138e", "20261204-194700-quickstart-968c")
GIB = 1024**3
# the quickstart's (318 steps, run 138e) largest RSS, its save at step 318: tree_rss_bytes 641884160
QUICKSTART_PEAK_RSS = 641_884_160
# run 90c1's save phase: own RSS 645,906,432 less the forecast's other terms then (state_dict_gather 149,504;
# on the CPU its device terms: weights 534,272 + adapter_weights 149,504 + optimizer_states 299,008):
# 644,774,144 bytes, the largest of the three runs' phases (138e: 640,751,872; 968c: 638,847,232)
CALIBRATED_BASELINE = 644_774_144

runner = CliRunner()


def copy_runs(workspace: Path, names: tuple[str, ...] = THREE) -> list[Path]:
    """The recorded runs as finished runs of this machine in `workspace`."""
    copies = []
    for name in names:
        target = workspace / name
        shutil.copytree(RECORDS / name, target)
        state = json.loads((target / "state.json").read_text())
        (target / "state.json").write_text(json.dumps({**state, "host": this_host()}))
        copies.append(target)
    return copies


def estimate(*args: str) -> str:
    result = runner.invoke(full_app(), ["estimate", "quickstart", "--formula", *args], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.stdout


def estimate_json(*args: str) -> dict:
    return json.loads(estimate("--json", *args))


def test_three_finished_runs_bring_the_host_forecast_within_20_percent_of_the_measured_rss(isolated_runs: Path) -> None:
    textbook = estimate_json()["host_total_bytes"]
    copy_runs(isolated_runs)
    data = estimate_json()
    assert data["request"]["host_process_bytes"] == CALIBRATED_BASELINE
    assert abs(data["host_total_bytes"] - QUICKSTART_PEAK_RSS) / QUICKSTART_PEAK_RSS < 0.20
    assert textbook > 4 * QUICKSTART_PEAK_RSS  # the 3 GiB assumed: +400 % on this run
    text = estimate()
    assert "host baseline: 0.60 GiB measured over 3 runs on this machine (was 3.0 GiB assumed)" in text
    assert "its runs: " + ", ".join(THREE) in text


def test_a_new_run_is_counted_at_the_next_forecast(isolated_runs: Path) -> None:
    """The cache under the workspace is brought up to date when the runs change."""
    copy_runs(isolated_runs, THREE[:2])
    assert "measured over 2 runs" in estimate()
    copy_runs(isolated_runs, THREE[2:])
    assert "measured over 3 runs" in estimate()
    assert calibration_path().is_file() and calibration_path().name.endswith(f"-{this_host()}.json")
    assert not [p.name for p in isolated_runs.iterdir() if not p.is_dir()]  # the runs folder holds runs only


def test_a_damaged_run_record_is_named_and_skipped(isolated_runs: Path) -> None:
    copy_runs(isolated_runs)
    broken = copy_runs(isolated_runs.parent / "elsewhere", ("20261204-194223-quickstart-caab",))[0]
    damaged = isolated_runs / "20261204-200000-quickstart-dead"
    shutil.copytree(broken, damaged)
    (damaged / "run.json").write_text(
        json.dumps({**json.loads((damaged / "run.json").read_text()), "run_id": damaged.name})
    )
    (damaged / "forecast.json").write_text('{"per_device_total_bytes": 12')  # cut short
    torn = isolated_runs / "20261204-200001-quickstart-torn"
    shutil.copytree(broken, torn)
    (torn / "run.json").write_text(json.dumps({**json.loads((torn / "run.json").read_text()), "run_id": torn.name}))
    with (torn / "events.jsonl").open("a") as events:
        events.write('{"type": "memory_phase", "phase": 7}\n')
    text = estimate()
    assert "calibration skipped run 20261204-200000-quickstart-dead: forecast.json damaged (JSONDecodeError)" in text
    assert "calibration skipped run 20261204-200001-quickstart-torn: events.jsonl damaged (" in text
    assert "host baseline: 0.60 GiB measured over 3 runs on this machine" in text  # the others still count
    assert estimate_json()["request"]["host_process_bytes"] == CALIBRATED_BASELINE


def test_switched_off_the_forecast_is_the_textbook_one(isolated_runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    textbook = estimate_json()
    copy_runs(isolated_runs)
    off = estimate_json("--no-calibration")
    assert off["request"]["host_process_bytes"] is None
    assert off["host_total_bytes"] == textbook["host_total_bytes"]
    assert "textbook terms: calibration switched off; host baseline 3.0 GiB assumed" in estimate("--no-calibration")
    monkeypatch.setenv("WORKBENCH_CALIBRATION", "off")  # what the queue, validate and the launch dialog read
    assert estimate_json()["host_total_bytes"] == textbook["host_total_bytes"]


def test_a_machine_without_finished_runs_says_it_uses_the_textbook_terms(isolated_runs: Path) -> None:
    text = estimate()
    assert "textbook terms: no finished run on this machine (on the CPU) yet; host baseline 3.0 GiB assumed" in text


def test_queue_admission_uses_the_calibrated_host_forecast(isolated_runs: Path, tiny_model: Path) -> None:
    """2 GiB free, margin 0.15. Textbook: 3 GiB + the tiny model's CPU terms, x 1.15 = about 3.5 GiB: held back.
    Calibrated: 0.60 GiB + the same terms, x 1.15 = about 0.7 GiB: admitted."""
    from backend.cli.common import resolve_profile_path
    from backend.profile import load_profile
    from backend.queue.keeper import forecast_bytes

    path = resolve_profile_path(Path("quickstart"))
    profile = load_profile(path)
    assert profile.queue.memory_margin == 0.15

    def decision() -> str | None:
        entry = Entry(
            id="q1",
            name="quickstart",
            profile_file=str(path),
            base_dir=str(path.parent),
            forecast_bytes=forecast_bytes(profile, path.parent),
        )
        return why_waiting(QueueFile(entries=[entry]), entry, max_parallel=1, margin=0.15, free_bytes=2 * GIB)

    assert decision() == "host RAM: 2.0 GiB free, needs 3.5 GiB (forecast + margin)"
    copy_runs(isolated_runs)
    assert decision() is None


WORKERS_RUN = "20261204-194223-quickstart-caab"  # dataloader_num_workers = 2
# its phases' (tree RSS - own RSS), largest at its steady steps and save: 1,599,778,816 - 641,265,664 =
# 958,513,152 for two workers: 479,256,576 each; its largest tree RSS (the measured peak): 1,599,778,816
WORKER_BYTES = 479_256_576
WORKERS_RUN_PEAK_RSS = 1_599_778_816


def host_forecast_of(run: Path) -> tuple[int, tuple[str, ...]]:
    """The host forecast `workbench estimate` makes for the run's own profile on the CPU."""
    from backend.estimate import estimate as forecast
    from backend.estimate.from_profile import request_from_profile, shape_from_profile
    from backend.profile import load_profile

    profile = load_profile(run / "profile.toml")
    request = request_from_profile(profile, shape_from_profile(profile, run), on_cpu=True)
    return forecast(shape_from_profile(profile, run), request).host_total_bytes, request.calibration


def test_data_loader_workers_are_calibrated_too(isolated_runs: Path) -> None:
    run = copy_runs(isolated_runs, (*THREE, WORKERS_RUN))[-1]
    host, lines = host_forecast_of(run)
    assert abs(host - WORKERS_RUN_PEAK_RSS) / WORKERS_RUN_PEAK_RSS < 0.20
    assert lines[2] == "data-loader worker: 0.45 GiB each measured over 1 run, 2 counted (not in the textbook terms)"
    assert host >= CALIBRATED_BASELINE + 2 * WORKER_BYTES


def test_workers_no_run_measured_keep_the_textbook_terms(isolated_runs: Path, tmp_path: Path) -> None:
    """Three runs without workers do not cover a run with two: a calibrated baseline alone would say 0.6 GiB
    for a run that takes 1.5 GiB (the dangerous direction), so the textbook terms stay, and it is said why."""
    copy_runs(isolated_runs)
    held_out = copy_runs(tmp_path / "held-out", (WORKERS_RUN,))[0]
    host, lines = host_forecast_of(held_out)
    assert host > WORKERS_RUN_PEAK_RSS
    assert lines[0] == (
        "textbook terms: 2 data-loader worker(s), and no finished run on this machine measured one "
        "yet; host baseline 3.0 GiB assumed"
    )


def test_a_run_trained_in_this_session_calibrates_the_forecast_of_its_own_size(
    isolated_runs: Path, short_lora_run: RunFolder
) -> None:
    """A real training of this session (4 LoRA steps of the quickstart) beside two recorded ones: three runs. The
    quickstart's host forecast lands within 20 % of what the session's run measured (its events, read here)."""
    shutil.copytree(
        short_lora_run.path, isolated_runs / short_lora_run.path.name, ignore=shutil.ignore_patterns("jobs")
    )
    copy_runs(isolated_runs, THREE[:2])
    events = [json.loads(line) for line in short_lora_run.events_path.read_text().splitlines() if line.strip()]
    measured = max(e.get("tree_rss_bytes") or e["rss_bytes"] for e in events if e["type"] == "memory_phase")
    data = estimate_json()
    assert abs(data["host_total_bytes"] - measured) / measured < 0.20
    assert "host baseline: " in data["request"]["calibration"][0]
    assert "measured over 3 runs on this machine" in data["request"]["calibration"][0]
    assert short_lora_run.path.name in data["request"]["calibration"][1]


def test_validate_holds_the_calibrated_host_forecast_to_the_machines_ram(isolated_runs: Path, tiny_model: Path) -> None:
    """Two CPU processes on a 2 GiB machine: the textbook says 2 x 3.0 GiB and refuses; this machine's runs say
    2 x 0.61 GiB, which fits."""
    from backend.core.paths import SHIPPED_PROFILES_DIR
    from backend.hardware.machine import HardwareInfo
    from backend.launch.validate import errors, validate
    from backend.profile import load_profile

    profile = load_profile(SHIPPED_PROFILES_DIR / "cpu-ddp-2proc.toml")
    small = HardwareInfo(nvml_error="test", cpu_count=2, ram_total_bytes=2 * GIB)

    def host_errors() -> list[str]:
        found = errors(validate(profile, small, base_dir=SHIPPED_PROFILES_DIR))
        return [p.message for p in found if "of host RAM" in p.message]

    assert host_errors() == [
        "the forecast needs about 6.0 GiB of host RAM on this machine (2 process(es)); it has 2.0 GiB."
    ]
    copy_runs(isolated_runs)
    assert host_errors() == []
