"""Golden prompts answered by a tracked job (#24): the base model (step 0) and each checkpoint answer the
profile's `[eval] prompts` greedily (temperature 0, a fixed seed, `[eval] max_new_tokens`), into
`<run>/golden/` (backend/golden/answers.py reads them).

A golden job is a job of the run (kind "golden", backend/jobs/job.py, the one job supervisor) whose
worker, `python -m backend.golden.job`, runs batch inference's worker (backend/inference/batch.py)
once per model it was given, each into a hidden partial file renamed into place when every prompt is
answered (a re-answer replaces the old file only then). A checkpoint deleted (rotated away) before its
turn is said "gone before answered" in the job's log and skipped: not an error.

Who starts them: `workbench golden RUN [--checkpoint N]` by hand, and the run's supervisor, whose
GoldenKeeper thread (started beside the watchdog) looks every few seconds for complete checkpoints
without answers and starts one job for all of them (and the base model, the first time) — while training goes on only when the forecast
says an inference copy of the model fits beside training (`inference_fits`), otherwise once the
trainer has ended. Never two golden jobs at once for a run (a lock over the check and the start).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.checkpoints.targets import ModelTarget, TargetError, from_checkpoint
from backend.core.collector import skip_last_collections
from backend.core.fs import file_lock, write_bytes_atomic
from backend.core.shell_words import flag_value
from backend.golden.answers import PROMPTS_COPY, answers_path, golden_dir
from backend.golden.prompts import PromptsError, prompts_path, read_prompts
from backend.hardware.machine import visible_devices_env
from backend.jobs.job import JobFolder, JobSpec, list_jobs, new_job_id, refresh_job, start_job
from backend.profile import ProfileError
from backend.rundir.layout import RunFolder
from backend.rundir.world import launch_base_dir

SEED = 42
KEEPER_POLL_SECONDS = 2.0
GONE = "gone before answered"


class GoldenRefused(Exception):
    """No golden job was started; the message says why and what to do."""


# ---------------------------------------------------------------- the job (no torch)


def prompts_of_run(run: RunFolder) -> Path:
    """The run's prompts: its copy in golden/ (made on first use from the profile's [eval] prompts, so later
    edits of that file do not mix two sets of prompts in one run)."""
    copy = golden_dir(run) / PROMPTS_COPY
    if copy.is_file():
        return copy
    try:
        profile = run.read_profile()
    except (ProfileError, OSError, ValueError) as err:
        raise GoldenRefused(f"run {run.run_id}: its profile.toml cannot be read ({err})") from None
    source = prompts_path(profile, launch_base_dir(run.world_path))
    if source is None:
        raise GoldenRefused(f"run {run.run_id} has no golden prompts: its profile sets no [eval] prompts "
                            "(a .jsonl of {\"messages\": [...]} rows) — set it for the next run")
    if not source.is_file():
        raise GoldenRefused(f"[eval] prompts: {source} does not exist (moved or deleted since the launch); put it "
                            f"back, or copy the prompts to {copy}")
    try:
        read_prompts(source)
    except PromptsError as err:
        raise GoldenRefused(f"[eval] prompts: {err}") from None
    copy.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(copy, source.read_bytes())
    return copy


def base_target(run: RunFolder) -> ModelTarget:
    """The model the run started from, as its command line names it (step 0 of the golden answers)."""
    argv = run.read_command().get("argv", [])
    model = flag_value(argv, "--model")
    if model is None:
        raise GoldenRefused(f"run {run.run_id}: its command.json names no --model, so the base model is unknown")
    return ModelTarget(model=model, model_type=flag_value(argv, "--model_type"), template=flag_value(argv, "--template"),
                       torch_dtype=flag_value(argv, "--torch_dtype"), label="base")


def active_golden_job(run: RunFolder) -> JobFolder | None:
    for job in list_jobs(run.jobs_dir, kind="golden"):
        try:
            if refresh_job(job).is_active:
                return job
        except (OSError, ValueError):
            continue
    return None


def missing_steps(run: RunFolder) -> list[int]:
    """Complete checkpoints (the run's one verdict, with its world size) still without answers."""
    return [verdict.step for verdict in run.checkpoint_verdicts()
            if verdict.step is not None and verdict.complete and not answers_path(run, verdict.step).is_file()]


@dataclass(frozen=True)
class GoldenPlan:
    base: bool  # answer with the base model too
    steps: tuple[int, ...]

    def labels(self) -> list[str]:
        return (["base"] if self.base else []) + [f"checkpoint-{s}" for s in self.steps]


def start_golden(run: RunFolder, *, steps: list[int] | None = None, base: bool | None = None,
                 note: str = "", gpu: int | None = None) -> JobFolder:
    """Start one golden job for `steps` (None: every complete checkpoint without answers) and the base model
    (None: when it has no answers yet), pinned to GPU `gpu` when given. GoldenRefused when there is nothing to
    answer or a golden job of the run is running already."""
    prompts = prompts_of_run(run)
    with file_lock(golden_dir(run) / ".golden.lock", wait=10):
        running = active_golden_job(run)
        if running is not None:
            raise GoldenRefused(f"a golden job of {run.run_id} is running already ({running.job_id}); one at a "
                                "time — wait for it (`workbench jobs`)")
        plan = GoldenPlan(not answers_path(run, None).is_file() if base is None else base,
                          tuple(missing_steps(run) if steps is None else steps))
        if not plan.base and not plan.steps:
            raise GoldenRefused(f"every checkpoint of {run.run_id} has its golden answers")
        job_id = new_job_id("golden")
        return start_job(run.jobs_dir, _spec(run, plan, prompts, note, gpu), job_id=job_id)


def _spec(run: RunFolder, plan: GoldenPlan, prompts: Path, note: str, gpu: int | None = None) -> JobSpec:
    try:
        max_new_tokens = run.read_profile().eval.max_new_tokens
    except (ProfileError, OSError, ValueError, AttributeError):
        max_new_tokens = 64
    targets: list[dict[str, Any]] = []
    if plan.base:
        targets.append({"label": "base", "step": None, "target": base_target(run).to_dict()})
    for step in plan.steps:
        targets.append({"label": f"checkpoint-{step}", "step": step, "checkpoint": str(_checkpoint(run, step))})
    argv = [sys.executable, "-m", "backend.golden.job", "--run", str(run.path), "--prompts", str(prompts),
            "--max-new-tokens", str(max_new_tokens), "--targets", json.dumps(targets)]
    env = visible_devices_env([gpu]) if gpu is not None else {}
    on_gpu = [f"on GPU {gpu} (CUDA_VISIBLE_DEVICES)"] if gpu is not None else []
    return JobSpec(kind="golden", description=f"golden prompts answered by {', '.join(plan.labels())}", argv=argv,
                   env=env, cwd=str(Path(__file__).resolve().parents[2]), output=str(golden_dir(run)),
                   notes=[f"prompts: {prompts}", f"greedy, seed {SEED}, max_new_tokens {max_new_tokens}",
                          *on_gpu, *([note] if note else [])])


def _checkpoint(run: RunFolder, step: int) -> Path:
    folder = run.output_dir / f"checkpoint-{step}"
    if folder.is_dir():
        return folder
    pinned = run.path / "pinned" / f"checkpoint-{step}"
    if pinned.is_dir():
        return pinned
    steps = ", ".join(p.name.split("-")[1] for p in run.checkpoints()) or "none"
    raise GoldenRefused(f"run {run.run_id} has no checkpoint-{step}; it has: {steps}")


# ---------------------------------------------------------------- the keeper (in the run's supervisor)


def inference_copy_bytes(forecast: dict[str, Any], on_gpu: bool) -> int | None:
    """Memory one inference copy of the model takes, from the run's forecast (forecast.json): its weights,
    adapter, activations and logits of an evaluation step, plus (GPU) the CUDA context or (CPU) a process's
    baseline. None when the forecast has no such figures."""
    eval_phase = next((p for p in forecast.get("timeline", []) if p.get("phase") == "eval"), None)
    if eval_phase is None:
        return None
    terms = eval_phase.get("gpu_terms", {})
    model = sum(int(terms.get(k, 0)) for k in ("weights", "weights_quantized", "adapter_weights", "activations",
                                                  "logits"))
    extra = terms.get("cuda_context", 0) if on_gpu else forecast.get("host_breakdown", {}).get("process_baseline", 0)
    return model + int(extra)


@dataclass(frozen=True)
class Fit:
    """Whether one inference copy fits beside the training now, why, and on which GPU (None: on the CPU)."""

    fits: bool
    why: str
    gpu: int | None = None


def inference_fits(run: RunFolder) -> Fit:
    """Whether one inference copy fits beside the training now. CPU: host RAM available (psutil); GPU: the
    forecast against NVML's free memory, the GPU chosen by nvitop's `select_devices` (the job is pinned to it:
    swift's default device map would take cuda:0, the training's)."""
    try:
        forecast = json.loads(run.forecast_path.read_text(encoding="utf-8"))
        device = run.read_profile().distribution.device
    except (ProfileError, OSError, ValueError) as err:
        return Fit(False, f"no forecast to judge by ({err}); answering after training")
    from backend.core.units import size
    from backend.hardware.gpu_choice import choose_gpus
    from backend.hardware.machine import detect_hardware

    hardware = detect_hardware()
    on_gpu = device == "cuda" or (device == "auto" and hardware.has_cuda)
    need = inference_copy_bytes(forecast, on_gpu)
    if need is None:
        return Fit(False, "the forecast has no evaluation phase; answering after training")
    if not on_gpu:
        import psutil

        have = psutil.virtual_memory().available
        fits = have >= need
        return Fit(fits, f"an inference copy needs about {size(need)}, {size(have)} host RAM available: "
                   + ("answering while training goes on" if fits else "answering after training"))
    chosen = choose_gpus(hardware.free_memory(), 1, need)
    if not chosen:
        free = [g.memory_free_bytes for g in hardware.gpus if g.memory_free_bytes is not None]
        most = f"{size(max(free))} free on the emptiest GPU (NVML)" if free else "NVML tells no free GPU memory"
        return Fit(False, f"an inference copy needs about {size(need)}, {most}: answering after training")
    gpu = chosen[0]
    info = hardware.gpu(gpu)
    free_now = f"{size(info.memory_free_bytes)} free on GPU {gpu}" if info and info.memory_free_bytes is not None \
        else f"GPU {gpu} has room"
    return Fit(True, f"an inference copy needs about {size(need)}, {free_now} (NVML): answering on GPU {gpu} while "
                     "training goes on", gpu)


class GoldenKeeper:
    """A thread of the run's supervisor: starts golden jobs for new complete checkpoints (one job at a time)
    and, once the trainer has ended, one last job for those still missing."""

    def __init__(self, run: RunFolder, say: Callable[[str], None]) -> None:
        self.run, self.say = run, say
        self.ended = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="golden-keeper", daemon=True)
        self.fits: bool | None = None  # the last verdict
        self.said = ""  # the last verdict said in the run's log (said again only when it changes)

    def start(self) -> GoldenKeeper:
        self.thread.start()
        return self

    def _loop(self) -> None:
        while not self.ended.wait(KEEPER_POLL_SECONDS):
            self._tick(training=True)

    def _tick(self, training: bool) -> JobFolder | None:
        if active_golden_job(self.run) is not None:
            return None
        # the base model is answered with the first checkpoint (one job, one start-up), or after training
        if not missing_steps(self.run) and (training or answers_path(self.run, None).is_file()):
            return None
        gpu = None
        if training:  # judged again at every start: free memory changes while training goes on
            fit = inference_fits(self.run)
            if fit.why != self.said:
                self.say(f"golden prompts: {fit.why}")
                self.said = fit.why
            self.fits = fit.fits
            if not fit.fits:
                return None
            gpu = fit.gpu
        try:
            job = start_golden(self.run, note="started by the run's supervisor"
                               + ("" if training else " after training ended"), gpu=gpu)
        except GoldenRefused:
            return None
        self.say(f"golden prompts: job {job.job_id} started ({job.read_spec().description})")
        return job

    def finish(self, timeout: float | None = None) -> None:
        """The trainer ended: wait for a golden job still running, then start one for the checkpoints left."""
        self.ended.set()
        self.thread.join()
        deadline = None if timeout is None else time.monotonic() + timeout
        while active_golden_job(self.run) is not None:
            if deadline is not None and time.monotonic() > deadline:
                return
            time.sleep(0.5)
        self._tick(training=False)


def start_keeper(run: RunFolder, say: Callable[[str], None]) -> GoldenKeeper | None:
    """The golden keeper of a run whose profile sets [eval] prompts; None otherwise."""
    try:
        if not run.read_profile().eval.prompts:
            return None
        prompts_of_run(run)  # copied now: what the profile named at launch
    except (GoldenRefused, ProfileError, OSError, ValueError) as err:
        say(f"golden prompts: not answered: {err}")
        return None
    return GoldenKeeper(run, say).start()


# ---------------------------------------------------------------- the worker (own subprocess)


def run_worker(args: argparse.Namespace) -> None:
    from backend.inference import batch as batch_infer

    run = RunFolder(args.run)
    targets = json.loads(args.targets)
    for number, item in enumerate(targets, start=1):
        out = answers_path(run, item["step"])
        partial = out.with_name(f".{out.name}.partial")
        label = item["label"]
        print(f"workbench: golden {number}/{len(targets)}: {label}", flush=True)
        try:
            target = ModelTarget.from_dict(item["target"]) if "target" in item else \
                from_checkpoint(Path(item["checkpoint"]), label=label)
        except (TargetError, OSError, ValueError):
            if "checkpoint" in item and not Path(item["checkpoint"]).is_dir():
                print(f"workbench: {label}: {GONE} (deleted, rotated away by save_total_limit)", flush=True)
                continue
            raise
        partial.unlink(missing_ok=True)
        worker_args = batch_infer.parse_args([*target.worker_args(), "--dataset", args.prompts, "--out", str(partial),
                                              "--max-new-tokens", str(args.max_new_tokens), "--temperature", "0",
                                              "--batch-size", "4"])
        _seed(SEED)
        try:
            batch_infer.run_worker(worker_args)
        except Exception:
            if "checkpoint" in item and not Path(item["checkpoint"]).is_dir():
                partial.unlink(missing_ok=True)
                print(f"workbench: {label}: {GONE} (deleted while it was loaded)", flush=True)
                continue
            raise
        os.replace(partial, out)
        print(f"workbench: {label}: answers written to {out}", flush=True)


def _seed(seed: int) -> None:
    import random

    import torch

    random.seed(seed)
    torch.manual_seed(seed)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="workbench golden prompts: answers per checkpoint")
    parser.add_argument("--run", required=True)
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--targets", required=True)
    return parser.parse_args(argv)


if __name__ == "__main__":
    skip_last_collections()  # torch and swift loaded: the end takes ~1.5 s less (backend/core/collector.py)
    run_worker(parse_args())
