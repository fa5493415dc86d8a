"""The flight recorder (#39): the launch turns it on for several processes (off by the profile's
[watch] flight_recorder = false, a value in [env] wins), and the dumps read as "the first collective where the
ranks part, and who is missing". Dumps written by hand in the shape PyTorch 2.13's gloo recorder writes them
(pg_status, entries with collective_seq_id / profiling_name / state)."""

from __future__ import annotations

from pathlib import Path

from backend.contract.flight_recorder import flight_recorder_env
from backend.core.paths import SHIPPED_PROFILES_DIR
from backend.hang.flight_recorder import analyse, torch_analysis
from backend.launch.command import build_launch
from backend.profile import LaunchProfile, load_profile
from tests.fakes import CPU_BOX


def _entry(seq: int, state: str, name: str = "gloo:all_reduce") -> dict:
    return {"pg_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": seq, "profiling_name": name,
            "input_sizes": [[4]], "state": state, "is_p2p": False}


def _dump(enqueued: int, completed: int, entries: list[dict]) -> dict:
    return {"version": "2.10", "pg_status": {"0": {"last_enqueued_collective": enqueued,
                                                  "last_started_collective": -1,
                                                  "last_completed_collective": completed}},
            "entries": entries}


def test_the_rank_missing_from_the_collective_is_named() -> None:
    dumps = {0: _dump(3, 2, [_entry(1, "completed"), _entry(2, "completed"), _entry(3, "scheduled")]),
             1: _dump(2, 2, [_entry(1, "completed"), _entry(2, "completed")])}
    report = analyse(dumps)
    assert report.missing == [1]
    assert report.render() == (
        "Flight recorder:\n"
        "  process group 0: last enqueued/completed collective: rank 0 3/2, rank 1 2/2\n"
        "  the ranks part at collective 3 (gloo:all_reduce, sizes [[4]], scheduled): rank 1 never issued it; "
        "rank 0 did and waits in it")


def test_every_rank_in_the_same_stuck_collective_blames_the_collective() -> None:
    dumps = {k: _dump(7, 6, [_entry(7, "started", "nccl:broadcast")]) for k in (0, 1)}
    report = analyse(dumps)
    assert report.missing == []
    assert report.lines[-1] == ("every rank issued collective 7 (nccl:broadcast, sizes [[4]], started) and none "
                                "completed it: the collective itself is stuck, not a rank")


def _plan_env(tmp_path: Path, **changes: object) -> dict[str, str]:
    data = load_profile(SHIPPED_PROFILES_DIR / "cpu-ddp-2proc.toml").model_dump()
    for section, values in changes.items():
        if isinstance(values, dict) and isinstance(data.get(section), dict):
            data[section].update(values)
    profile = LaunchProfile.model_validate(data)
    return build_launch(profile, tmp_path / "run", CPU_BOX, base_dir=SHIPPED_PROFILES_DIR).env


def test_the_launch_turns_the_recorder_on_for_several_processes(tmp_path: Path) -> None:
    env = _plan_env(tmp_path)
    prefix = str(tmp_path / "run" / "watch" / "flight_recorder" / "rank_")
    assert {k: env[k] for k in env if k.startswith("TORCH_")} == {
        "TORCH_FR_BUFFER_SIZE": "2000", "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_FR_DUMP_TEMP_FILE": prefix, "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": prefix}
    assert not any(k.startswith("TORCH_") for k in _plan_env(tmp_path, watch={"flight_recorder": False}))
    assert not any(k.startswith("TORCH_") for k in _plan_env(tmp_path, distribution={"nproc_per_node": 1,
                                                                                     "strategy": "single"}))
    assert _plan_env(tmp_path, env={"TORCH_FR_BUFFER_SIZE": "64"})["TORCH_FR_BUFFER_SIZE"] == "64"


def test_the_names_are_the_installed_torchs() -> None:
    """Every variable the launch sets is one the installed torch reads (its C++ library or its Python code),
    but NCCL's dump-on-timeout, which only a CUDA build holds."""
    import torch

    lib = Path(torch.__file__).parent / "lib"
    text = b"".join(p.read_bytes() for p in lib.glob("libtorch*.so*"))
    text += (Path(torch.__file__).parent / "distributed" / "distributed_c10d.py").read_bytes()
    cuda_only = {"TORCH_NCCL_DUMP_ON_TIMEOUT"}
    missing = {name for name in flight_recorder_env(Path("/run")) if name.encode() not in text}
    if torch.cuda.is_available() or torch.version.cuda:
        cuda_only = set()
    assert missing <= cuda_only, missing


def test_no_torch_dumps_means_no_torch_analysis(tmp_path: Path) -> None:
    assert torch_analysis(tmp_path) is None
