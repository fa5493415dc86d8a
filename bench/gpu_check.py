"""GPU check: short real trainings through the workbench on one NVIDIA GPU, predicted vs measured.

Run it from the repository root on a machine with one NVIDIA GPU (no internet needed):

    .venv/bin/python bench/gpu_check.py                  # all five cases, about 5 to 8 minutes
    .venv/bin/python bench/gpu_check.py --only lora-bf16,fp16-loss-scale
    .venv/bin/python bench/gpu_check.py --dry-run        # any machine: build profiles + commands, validate, predict
    .venv/bin/python bench/gpu_check.py --cpu-smoke      # any machine: the whole path once, tiny model on CPU

What it needs there: the workbench's venv with a CUDA build of torch, ms-swift, accelerate, peft
and bitsandbytes. On a machine without internet, missing packages travel as wheels: where pip
works, `pip download --only-binary=:all: -d wheels NAME==VERSION` (with `--platform`/
`--python-version` of the GPU machine), copy `wheels/` over, then
`pip install --no-index --find-links wheels NAME`. Nothing is downloaded at run time: the
models are random-initialised Qwen2-0.5B and Qwen2-1.5B of the real shapes (configs below)
with the workbench's offline tokenizer, built once into the cache (under a minute on a GPU),
and the data set is generated text, truncated to exactly `max_length` tokens a row.

Cases, each a real run started with `backend.runs.start.start_run` (as `workbench run` does):
  lora-bf16        Qwen2-1.5B, LoRA r=8 on all linear layers, bf16
  qlora-4bit       Qwen2-1.5B, QLoRA NF4 with double quantisation, bf16 compute
  full-bf16        Qwen2-0.5B, full fine-tune, bf16
  fp16-loss-scale  Qwen2-0.5B, LoRA on fp32 weights with fp16 autocast and a real dynamic loss
                   scale; an overflow is injected at step 10, so the scale must halve there
  fsdp-1proc       Qwen2-0.5B, full fine-tune under FSDP2 (FULL_SHARD) with one process, bf16

Output: `bench/results/gpu-check-YYYY-MM-DD-<gpu>.md`, a table of the planner's predicted peak
GPU memory per device (the run's forecast.json) against the measured peak (torch's
max_memory_reserved, from the run's events), steps per second, loss first -> last and the loss
scale, with the date and the GPU's name. Commit that file whenever the check has run on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from backend.contract.events import EventReader, Log  # noqa: E402
from backend.hardware.machine import GpuInfo, HardwareInfo, detect_hardware, pick_gpus  # noqa: E402
from backend.launch.command import build_launch  # noqa: E402
from backend.launch.validate import errors, validate  # noqa: E402
from backend.profile import LaunchProfile, save_profile  # noqa: E402
from backend.rundir.layout import RunFolder  # noqa: E402

GIB = 2**30
RESULTS_DIR = REPO / "bench" / "results"
BUILD_VERSION = 1

_QWEN2_COMMON: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu", "vocab_size": 151936,
    "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 32768, "tie_word_embeddings": True,
    "attention_dropout": 0.0, "use_sliding_window": False, "initializer_range": 0.02, "torch_dtype": "bfloat16",
}
# the real shapes of Qwen/Qwen2-0.5B and Qwen/Qwen2-1.5B (their config.json); weights are random
MODEL_CONFIGS: dict[str, dict[str, Any]] = {
    "qwen2-0.5b": {**_QWEN2_COMMON, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                   "num_attention_heads": 14, "num_key_value_heads": 2, "max_window_layers": 24},
    "qwen2-1.5b": {**_QWEN2_COMMON, "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
                   "num_attention_heads": 12, "num_key_value_heads": 2, "max_window_layers": 28},
}


@dataclass(frozen=True)
class Case:
    name: str
    model: str
    what: str
    sections: dict[str, dict[str, Any]]
    debug: dict[str, Any] = field(default_factory=dict)


CASES: list[Case] = [
    Case("lora-bf16", "qwen2-1.5b", "LoRA r=8, bf16",
         {"tuner": {"type": "lora", "lora_rank": 8}, "precision": {"bf16": True},
          "model": {"torch_dtype": "bfloat16"}}),
    Case("qlora-4bit", "qwen2-1.5b", "QLoRA NF4, bf16 compute",
         {"tuner": {"type": "qlora", "quant_method": "bnb", "quant_bits": 4, "bnb_4bit_compute_dtype": "bfloat16"},
          "precision": {"bf16": True}, "model": {"torch_dtype": "bfloat16"}}),
    Case("full-bf16", "qwen2-0.5b", "full fine-tune, bf16",
         {"tuner": {"type": "full"}, "precision": {"bf16": True}, "model": {"torch_dtype": "bfloat16"},
          "training": {"learning_rate": 1e-5}}),
    Case("fp16-loss-scale", "qwen2-0.5b", "LoRA, fp32 weights, fp16 autocast + dynamic loss scale",
         {"tuner": {"type": "lora", "lora_rank": 8}, "precision": {"fp16": True},
          "model": {"torch_dtype": "float32"}},
         debug={"inject_overflow_steps": [10]}),
    Case("fsdp-1proc", "qwen2-0.5b", "full fine-tune, FSDP2 FULL_SHARD, 1 process, bf16",
         {"tuner": {"type": "full"}, "precision": {"bf16": True}, "model": {"torch_dtype": "bfloat16"},
          "training": {"learning_rate": 1e-5, "gradient_checkpointing": False},
          "distribution": {"strategy": "fsdp", "fsdp": {"version": 2, "activation_checkpointing": True,
                                                        "state_dict_type": "FULL_STATE_DICT"}}}),
]
SMOKE_CASE = Case("cpu-smoke-lora", "builtin:tiny-qwen2", "LoRA on the embedded tiny model, CPU, fp32",
                  {"tuner": {"type": "lora", "lora_rank": 8}, "model": {"torch_dtype": "float32"},
                   "distribution": {"device": "cpu"}, "training": {"gradient_checkpointing": False}})


@dataclass
class Settings:
    steps: int = 30
    batch_size: int = 4
    max_length: int = 1024
    logging_steps: int = 5
    timeout_s: float = 240.0


# ---------------------------------------------------------------- models and data


def model_dir(root: Path, name: str) -> Path:
    return root / "models" / f"{name}-random-v{BUILD_VERSION}"


def write_config_only(target: Path, name: str) -> Path:
    """A model folder with config.json alone: enough to build commands and forecasts."""
    target.mkdir(parents=True, exist_ok=True)
    (target / "config.json").write_text(json.dumps(MODEL_CONFIGS[name], indent=2), encoding="utf-8")
    return target


def ensure_model(root: Path, name: str) -> Path:
    """The random-initialised model folder, built in a child process (so no CUDA memory stays here)."""
    target = model_dir(root, name)
    if (target / "model.safetensors").exists() or any(target.glob("model-*.safetensors")):
        return target
    started = time.monotonic()
    subprocess.run([sys.executable, __file__, "--build-model", name, "--out", str(target)], check=True, cwd=REPO)
    print(f"  built {name} in {time.monotonic() - started:.0f} s", flush=True)
    return target


def build_model(name: str, out: Path) -> None:
    """Random weights of the real shape in bf16 (initialised on the GPU when there is one)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from backend.models.demo.build import build_tokenizer

    tokenizer = build_tokenizer(2000)
    values = {k: v for k, v in MODEL_CONFIGS[name].items() if k not in ("architectures", "model_type")}
    config = Qwen2Config(**values, bos_token_id=None, eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
                         pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"))
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen2ForCausalLM(config)
    staging = out.with_name(out.name + ".partial")
    model.save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)
    staging.rename(out)


WORDS = ("the quick brown fox jumps over lazy dog what is your name who made you can help me with question "
         "hello how are today thank very much please tell more one two three four five six seven eight").split()


def write_dataset(path: Path, rows: int = 64, words_per_row: int = 1500) -> Path:
    """Rows longer than max_length: with truncation 'right' every sequence is exactly max_length long."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for row in range(rows):
        answer = " ".join(WORDS[(row * 7 + i * i) % len(WORDS)] for i in range(words_per_row))
        messages = [{"role": "user", "content": f"Tell me story number {row}."},
                    {"role": "assistant", "content": answer}]
        lines.append(json.dumps({"messages": messages}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# ---------------------------------------------------------------- profiles


def case_profile(case: Case, model: str, dataset: Path, settings: Settings, gpu_ids: list[int]) -> LaunchProfile:
    """The case's launch profile; everything not named keeps the profile defaults."""
    data: dict[str, Any] = {
        "name": f"gpu-check-{case.name}",
        "description": f"bench/gpu_check.py: {case.what}",
        "model": {"source": model, "model_type": "qwen2", "template": "qwen"},
        "data": {"train": [str(dataset)]},
        "distribution": {"device": "cuda", "gpu_ids": gpu_ids},
        "training": {"max_steps": settings.steps, "per_device_train_batch_size": settings.batch_size,
                     "max_length": settings.max_length, "logging_steps": settings.logging_steps,
                     "save_steps": 100_000, "eval_steps": 100_000, "num_train_epochs": 100.0},
        # every row is cut to max_length (swift's default drops longer rows); no checkpoint is written
        "extra_swift_args": {"truncation_strategy": "right", "save_strategy": "no"},
        "debug": dict(case.debug),
    }
    for section, values in case.sections.items():
        data[section] = {**data.get(section, {}), **values}
    return LaunchProfile.model_validate(data)


def dry_run_hardware() -> HardwareInfo:
    gpu = GpuInfo(index=0, name="dry run (an 80 GB Hopper GPU)", memory_total_bytes=80 * GIB,
                  memory_used_bytes=0, compute_capability=(9, 0))
    return HardwareInfo(gpus=(gpu,), cuda_driver_version=(12, 4))


def predicted_bytes(profile: LaunchProfile, model: Path) -> tuple[int | None, str | None]:
    """The planner's per-device peak for this profile, as start_run stores it in forecast.json."""
    try:
        from backend.estimate.forecast import forecast_for_profile

        forecast = forecast_for_profile(profile, model)
    except Exception as err:  # a missing forecast must not stop the check
        return None, str(err)
    return forecast.get("per_device_total_bytes"), None


# ---------------------------------------------------------------- running


def run_case(profile: LaunchProfile, workspace: Path, timeout_s: float) -> RunFolder:
    """Start the run as `workbench run` does and wait for its end (stopping it at the timeout)."""
    from backend.runs.start import start_run
    from backend.runs.status import refresh
    from backend.runs.stop import stop_run

    run = start_run(profile, workspace=workspace)
    deadline = time.monotonic() + timeout_s
    while refresh(run).is_active:
        if time.monotonic() > deadline:
            stop_run(run)
            break
        time.sleep(1.0)
    return run


@dataclass
class Row:
    case: str
    what: str
    model: str
    status: str
    predicted_bytes: int | None = None
    measured_reserved_bytes: int | None = None
    measured_allocated_bytes: int | None = None
    steps_per_second: float | None = None
    tokens_per_second: float | None = None
    loss_first: float | None = None
    loss_last: float | None = None
    loss_scales: list[float] = field(default_factory=list)
    overflow_count: int | None = None
    note: str = ""

    @property
    def error_percent(self) -> float | None:
        if not self.predicted_bytes or not self.measured_reserved_bytes:
            return None
        return 100.0 * (self.predicted_bytes - self.measured_reserved_bytes) / self.measured_reserved_bytes


def collect(run: RunFolder, case: Case, model: str) -> Row:
    """Predicted vs measured from a finished run folder: forecast.json and events.jsonl."""
    from backend.runs.memory_report import measured_peaks

    state = run.read_state()
    row = Row(case.name, case.what, model, state.status, note=state.failure_reason or "")
    try:
        forecast = json.loads(run.forecast_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        forecast = {}
    row.predicted_bytes = forecast.get("per_device_total_bytes")
    if forecast.get("error") and not row.note:
        row.note = forecast["error"]
    peaks = measured_peaks(run)
    row.measured_reserved_bytes = peaks["cuda_max_reserved_bytes"]
    row.measured_allocated_bytes = peaks["cuda_max_allocated_bytes"]
    logs = [e for e in EventReader(run.events_path).read_new() if isinstance(e, Log) and e.rank == 0]
    speeds = [e.steps_per_second for e in logs[1:] if e.steps_per_second]  # the first holds warm-up
    tokens = [e.tokens_per_second for e in logs[1:] if e.tokens_per_second]
    row.steps_per_second = statistics.median(speeds) if speeds else None
    row.tokens_per_second = statistics.median(tokens) if tokens else None
    losses = [e.loss for e in logs if e.loss is not None]
    row.loss_first, row.loss_last = (losses[0], losses[-1]) if losses else (None, None)
    row.loss_scales = [e.loss_scale for e in logs if e.loss_scale is not None]
    row.overflow_count = logs[-1].overflow_count if logs else None
    return row


# ---------------------------------------------------------------- report


def _gib(value: int | None) -> str:
    return "-" if value is None else f"{value / GIB:.2f}"


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _scale(row: Row) -> str:
    if not row.loss_scales:
        return "-"
    return f"{row.loss_scales[0]:g} -> {row.loss_scales[-1]:g} ({row.overflow_count or 0} overflow)"


def render_report(rows: list[Row], gpu: str, day: str, settings: Settings, extra: list[str]) -> str:
    header = ("| case | model | what | status | predicted peak GiB | measured peak reserved GiB "
              "| (allocated) | error | steps/s | tokens/s | loss first -> last | loss scale |")
    lines = [
        f"# GPU check, {day}, {gpu}",
        "",
        f"`bench/gpu_check.py`: {settings.steps} steps each, batch {settings.batch_size} x {settings.max_length} "
        "tokens, gradient checkpointing on (FSDP: its own activation checkpointing), one GPU.",
        "Predicted: the planner's per-device total (forecast.json). Measured: torch max_memory_reserved "
        "(and max_memory_allocated) from the run's events. Error = (predicted - measured) / measured.",
        *extra,
        "",
        header,
        "|" + "---|" * header.count(" | ") + "---|",
    ]
    for r in rows:
        error = "-" if r.error_percent is None else f"{r.error_percent:+.0f}%"
        loss = f"{_num(r.loss_first, 3)} -> {_num(r.loss_last, 3)}"
        lines.append(f"| {r.case} | {r.model} | {r.what} | {r.status} | {_gib(r.predicted_bytes)} "
                     f"| {_gib(r.measured_reserved_bytes)} | {_gib(r.measured_allocated_bytes)} | {error} "
                     f"| {_num(r.steps_per_second)} | {_num(r.tokens_per_second, 0)} | {loss} | {_scale(r)} |")
    notes = [f"- {r.case}: {r.note}" for r in rows if r.note]
    if notes:
        lines += ["", "Notes:", *notes]
    return "\n".join(lines) + "\n"


def report_path(out_dir: Path, day: str, gpu: str) -> Path:
    slug = re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-") or "gpu"
    return out_dir / f"gpu-check-{day}-{slug}.md"


# ---------------------------------------------------------------- main


def selected_cases(only: str | None) -> list[Case]:
    if not only:
        return CASES
    names = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in names if n not in {c.name for c in CASES}]
    if unknown:
        raise SystemExit(f"--only: unknown case(s) {unknown}; known: {', '.join(c.name for c in CASES)}")
    return [c for c in CASES if c.name in names]


def dry_run(cases: list[Case], work: Path, settings: Settings) -> int:
    """Build every case's profile and exact command against an assumed one-GPU machine; validate."""
    hardware = dry_run_hardware()
    dataset = write_dataset(work / "data" / "long_rows.jsonl", rows=4)
    failed = 0
    for case in cases:
        model = write_config_only(work / "config-only" / case.model, case.model)
        profile = case_profile(case, str(model), dataset, settings, gpu_ids=[0])
        save_profile(profile, work / "profiles" / f"{case.name}.toml")
        problems = validate(profile, hardware)
        plan = build_launch(profile, work / "runs" / case.name, hardware)
        plan.write_configs()
        predicted, why = predicted_bytes(profile, model)
        failed += bool(errors(problems))
        print(f"## {case.name}: {case.what} ({case.model})")
        print(f"predicted peak per GPU: {_gib(predicted)} GiB" + (f" ({why})" if why else ""))
        for problem in problems:
            print(f"{problem.severity}: {problem}")
        print(plan.shell_line())
    print(f"dry run: {len(cases)} case(s), {failed} with validation errors")
    return 1 if failed else 0


def real_run(cases: list[Case], work: Path, out_dir: Path, settings: Settings, *, smoke: bool) -> Path:
    hardware = detect_hardware()
    if smoke:
        gpu_name, gpu_ids = "CPU smoke test (no GPU)", []
    else:
        if not hardware.gpus:
            raise SystemExit(f"no NVIDIA GPU: {hardware.describe()}; use --dry-run or --cpu-smoke here")
        gpu_ids = pick_gpus(hardware, 1)
        gpu = hardware.gpu(gpu_ids[0])
        gpu_name = f"{gpu.name} ({_gib(gpu.memory_total_bytes)} GiB)" if gpu else "GPU"
    dataset = write_dataset(work / "data" / "long_rows.jsonl")
    rows: list[Row] = []
    started = time.monotonic()
    day = date.today().isoformat()
    path = report_path(out_dir, day, gpu_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    for case in cases:
        print(f"{case.name}: {case.what} ...", flush=True)
        try:
            model = case.model if case.model.startswith("builtin:") else str(ensure_model(work, case.model))
            profile = case_profile(case, model, dataset, settings, gpu_ids=gpu_ids)
            if smoke:
                profile.distribution.gpu_ids = []
            run = run_case(profile, work / "runs", settings.timeout_s)
            rows.append(collect(run, case, case.model.removeprefix("builtin:")))
            print(f"  {rows[-1].status}: {run.path}", flush=True)
        except Exception as err:  # one case that cannot start must not hide the others' results
            rows.append(Row(case.name, case.what, case.model, "not started", note=f"{type(err).__name__}: {err}"))
            print(f"  not started: {err}", flush=True)
        # written after every case: a check cut short by the machine's time limit keeps what it measured
        extra = [f"Driver {hardware.driver_version}, CUDA driver API {hardware.cuda_driver_version}; "
                 f"{len(rows)} of {len(cases)} case(s) in {time.monotonic() - started:.0f} s."] if hardware.gpus else []
        path.write_text(render_report(rows, gpu_name, day, settings, extra), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="build profiles and commands only (no GPU needed)")
    parser.add_argument("--cpu-smoke", action="store_true", help="run the whole path once on CPU, tiny model")
    parser.add_argument("--only", help="comma-separated case names")
    parser.add_argument("--steps", type=int, default=Settings.steps)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="folder for the markdown table")
    parser.add_argument("--work-dir", type=Path, default=None, help="models, data and runs (default: cache)")
    parser.add_argument("--build-model", help=argparse.SUPPRESS)  # child of ensure_model: --out is the folder
    args = parser.parse_args(argv)
    if args.build_model:
        build_model(args.build_model, args.out.resolve())
        return 0
    from backend.core.paths import cache_dir

    work = (args.work_dir or cache_dir() / "gpu-check").resolve()
    if args.cpu_smoke:
        settings = Settings(steps=args.steps if args.steps != Settings.steps else 4, batch_size=1, max_length=128,
                            logging_steps=1, timeout_s=180.0)
        path = real_run([SMOKE_CASE], work, args.out, settings, smoke=True)
        print(f"wrote {path}")
        return 0
    settings = Settings(steps=args.steps)
    cases = selected_cases(args.only)
    if args.dry_run:
        return dry_run(cases, work, settings)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    path = real_run(cases, work, args.out, settings, smoke=False)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
