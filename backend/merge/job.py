"""Merge a LoRA checkpoint into its base model with `swift export --merge_lora true`, as a job.

Nothing is ever overwritten. The default output is a new folder of the run,
`<run>/merged/checkpoint-N-merged`; an existing one is refused unless `replace=True`. swift
always writes into a hidden temporary folder beside the target, and the job's supervisor
moves it into place only once the export succeeded, so a target folder is either absent,
the old model, or the complete new one. With `replace=True` the old folder is removed
only after the new one is in place.

A merged model is a first-class model afterwards: `workbench_model.json` in its folder
records where it came from (run, checkpoint, base model, model_type, template), and
`merged_models()` (backend/checkpoints/merged.py) lists every one of them for model pickers.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from backend.checkpoints.merged import MERGED_DIR_NAME, MODEL_RECORD
from backend.checkpoints.targets import TargetError, choose_checkpoint, is_adapter_checkpoint, read_checkpoint_args
from backend.core.fs import write_text_atomic
from backend.core.units import MIB
from backend.jobs.job import JobFinishError, JobFolder, JobSpec, MergeFinish, list_jobs, refresh_job, start_job
from backend.rundir.layout import RunFolder

# swift export's log lines, in order: what the merge is doing now
PROGRESS_MARKERS: list[tuple[str, float, str]] = [
    ("Loading weights", 0.3, "loading the base model and the adapter"),
    ("Merge LoRA...", 0.6, "merging the LoRA into the weights"),
    ("Saving merged weights...", 0.8, "saving the merged model"),
    ("Successfully merged LoRA", 0.95, "saved; moving into place"),
]
# model arguments a QLoRA merge passes itself (it cannot let swift load them: see _qlora_args)
QLORA_MODEL_ARGS = ("model", "model_type", "template", "torch_dtype", "model_revision")


class MergeRefused(Exception):
    """The merge was not started; the message says why and what to do instead."""


@dataclass
class MergePlan:
    run_id: str
    checkpoint: Path
    target: Path
    temp_dir: Path
    replace: bool
    argv: list[str]
    record: dict[str, Any]
    notes: list[str]

    def to_spec(self, cwd: Path) -> JobSpec:
        return JobSpec(
            kind="merge", description=f"merge {self.checkpoint.name} of {self.run_id} into {self.target}",
            argv=self.argv, cwd=str(cwd), output=str(self.target), progress_markers=PROGRESS_MARKERS,
            finish=MergeFinish(temp=str(self.temp_dir), target=str(self.target), replace=self.replace,
                               record=self.record),
            notes=self.notes,
        )


def default_target(run: RunFolder, checkpoint: Path) -> Path:
    return run.path / MERGED_DIR_NAME / f"{checkpoint.name}-merged"


def plan_merge(run: RunFolder, checkpoint: int | None = None, *, output: Path | None = None,
               replace: bool = False) -> MergePlan:
    """Check everything and build the export command; raises MergeRefused, writes nothing."""
    try:
        found, why = choose_checkpoint(run, checkpoint)
    except TargetError as err:
        raise MergeRefused(str(err)) from None
    _check_checkpoint(found)
    target = Path(output).expanduser().resolve() if output else default_target(run, found)
    _check_target(run, target, replace)
    args = read_checkpoint_args(found)
    temp = target.parent / f".{target.name}.partial-{secrets.token_hex(3)}"
    argv = [sys.executable, "-m", "swift.cli.export", "--adapters", str(found), "--merge_lora", "true",
            "--output_dir", str(temp), *_qlora_args(args)]
    record = {
        "kind": "merged-lora", "run_id": run.run_id, "run_dir": str(run.path), "checkpoint": str(found),
        "step": int(found.name.split("-")[1]), "base_model": args.get("model"),
        "model_type": args.get("model_type"), "template": args.get("template"),
        "torch_dtype": args.get("torch_dtype"), "quantization": _quantization(args),
    }
    return MergePlan(run.run_id, found, target, temp, replace, argv, record,
                     [f"checkpoint: {why}", *_notes(found, target, args, replace)])


def _check_checkpoint(checkpoint: Path) -> None:
    if not is_adapter_checkpoint(checkpoint):
        raise MergeRefused(f"{checkpoint.name} is a full fine-tune checkpoint: it already is a complete model, "
                           f"so there is nothing to merge; chat with it directly: workbench chat {checkpoint}")
    weights = list(checkpoint.glob("adapter_model.*"))
    if not weights or not (checkpoint / "trainer_state.json").is_file():
        raise MergeRefused(f"{checkpoint} is incomplete (no adapter weights or trainer_state.json yet); "
                           "wait for the trainer to finish writing it, or pick another with --checkpoint")


def _merge_target(spec: JobSpec) -> str | None:
    return spec.finish.target if isinstance(spec.finish, MergeFinish) else None


def _check_target(run: RunFolder, target: Path, replace: bool) -> None:
    for job in list_jobs(run.jobs_dir, kind="merge"):
        if refresh_job(job).is_active and _merge_target(job.read_spec()) == str(target):
            raise MergeRefused(f"a merge into {target} is already running (job {job.job_id}); wait for it")
    if target.exists() and not replace:
        raise MergeRefused(f"{target} already exists{_describe_existing(target)}; nothing was changed. "
                           "Pass --replace to rebuild it (the old folder stays until the new one is complete), "
                           "or choose another folder with --output.")


def _describe_existing(target: Path) -> str:
    try:
        record = json.loads((target / MODEL_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    made = datetime.fromtimestamp(record.get("created_at", 0)).strftime("%Y-%m-%d %H:%M")
    return f" (merged from {Path(record.get('checkpoint', '?')).name} on {made})"


def _quantization(args: dict[str, Any]) -> str | None:
    if not args.get("quant_method"):
        return None
    return f"{args['quant_method']}-int{args.get('quant_bits')}"


def _qlora_args(args: dict[str, Any]) -> list[str]:
    """A QLoRA checkpoint's args.json has quant_method set, and swift would then write the merged
    float model beside the checkpoint and a 4-bit copy into --output_dir. Passing the model
    arguments ourselves with `--load_args false` makes swift write the float merge into the
    target, and only there."""
    if not args.get("quant_method"):
        return []
    extra = ["--load_args", "false"]
    for key in QLORA_MODEL_ARGS:
        if args.get(key):
            extra += [f"--{key}", str(args[key])]
    return extra


def _notes(checkpoint: Path, target: Path, args: dict[str, Any], replace: bool) -> list[str]:
    base = args.get("model") or "?"
    size = _folder_size(Path(base)) if Path(base).is_dir() else None
    dtype = args.get("torch_dtype") or "the base model's dtype"
    about = f", about {size / MIB:.1f} MiB" if size else ""
    notes = [f"writes a complete model to {target}: the base {base} with the LoRA of {checkpoint.name} "
             f"merged in, in {dtype}{about}"]
    quant = _quantization(args)
    if quant:
        notes.append(f"QLoRA checkpoint: training saw the base in {quant}; the LoRA is merged into the original "
                     f"full-precision base weights (swift merges on the unquantized model), so the merged model "
                     f"is {dtype}, not 4-bit. No 4-bit copy is written; make one with: swift export --model "
                     f"{target} --quant_method {args['quant_method']} --quant_bits {args.get('quant_bits')}")
    if replace and target.exists():
        notes.append(f"replaces the existing {target} once the new model is complete (kept until then)")
    return notes


def _folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.safetensors")) or sum(
        p.stat().st_size for p in folder.glob("*.bin"))


def start_merge(run: RunFolder, checkpoint: int | None = None, *, output: Path | None = None,
                replace: bool = False) -> JobFolder:
    """Plan and start the merge job (detached); returns its job folder at once."""
    plan = plan_merge(run, checkpoint, output=output, replace=replace)
    plan.target.parent.mkdir(parents=True, exist_ok=True)
    return start_job(run.jobs_dir, plan.to_spec(cwd=run.path))


# ---------------------------------------------------------------- run by the job's supervisor


def finish_merge(spec: JobSpec, data: MergeFinish) -> str:
    """Move the exported model from its temporary folder into place; never over an existing one
    unless the job was started with replace."""
    temp, target, replace = Path(data.temp), Path(data.target), data.replace
    if not (temp / "config.json").is_file():
        raise JobFinishError(f"swift export ended without writing a model into {temp}")
    record = {**data.record, "created_at": time.time(), "swift_argv": spec.argv}
    write_text_atomic(temp / MODEL_RECORD, json.dumps(record, indent=2))
    if not target.exists():
        try:
            os.rename(temp, target)
        except OSError as err:  # another merge put a folder there first
            raise JobFinishError(f"could not move the merged model into {target} ({err}); "
                                 "the folder there was left as it was") from None
        return f"merged model written to {target}"
    if not replace:
        raise JobFinishError(f"{target} appeared while this merge ran; it was kept as it is and the new "
                             "merge discarded (pass --replace to rebuild it)")
    old = target.with_name(f".{target.name}.old-{secrets.token_hex(3)}")
    os.rename(target, old)
    try:
        os.rename(temp, target)
    except BaseException:
        os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)
    return f"merged model written to {target} (replacing the previous one)"

