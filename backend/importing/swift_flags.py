"""`workbench import`: a shell script or command line that runs `swift sft|pt` -> a launch profile.

Reads what people write: `swift sft ...`, environment prefixes (`NPROC_PER_NODE=4 CUDA_VISIBLE_DEVICES=0,1,2,3
swift sft ...`), `export VAR=...` lines, line continuations, comments, `accelerate launch [--config_file F |
flags] -m swift.cli.sft ...` or `... $(which swift) sft ...`, `torchrun ... swift/cli/sft.py ...`, and several
commands in one script (pick one by number). Flags the profile has keys for become those keys (the map is
the builder's own, `backend.launch.managed_flags`); the rest go to `extra_swift_args`, checked against
swift's own schema; ms-swift 3.x (and 2.x) names are migrated with a note each; secrets go to `[env]`, read
from the environment at launch. What cannot be carried is listed, and nothing is written.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.importing.launcher_flags import Said, read_launcher
from backend.importing.shell_script import ImportError_, SwiftCommand, find_commands, is_number, swift_pairs
from backend.launch.swift_schema import SECRET_ENV, SwiftSchema, extra_problems, is_secret_name
from backend.profile import LaunchProfile

# old name -> 4.x name; applied only when the installed swift lacks the old name and knows the new one
RENAMED = {
    "train_type": "tuner_type",  # 3.x
    "sft_type": "tuner_type",  # 2.x
    "model_id_or_path": "model",  # 2.x
    "custom_train_dataset_path": "dataset",  # 2.x
    "custom_val_dataset_path": "val_dataset",  # 2.x
    "dataset_test_ratio": "split_dataset_ratio",  # 2.x
    "lora_target_modules": "target_modules",  # 2.x
    "batch_size": "per_device_train_batch_size",  # 2.x
    "eval_batch_size": "per_device_eval_batch_size",  # 2.x
    "quantization_bit": "quant_bits",  # 2.x
    "bnb_4bit_comp_dtype": "bnb_4bit_compute_dtype",  # 2.x
    "evaluation_strategy": "eval_strategy",  # transformers rename
}
# values that changed meaning: (flag, old value) -> new value
RENAMED_VALUES = {("deepspeed", f"default-{p}"): p for p in ("zero2", "zero3", "zero2_offload", "zero3_offload")}
# flags the workbench passes itself: dropped with a note (the round-trip test names them)
WORKBENCH_OWNED = {
    "output_dir": "checkpoints go to the run folder (set output.output_dir to choose another empty folder)",
    "add_version": "the workbench writes into the run folder without a v0-<timestamp> subfolder",
    "check_model": "the workbench passes check_model false (no hub call)",
    "logging_dir": "the run folder keeps the logs",
}


@dataclass
class ImportResult:
    profile: LaunchProfile
    notes: list[str] = field(default_factory=list)
    command: SwiftCommand | None = None


# ---------------------------------------------------------------- the profile


def import_script(text: str, schema: SwiftSchema, *, pick: int | None = None, name: str = "imported",
                  base_dir: Path | None = None) -> ImportResult:
    """The profile one swift command of `text` describes; raises ImportError_ with every reason it cannot."""
    commands = find_commands(text)
    if not commands:
        raise ImportError_(["no `swift sft|pt` command found (forms: swift sft ..., accelerate launch ... -m "
                            "swift.cli.sft ..., torchrun ... swift/cli/sft.py ...)"])
    training = [c for c in commands if c.task in ("sft", "pt")]
    if pick is None:
        if len(commands) > 1 and len(training) != 1:
            raise ImportError_([f"the script runs {len(commands)} commands; choose one with --command N"], commands)
        command = training[0] if training else commands[0]
    elif not 1 <= pick <= len(commands):
        raise ImportError_([f"--command {pick}: the script has {len(commands)} command(s)"], commands)
    else:
        command = commands[pick - 1]
    result = _import_command(command, schema, name=name, base_dir=base_dir)
    others = [c for c in commands if c is not command]
    if others and pick is None:
        result.notes.append("the script also runs " + "; ".join(c.title() for c in others) + " (not imported)")
    return result


def _import_command(command: SwiftCommand, schema: SwiftSchema, *, name: str, base_dir: Path | None) -> ImportResult:
    from backend.launch.managed_flags import managed_flags

    if command.launcher == "deepspeed":
        raise ImportError_([f"line {command.line}: the `deepspeed` launcher (--hostfile, per-host slots) cannot be "
                            "carried; the workbench launches through accelerate. Rewrite it as NNODES/NODE_RANK/"
                            "MASTER_ADDR + swift sft --deepspeed ... and import that."], [command])
    if command.task not in ("sft", "pt"):
        raise ImportError_([f"line {command.line}: `swift {command.task}` is not a training command; a profile "
                            "holds swift sft or swift pt"], [command])
    if command.unresolved:
        raise ImportError_([f"line {command.line}: {reason}" for reason in command.unresolved], [command])
    state = _State(schema, command.task, managed_flags(), base_dir)
    data: dict[str, Any] = {"name": name, "task": command.task}
    read_launcher(command, data, Said(state.notes, state.refused), base_dir)
    for flag, values in swift_pairs(command.args):
        state.flag(flag, values, data)
    state.finish(data)
    problems = extra_problems(data.get("extra_swift_args", {}), schema, state.managed, command.task)
    state.refused += [f"--{p.key}: {p.message}" for p in problems]
    if state.refused:
        raise ImportError_(state.refused, [command])
    try:
        profile = LaunchProfile.model_validate(data)
    except ValueError as err:
        raise ImportError_([f"the profile it would become is not valid: {err}"], [command]) from None
    return ImportResult(profile=profile, notes=state.notes, command=command)


class _State:
    def __init__(self, schema: SwiftSchema, task: str, managed: dict[str, str], base_dir: Path | None) -> None:
        self.schema, self.task, self.managed, self.base_dir = schema, task, managed, base_dir
        self.fields = schema.fields(task)
        self.notes: list[str] = []
        self.refused: list[str] = []
        self.quant: dict[str, Any] = {}
        self.tuner_type = "lora"
        self.joined_lists: set[str] = set()  # 2.x's custom_*_dataset_path was read beside --dataset, not instead

    # ------------------------------------------------------------ swift flags

    def flag(self, name: str, values: list[str], data: dict[str, Any]) -> None:
        name = self._migrate(name, values)
        if name == "__dropped__":
            return
        if name in WORKBENCH_OWNED:
            self.notes.append(f"--{name} dropped: {WORKBENCH_OWNED[name]}")
            return
        spec = self.fields.get(name)
        if spec is None:
            close = self.schema.closest(name, self.task)
            self.refused.append(f"--{name} is not a swift {self.task} flag of ms-swift {self.schema.swift_version}"
                                + (f" (did you mean {', '.join(close)}?)" if close else ""))
            return
        if not values:
            values = ["true"] if spec.type == "bool" else []
        if name in SECRET_ENV:
            variable = SECRET_ENV[name][0]
            data.setdefault("env", {})[variable] = ""
            self.notes.append(f"--{name} moved to [env] {variable} (read from your environment at launch; "
                              f"export {variable}=... before launching); its value was not written")
            return
        if is_secret_name(name):
            self.refused.append(f"--{name}: a secret swift reads only from its command line; it cannot be carried "
                                "safely")
            return
        if not spec.is_list and len(values) > 1:
            self.refused.append(f"--{name} {' '.join(values)}: swift takes one value for --{name}, the shell "
                                f"passes {len(values)} words (quote the value if it is one)")
            return
        key = self.managed.get(name)
        if key and not key.startswith("the workbench"):
            self._first_class(name, key, values, spec, data)
        elif key:
            self.refused.append(f"--{name} {' '.join(values)}: the workbench passes its own ({key})")
        else:
            data.setdefault("extra_swift_args", {})[name] = _typed(values, spec)

    def _migrate(self, name: str, values: list[str]) -> str:
        new = RENAMED.get(name)
        if new and name not in self.fields and new in self.fields:
            self.notes.append(f"--{name} renamed to --{new} (ms-swift 4.x)")
            if name.startswith("custom_"):
                self.joined_lists.add(new)
            name = new
        if name == "use_flash_attn" and name not in self.fields and "attn_impl" in self.fields:
            if values and values[0].lower() in ("true", "1"):
                self.notes.append("--use_flash_attn renamed to --attn_impl flash_attn (ms-swift 3.x+)")
                values[:] = ["flash_attn"]
                return "attn_impl"
            self.notes.append(f"--use_flash_attn {' '.join(values)} dropped: without it ms-swift 4.x picks its default "
                              "attention (--attn_impl unset)")
            values[:] = []
            return "__dropped__"
        for i, value in enumerate(values):
            if (name, value) in RENAMED_VALUES:
                values[i] = RENAMED_VALUES[(name, value)]
                self.notes.append(f"--{name} {value} renamed to {values[i]} (ms-swift 3.x+ preset name)")
        return name

    def _first_class(self, name: str, key: str, values: list[str], spec: Any, data: dict[str, Any]) -> None:
        section, _, leaf = key.partition(".")
        target = data.setdefault(section, {})
        value: Any = values if spec.is_list else (values[0] if values else None)
        if name == "tuner_type":
            if value not in ("lora", "full"):
                self.refused.append(f"--tuner_type {value}: the workbench's tuners are lora, qlora and full")
            self.tuner_type = str(value)
            return
        if name in ("quant_bits", "quant_method", "bnb_4bit_quant_type", "bnb_4bit_use_double_quant",
                    "bnb_4bit_compute_dtype", "bnb_4bit_quant_storage"):
            self.quant[leaf] = _typed(values, spec)
            return
        if name == "deepspeed":
            data.setdefault("distribution", {})["strategy"] = "deepspeed"
            data["distribution"].setdefault("deepspeed", {})["config"] = self._absolute(str(value), name)
            return
        if name == "use_cpu":
            if str(value).lower() in ("true", "1", "yes"):
                data.setdefault("distribution", {})["device"] = "cpu"
            return
        if name == "gradient_checkpointing_kwargs":
            try:
                kwargs = json.loads(str(value))
            except ValueError:
                kwargs = None
            if not isinstance(kwargs, dict) or set(kwargs) - {"use_reentrant"}:
                self.refused.append(f"--gradient_checkpointing_kwargs {value}: only use_reentrant can be carried")
                return
            if "use_reentrant" in kwargs:
                data.setdefault("training", {})["gradient_checkpointing_use_reentrant"] = bool(kwargs["use_reentrant"])
            return
        if name in ("model_author", "model_name") and len(values) != 1:
            self.refused.append(f"--{name} {' '.join(values)}: the profile key {key} holds one name")
            return
        value = _typed(values, spec)
        if name in ("model_author", "model_name"):
            value = values[0]
        if name == "model":
            value = self._absolute(values[0], name)
        if name in ("dataset", "val_dataset"):
            value = [self._absolute(v, name) for v in values]
            if name in self.joined_lists and leaf in target:
                value = [*target[leaf], *(v for v in value if v not in target[leaf])]
        if "." in leaf:
            self.refused.append(f"--{name}: no profile key carries it as a swift flag ({key})")
            return
        target[leaf] = value

    def _absolute(self, ref: str, flag: str) -> str:
        """A path that exists relative to the script's folder, made absolute (a profile may live elsewhere)."""
        path_part, hash_, rows = ref.partition("#")
        path = Path(path_part).expanduser()
        if self.base_dir is None or path.is_absolute() or not (self.base_dir / path).exists():
            return ref
        absolute = str((self.base_dir / path).resolve()) + hash_ + rows
        self.notes.append(f"--{flag} {ref} made absolute: {absolute}")
        return absolute

    def finish(self, data: dict[str, Any]) -> None:
        tuner = data.setdefault("tuner", {})
        if self.tuner_type == "full":
            tuner["type"] = "full"
            if self.quant:
                self.refused.append("quantization flags with --tuner_type full cannot be carried")
        elif self.quant.get("quant_bits") is not None or self.quant.get("quant_method") is not None:
            tuner["type"] = "qlora"
            tuner.update(self.quant)
            if "quant_bits" not in self.quant:
                self.refused.append("--quant_method without --quant_bits cannot be carried")
            elif tuner.get("quant_method") is None:
                self.notes.append("--quant_bits without --quant_method: ms-swift 4.6 then quantizes nothing; kept as "
                                  "written (set tuner.quant_method = \"bnb\" for QLoRA)")
        else:
            tuner["type"] = "lora"
            if self.quant:
                tuner.update(self.quant)
        if self.tuner_type == "full":
            for leaf in ("lora_rank", "lora_alpha", "lora_dropout", "target_modules"):
                if leaf in tuner:
                    tuner.pop(leaf)
                    self.refused.append(f"--{leaf} with --tuner_type full: the profile would not pass it")
        dist = data.get("distribution", {})
        if dist.get("strategy") is None and dist.get("nproc_per_node", 1) * dist.get("num_machines", 1) > 1:
            dist["strategy"] = "ddp"
        if dist.get("strategy") == "deepspeed" and dist.get("nproc_per_node", 1) == 1 and dist.get(
                "num_machines", 1) == 1:
            self.notes.append("DeepSpeed with one process: set distribution.nproc_per_node to your GPU count")


def _typed(values: list[str], spec: Any) -> Any:
    """A value for the profile: booleans and numbers typed, everything else kept exactly as written."""
    def one(text: str) -> Any:
        for choice in spec.choices or ():
            if choice is not None and str(choice) == text:
                return choice
        if spec.type == "bool":
            return text.lower() in ("true", "1", "yes", "y", "t")
        if spec.type == "int" and re.fullmatch(r"-?\d+", text):
            return int(text)
        if spec.type == "float" and is_number(text):
            return float(text)
        return text

    if spec.is_list:
        return list(values)
    return one(values[0]) if values else None
