"""Memory per phase on a real GPU: the planner's forecast beside what the run measured (#26).

Runs the quickstart profile on CUDA (the embedded tiny model) for a few steps with an evaluation and a
save, and, when one is in the local Hugging Face cache, a ~0.5-1.5B model the same way (LoRA, bf16, 512
tokens a row). For each run it prints `workbench status`'s per-phase lines: each phase of the timeline
(load, first step, optimizer step, steady steps, eval, save) with the forecast, the measurement (torch's
peaks reset per phase, NVML's used memory, the process tree's RSS) and the error.

    .venv/bin/python bench/memory_phases_gpu.py            # needs an NVIDIA GPU (a few minutes)
    .venv/bin/python bench/memory_phases_gpu.py --cpu      # any machine: the tiny model on CPU, host RSS only
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from backend.core.paths import SHIPPED_PROFILES_DIR  # noqa: E402
from backend.models.refs import hf_cached_ids  # noqa: E402
from backend.profile import LaunchProfile, load_profile  # noqa: E402
from backend.rundir.layout import RunFolder  # noqa: E402
from backend.runs.memory_report import memory_comparison  # noqa: E402
from backend.runs.status import refresh  # noqa: E402
from bench.gpu_check import run_case  # noqa: E402

# small real models tried from the local cache, first found wins (nothing is downloaded)
CACHED_CANDIDATES = ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-1.5B-Instruct",
                     "Qwen/Qwen2.5-1.5B", "Qwen/Qwen2-0.5B-Instruct", "Qwen/Qwen2-1.5B-Instruct")
SHORT = {"max_steps": 6, "eval_steps": 3, "save_steps": 3, "logging_steps": 1}


def quickstart(device: str) -> LaunchProfile:
    """The quickstart, a few steps with an evaluation and a save, on CUDA (GPU 0) or the CPU."""
    data: dict[str, Any] = load_profile(SHIPPED_PROFILES_DIR / "quickstart.toml").model_dump()
    data["name"] = f"memory-phases-{device}"
    data["training"].update(SHORT)
    data["data"]["split_dataset_ratio"] = 0.2
    data["distribution"].update({"device": device, "gpu_ids": [0] if device == "cuda" else []})
    return LaunchProfile.model_validate(data)


def cached_model() -> str | None:
    cached = set(hf_cached_ids())
    return next((ref for ref in CACHED_CANDIDATES if ref in cached), None)


def real_model(ref: str) -> LaunchProfile:
    """A cached ~0.5-1.5B model: LoRA on all linear layers, bf16, the quickstart's data cut to 512 tokens."""
    profile = quickstart("cuda")
    data = profile.model_dump()
    data["name"] = "memory-phases-" + ref.split("/")[-1].lower()
    data["model"] = {"source": ref}
    data["precision"] = {"bf16": True}
    data["training"]["max_length"] = 512
    return LaunchProfile.model_validate(data)


def phase_lines(profile: LaunchProfile, workspace: Path, timeout_s: float) -> tuple[str, list[str]]:
    run: RunFolder = run_case(profile, workspace, timeout_s)
    return refresh(run).status, memory_comparison(run)["lines"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", action="store_true", help="the tiny model on CPU (host RSS per phase only)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run before it is stopped")
    args = parser.parse_args(argv)
    profiles = [quickstart("cpu" if args.cpu else "cuda")]
    model = None if args.cpu else cached_model()
    if model:
        profiles.append(real_model(model))
    elif not args.cpu:
        print(f"no cached 0.5-1.5B model (tried {', '.join(CACHED_CANDIDATES)}): the embedded model only")
    failed = 0
    with tempfile.TemporaryDirectory(prefix="memory-phases-") as work:
        for profile in profiles:
            status, lines = phase_lines(profile, Path(work), args.timeout)
            print(f"\n== {profile.name} ({profile.model.source}): {status}")
            print("\n".join(lines))
            failed += status != "finished"
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
