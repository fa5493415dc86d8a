"""What a chat or an inference loads: a base model plus adapter, a merged model, or a model folder.

A reference can be a run (id or folder; its best checkpoint unless one is named: the scoreboard's, by
the profile's metric, see backend.checkpoints.scoreboard), a
checkpoint folder, a model folder, a built-in model (`builtin:tiny-qwen2`) or a hub id.
swift's `args.json` beside a checkpoint names the base model, its model_type and template,
so a run's checkpoints need no extra flags; a merged model carries the same facts in
`workbench_model.json`.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from backend.checkpoints.merged import MODEL_RECORD, merged_models
from backend.core.paths import BUILTIN_SWIFT_TYPES, is_builtin
from backend.models.refs import is_hub_id, resolve_model
from backend.rundir.layout import RunFolder

# every built-in model is a Qwen2 with a ChatML template; swift cannot infer that from the folder


class TargetError(ValueError):
    """A model reference that cannot be loaded; the message says why and what to pass instead."""


@dataclass(frozen=True)
class ModelTarget:
    """Everything the chat worker and batch inference need to load one model."""

    model: str
    adapters: tuple[str, ...] = ()
    model_type: str | None = None
    template: str | None = None
    torch_dtype: str | None = None
    label: str = ""
    # the model before fine-tuning, for the side-by-side comparison; None when unknown
    base_model: str | None = field(default=None, compare=False)
    # which checkpoint of a run was taken and why ("checkpoint-6: lowest eval loss 1.23"); "" otherwise
    reason: str = field(default="", compare=False)

    def worker_args(self) -> list[str]:
        """Loading flags shared by the chat worker and the batch-inference worker."""
        return self._loading_flags("-")

    def swift_args(self) -> list[str]:
        """The same loading flags as swift's own command line spells them (`swift eval`)."""
        return self._loading_flags("_")

    def _loading_flags(self, separator: str) -> list[str]:
        args = ["--model", self.model]
        if self.adapters:
            args += ["--adapters", *self.adapters]
        for name, value in (("model_type", self.model_type), ("template", self.template),
                            ("torch_dtype", self.torch_dtype)):
            if value:
                args += [f"--{name.replace('_', separator)}", value]
        return args

    def base(self) -> ModelTarget | None:
        """The same model without what fine-tuning added, or None when that is not known."""
        if not self.base_model:
            return None
        name = Path(self.base_model).name if Path(self.base_model).exists() else self.base_model
        return replace(self, model=self.base_model, adapters=(), label=name, base_model=None)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "adapters": list(self.adapters)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelTarget:
        return cls(**{**data, "adapters": tuple(data.get("adapters", ()))})


def read_checkpoint_args(checkpoint: Path) -> dict[str, Any]:
    """swift's args.json of a checkpoint (or of its training output folder)."""
    for path in (checkpoint / "args.json", checkpoint.parent / "args.json"):
        if path.is_file():
            return json.loads(path.read_text(encoding="utf-8"))
    raise TargetError(f"{checkpoint} has no args.json, so its base model is unknown; "
                      "pass the base model folder and --model-type/--template instead")


def is_adapter_checkpoint(folder: Path) -> bool:
    return (folder / "adapter_config.json").is_file()


def from_checkpoint(checkpoint: Path, label: str | None = None) -> ModelTarget:
    """A LoRA checkpoint (base + adapter) or a full fine-tune checkpoint (a complete model)."""
    checkpoint = checkpoint.resolve()
    args = read_checkpoint_args(checkpoint)
    common: dict[str, Any] = {"model_type": args.get("model_type"), "template": args.get("template"),
              "torch_dtype": args.get("torch_dtype"), "base_model": args.get("model")}
    label = label or f"{checkpoint.parent.parent.name}/{checkpoint.name}"
    if is_adapter_checkpoint(checkpoint):
        return ModelTarget(model=args["model"], adapters=(str(checkpoint),), label=label, **common)
    return ModelTarget(model=str(checkpoint), label=label, **common)


def from_model_dir(folder: Path, model_type: str | None = None, template: str | None = None) -> ModelTarget:
    """A complete model folder; a merged model's record supplies its type, template and base."""
    folder = folder.resolve()
    facts: dict[str, Any] = {}
    if (folder / MODEL_RECORD).is_file():
        record = json.loads((folder / MODEL_RECORD).read_text(encoding="utf-8"))
        facts = {k: record.get(k) for k in ("model_type", "template", "torch_dtype", "base_model")}
    elif (folder / "args.json").is_file():  # written by swift export / a full fine-tune
        args = json.loads((folder / "args.json").read_text(encoding="utf-8"))
        base = args.get("model")
        facts = {"model_type": args.get("model_type"), "template": args.get("template"),
                 "torch_dtype": args.get("torch_dtype"),
                 "base_model": base if base and Path(base).resolve() != folder else None}
    facts["model_type"] = model_type or facts.get("model_type")
    facts["template"] = template or facts.get("template")
    return ModelTarget(model=str(folder), label=folder.name, **facts)


def resolve_target(ref: str, *, checkpoint: int | None = None, merged: bool = False,
                   model_type: str | None = None, template: str | None = None) -> ModelTarget:
    """Turn a command-line reference into a ModelTarget; TargetError says what went wrong."""
    run = _find_run_or_none(ref)
    if run is not None:
        return target_of_run(run, checkpoint=checkpoint, merged=merged)
    if checkpoint is not None or merged:
        raise TargetError(f"--checkpoint and --merged choose among a run's models, and {ref!r} is not a run")
    if is_builtin(ref):
        try:
            path = Path(resolve_model(ref, build=True))
        except KeyError as err:
            raise TargetError(str(err.args[0])) from None
        default_type, default_template = BUILTIN_SWIFT_TYPES
        return replace(from_model_dir(path, model_type or default_type, template or default_template), label=ref)
    path = Path(ref).expanduser()
    if path.is_dir():
        if is_adapter_checkpoint(path) or re.fullmatch(r"checkpoint-\d+", path.name):
            return from_checkpoint(path)
        if (path / "config.json").is_file():
            return from_model_dir(path, model_type, template)
        raise TargetError(f"{path} is not a model folder (no config.json), a checkpoint (no "
                          "adapter_config.json) or a run folder (no state.json)")
    if is_hub_id(ref) and not path.exists():
        return ModelTarget(model=ref, model_type=model_type, template=template, label=ref)
    raise TargetError(f"{ref!r} is not a run (`workbench runs` lists them), a model folder, a checkpoint "
                      "folder, builtin:tiny-qwen2 or a hub id such as Qwen/Qwen2.5-0.5B-Instruct")


def _find_run_or_none(ref: str) -> Path | None:
    """The run folder `ref` names, None when it names no run; TargetError when it is ambiguous."""
    from backend.runs.errors import RunNotFound
    from backend.runs.lookup import find_run

    path = Path(ref).expanduser()
    if is_builtin(ref) or (path.is_dir() and not (path / "state.json").is_file()):
        return None
    try:
        return find_run(ref).path
    except RunNotFound as err:
        if "matches several runs" in str(err):
            raise TargetError(str(err)) from None
        return None


def target_of_run(run_dir: Path, *, checkpoint: int | None = None, merged: bool = False) -> ModelTarget:
    """A run's checkpoint (the best unless `checkpoint`), or its merged model with `merged`."""
    run = RunFolder(run_dir)
    if merged:
        return _merged_of_run(run, checkpoint)
    found, why = choose_checkpoint(run, checkpoint)
    return replace(from_checkpoint(found, label=f"{run.run_id} {found.name}"), reason=why)


def best_model_of_run(run_dir: Path) -> ModelTarget:
    """What "chat with this run" means: the merged model of its best checkpoint when one was made
    (the user merged it to use it), else that checkpoint with its adapter."""
    run = RunFolder(run_dir)
    best, why = choose_checkpoint(run, None)
    try:
        return replace(_merged_of_run(run, int(best.name.rsplit("-", 1)[1])), reason=f"{why} (its merged model)")
    except (TargetError, ValueError):
        return replace(from_checkpoint(best, label=f"{run.run_id} {best.name}"), reason=why)


def pick_checkpoint(run: RunFolder, step: int | None) -> Path:
    """checkpoint-<step> of a run (the best when `step` is None), or TargetError."""
    return choose_checkpoint(run, step)[0]


def choose_checkpoint(run: RunFolder, step: int | None) -> tuple[Path, str]:
    """(checkpoint folder, why it was taken): checkpoint-<step> when asked for (a pinned copy when rotation
    deleted the original), else the scoreboard's best; the newest when nothing ranks them."""
    from backend.checkpoints.pins import pinned_dir
    from backend.checkpoints.scoreboard import scoreboard  # numpy: only when a run's checkpoint is chosen

    checkpoints = run.checkpoints()
    if step is not None:
        for found in [*checkpoints, pinned_dir(run) / f"checkpoint-{step}"]:
            if found.name == f"checkpoint-{step}" and found.is_dir():
                return found, f"{found.name}: asked for"
        steps = ", ".join(p.name.split("-")[1] for p in checkpoints) or "none"
        raise TargetError(f"run {run.run_id} has no checkpoint-{step}; it has: {steps}")
    board = scoreboard(run)
    best = board.best
    if best is not None and best.path is not None:
        return best.path, board.reason(best)
    if not checkpoints:
        raise TargetError(f"run {run.run_id} has no checkpoint yet (checkpoints appear every "
                          "training.save_steps steps and at the end)")
    complete = [row.path for row in board.rows if row.complete and row.path is not None]
    if complete:
        return complete[-1], f"{complete[-1].name}: the newest (no loss was recorded to rank the checkpoints)"
    return checkpoints[-1], f"{checkpoints[-1].name}: the newest (none is complete)"


def _merged_of_run(run: RunFolder, step: int | None) -> ModelTarget:
    mine = [m for m in merged_models([run.path]) if step is None or m.step == step]
    if not mine:
        which = f"checkpoint-{step}" if step is not None else "any checkpoint"
        raise TargetError(f"run {run.run_id} has no merged model of {which}; "
                          f"make one with: workbench merge {run.run_id}"
                          + (f" --checkpoint {step}" if step is not None else ""))
    newest = max(mine, key=lambda m: (m.step, m.created_at))
    return replace(from_model_dir(newest.path), label=f"{run.run_id} {newest.path.name}")
