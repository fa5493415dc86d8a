"""`workbench import`: a shell script or command line that runs `swift sft|pt` -> a launch profile.

Reads what people write: `swift sft ...`, environment prefixes (`NPROC_PER_NODE=4 CUDA_VISIBLE_DEVICES=0,1,2,3
swift sft ...`), `export VAR=...` lines, line continuations, comments, `accelerate launch [--config_file F |
flags] -m swift.cli.sft ...` or `... $(which swift) sft ...`, `torchrun ... swift/cli/sft.py ...`, and several
commands in one script (pick one by number). Flags the profile has keys for become those keys (the map is
the builder's own, `backend.command.managed_flags`); the rest go to `extra_swift_args`, checked against
swift's own schema; ms-swift 3.x (and 2.x) names are migrated with a note each; secrets go to `[env]`, read
from the environment at launch. What cannot be carried is listed, and nothing is written.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from backend.profile import LaunchProfile
from backend.swift_schema import SECRET_ENV, SwiftSchema, extra_problems, is_secret_name

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
SWIFT_LAUNCH_ENV = {"NPROC_PER_NODE", "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES"}
# flags the workbench passes itself: dropped with a note (the round-trip test names them)
WORKBENCH_OWNED = {
    "output_dir": "checkpoints go to the run folder (set output.output_dir to choose another empty folder)",
    "add_version": "the workbench writes into the run folder without a v0-<timestamp> subfolder",
    "check_model": "the workbench passes check_model false (no hub call)",
    "logging_dir": "the run folder keeps the logs",
}


class ImportError_(Exception):
    """The script cannot become a profile: `reasons` says what could not be carried."""

    def __init__(self, reasons: list[str], commands: list[SwiftCommand] | None = None) -> None:
        self.reasons = reasons
        self.commands = commands or []
        super().__init__("; ".join(reasons))


@dataclass
class SwiftCommand:
    """One swift invocation found in a script."""

    line: int
    text: str
    task: str  # sft | pt | export | infer ...
    env: dict[str, str]
    launcher: str  # swift | accelerate | torchrun | python
    launcher_args: list[str]
    args: list[str]
    unresolved: list[str] = field(default_factory=list)  # words bash fills in at run time: refused

    def title(self) -> str:
        short = self.text if len(self.text) < 100 else self.text[:97] + "..."
        return f"line {self.line}: {short}"


@dataclass
class ImportResult:
    profile: LaunchProfile
    notes: list[str] = field(default_factory=list)
    command: SwiftCommand | None = None


# ---------------------------------------------------------------- reading a script


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each command: continuations joined, `;`/`&&` split, comments kept for shlex."""
    lines: list[tuple[int, str]] = []
    buffer, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        if not buffer:
            start = number
        stripped = raw.rstrip()
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            buffer += stripped[:-1] + " "
            continue
        buffer += stripped
        if buffer.strip():
            lines.append((start, buffer))
        buffer = ""
    if buffer.strip():
        lines.append((start, buffer))
    return lines


def _words(line: str) -> list[list[str]]:
    """Shell words of one logical line, split into simple commands at ; && || (comments dropped)."""
    line = WHICH_SWIFT.sub("swift", line)
    line = strip_redirections(strip_comment(line))  # `> train.log 2>&1` is the shell's, not swift's
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = ""
    commands: list[list[str]] = [[]]
    for word in lexer:
        if word in (";", "&&", "||", "&", "|"):
            commands.append([])
        else:
            commands[-1].append(word)
    return [c for c in commands if c]


REDIRECTION = re.compile(r"(?:\d*>>?|&>>?|<)(?:&\d+|\s*[^\s;&|'\"]+)")
WRAPPERS = {"nohup", "exec", "time", "env", "command", "setsid"}


def strip_redirections(line: str) -> str:
    """The line without `> file`, `2>&1`, `>> log`, `< in` outside quotes."""
    out, quote, i = [], "", 0
    while i < len(line):
        char = line[i]
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif (i == 0 or line[i - 1].isspace()) and (found := REDIRECTION.match(line, i)):
            out.append(" ")
            i = found.end()
            continue
        out.append(char)
        i += 1
    return "".join(out)


def strip_comment(line: str) -> str:
    """The line without its comment: as in bash, `#` starts one only at the start of a word, outside quotes
    (`swift/self-cognition#500` is a dataset with a row count, not a comment)."""
    quote, escaped = "", False
    for i, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)


VARIABLE = re.compile(r"'[^']*'|\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)")
ARITHMETIC = re.compile(r"\$\(\s*expr\s+([^()]*?)\s*\)|\$\(\(([^()]*?)\)\)")
# what bash would fill in at run time and the script does not say: `$(cmd)`, `` `cmd` ``, `${X:-y}`, `$1`, `"$@"`
SUBSTITUTION = re.compile(r"'[^']*'|\$[({0-9@*#?!$-]|`")
WHICH_SWIFT = re.compile(r"\$\(\s*which\s+swift\s*\)|`\s*which\s+swift\s*`")
# private-use marks for what `expand` cannot know: a word holding one is refused, never written
UNSET_OPEN, UNSET_CLOSE, RUNTIME = "\ue000", "\ue001", "\ue002"
UNRESOLVED = re.compile(f"{UNSET_OPEN}(\\w+){UNSET_CLOSE}|{RUNTIME}")
MAX_ARITHMETIC = 2**63  # a shell's integers are 64-bit


def expand(line: str, variables: dict[str, str]) -> str:
    """`$var`, `${var}` of variables the script set, and `$(expr A / B)` / `$((A / B))` integer arithmetic.
    Single-quoted text stays as written; an unset variable and whatever bash fills in at run time (command
    substitution, `${X:-y}`, `"$@"`) are marked, so the command holding them is refused (`unresolved`)."""
    def variable(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name is None:
            return match.group(0)
        return variables[name] if name in variables else f"{UNSET_OPEN}{name}{UNSET_CLOSE}"

    def arithmetic(match: re.Match[str]) -> str:
        expression = (match.group(1) or match.group(2) or "").replace("\\*", "*")
        if not re.fullmatch(r"[\d\s+\-*/%()]{1,200}", expression) or "**" in expression:
            return match.group(0)
        try:
            value = int(eval(expression.replace("/", "//"), {"__builtins__": {}}))  # digits and operators only
        except (SyntaxError, ArithmeticError, ValueError, RecursionError, MemoryError):
            return match.group(0)
        return str(value) if abs(value) < MAX_ARITHMETIC else match.group(0)

    def runtime(match: re.Match[str]) -> str:
        return match.group(0) if match.group(0).startswith("'") else RUNTIME + match.group(0)

    line = WHICH_SWIFT.sub("swift", line)
    return SUBSTITUTION.sub(runtime, ARITHMETIC.sub(arithmetic, VARIABLE.sub(variable, line)))


def as_written(text: str) -> str:
    """`text` with `expand`'s marks turned back into what the script says (`$NAME`, `$(`)."""
    return re.sub(f"{UNSET_OPEN}(\\w+){UNSET_CLOSE}", r"$\1", text).replace(RUNTIME, "")


def unresolved(words: list[str]) -> list[str]:
    """Why each word bash would fill in at run time cannot be carried (an unset variable, a substitution)."""
    reasons = []
    for word in words:
        names = [m.group(1) for m in UNRESOLVED.finditer(word) if m.group(1)]
        shown = as_written(word)
        if names:
            where = "" if shown == f"${names[0]}" else f"{shown}: "
            reasons.append(f"{where}${names[0]} is not set in the script, so its value is unknown here "
                           f"(set it in the script, or write the value)")
        elif RUNTIME in word:
            reasons.append(f"{shown}: the shell fills this in when the script runs (a command substitution, "
                           f"${{...}} or an argument of the script); write the value itself")
    return reasons


def find_commands(text: str) -> list[SwiftCommand]:
    """Every swift invocation of a script, with the environment it sees (exports before it + its prefixes)."""
    exported: dict[str, str] = {}
    variables: dict[str, str] = {}
    found: list[SwiftCommand] = []
    for number, line in logical_lines(text):
        try:
            simple_commands = _words(expand(line, variables))
        except ValueError as err:
            raise ImportError_([f"line {number}: cannot read the shell words ({err})"]) from None
        for words in simple_commands:
            if words[0] == "export":
                for word in words[1:]:
                    if match := ASSIGNMENT.match(word):
                        exported[match.group(1)] = variables[match.group(1)] = match.group(2)
                    elif word in variables:
                        exported[word] = variables[word]
                continue
            prefix: dict[str, str] = {}
            while words and ((match := ASSIGNMENT.match(words[0])) or words[0] in WRAPPERS):
                if match:
                    prefix[match.group(1)] = match.group(2)
                words = words[1:]
            if not words:
                variables.update(prefix)  # `A=B` alone: a shell variable ($A below), not in swift's environment
                continue
            command = swift_invocation(words)
            if command is not None:
                launcher, launcher_args, task, args = command
                env = {**exported, **prefix}
                found.append(SwiftCommand(number, as_written(" ".join(shlex.quote(w) for w in
                                                                      [*prefix_words(prefix), *words])),
                                          task, env, launcher, launcher_args, args,
                                          unresolved([*prefix_words(env), *words])))
            elif words[0] == "deepspeed" or words[0].endswith("/deepspeed"):
                found.append(SwiftCommand(number, " ".join(words), "deepspeed", {**exported, **prefix},
                                          "deepspeed", words[1:], []))
    return found


def prefix_words(env: dict[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in env.items()]


def _is_swift(word: str) -> bool:
    return word == "swift" or word.endswith("/swift")


def swift_invocation(words: list[str]) -> tuple[str, list[str], str, list[str]] | None:
    """(launcher, launcher words, task, swift words) when `words` runs swift."""
    head = Path(words[0]).name
    if _is_swift(words[0]) and len(words) > 1:
        return "swift", [], words[1], words[2:]
    if head.startswith("python"):
        rest = words[1:]
        if rest[:2] == ["-m", "accelerate.commands.launch"]:
            return _after_launcher("accelerate", rest[2:])
        if rest[:2] == ["-m", "torch.distributed.run"]:
            return _after_launcher("torchrun", rest[2:])
        return _script_target("python", [], rest)
    if head == "accelerate" and words[1:2] == ["launch"]:
        return _after_launcher("accelerate", words[2:])
    if head == "torchrun":
        return _after_launcher("torchrun", words[1:])
    return None


ACCELERATE_BOOL_FLAGS = {"--multi_gpu", "--cpu", "--use_fsdp", "--use_deepspeed", "--use_cpu", "--same_network",
                         "--no_python", "--module", "-m", "--debug", "--quiet", "-q", "--standalone"}


def _after_launcher(launcher: str, words: list[str]) -> tuple[str, list[str], str, list[str]] | None:
    """Split `accelerate launch`/`torchrun` options from the script they start."""
    i = 0
    while i < len(words):
        word = words[i]
        if word == "-m":
            return _script_target(launcher, words[:i], words[i:])
        if not word.startswith("-"):
            return _script_target(launcher, words[:i], words[i:])
        if "=" in word or word in ACCELERATE_BOOL_FLAGS:
            i += 1
        else:
            i += 2
    return None


def _script_target(launcher: str, launcher_words: list[str], rest: list[str]) -> tuple[str, list[str], str,
                                                                                          list[str]] | None:
    if rest[:1] == ["-m"] and len(rest) > 1 and (m := re.fullmatch(r"swift\.cli\.(\w+)", rest[1])):
        return launcher, launcher_words, m.group(1), rest[2:]
    if rest and _is_swift(rest[0]) and len(rest) > 1:
        return launcher, launcher_words, rest[1], rest[2:]
    if rest and (m := re.search(r"swift/cli/(\w+)\.py$", rest[0])):
        return launcher, launcher_words, m.group(1), rest[1:]
    return None


# ---------------------------------------------------------------- swift words -> flags


def swift_pairs(args: list[str]) -> list[tuple[str, list[str]]]:
    """[(name, values)] from swift words: `--k v1 v2`, `--k=v`, `--k` (a bare boolean means true)."""
    pairs: list[tuple[str, list[str]]] = []
    for word in args:
        if word.startswith("--") and not _is_number(word):
            name, eq, value = word[2:].partition("=")
            pairs.append((name.replace("-", "_"), [value] if eq else []))
        elif pairs:
            pairs[-1][1].append(word)
        else:
            raise ImportError_([f"{word!r} comes before any swift flag"])
    return pairs


def _is_number(word: str) -> bool:
    try:
        float(word)
        return True
    except ValueError:
        return False


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
    from backend.command import managed_flags

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
    state.launcher(command, data)
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

    # ------------------------------------------------------------ launcher and environment

    def launcher(self, command: SwiftCommand, data: dict[str, Any]) -> None:
        dist: dict[str, Any] = {}
        env = dict(command.env)
        self._swift_env(env, dist)
        if command.launcher == "torchrun":
            self._torchrun(command.launcher_args, dist)
        elif command.launcher == "accelerate":
            self._accelerate(command.launcher_args, dist, data)
        for key, value in env.items():
            if is_secret_name(key):
                self.notes.append(f"{key}: a secret; [env] lists it and it is read from your environment at launch")
                value = ""
            data.setdefault("env", {})[key] = value
        if dist:
            data["distribution"] = {**data.get("distribution", {}), **dist}

    def _swift_env(self, env: dict[str, str], dist: dict[str, Any]) -> None:
        if "CUDA_VISIBLE_DEVICES" in env:
            ids = env.pop("CUDA_VISIBLE_DEVICES")
            try:
                dist["gpu_ids"] = [int(x) for x in ids.split(",") if x.strip()]
            except ValueError:
                self.refused.append(f"CUDA_VISIBLE_DEVICES={ids}: only numeric GPU ids can be carried")
        for variable, key in (("NPROC_PER_NODE", "nproc_per_node"), ("NNODES", "num_machines"),
                              ("NODE_RANK", "machine_rank"), ("MASTER_PORT", "main_process_port")):
            if variable in env:
                value = env.pop(variable)
                if not value.isdigit():
                    self.refused.append(f"{variable}={value}: a number is needed (shell variables are not expanded)")
                else:
                    dist[key] = int(value)
        if "MASTER_ADDR" in env:
            dist["main_process_ip"] = env.pop("MASTER_ADDR")

    def _torchrun(self, words: list[str], dist: dict[str, Any]) -> None:
        names = {"nproc_per_node": "nproc_per_node", "nproc-per-node": "nproc_per_node", "nnodes": "num_machines",
                 "node_rank": "machine_rank", "node-rank": "machine_rank", "master_addr": "main_process_ip",
                 "master-addr": "main_process_ip", "master_port": "main_process_port",
                 "master-port": "main_process_port"}
        for flag, values in _launcher_pairs(words):
            key = names.get(flag)
            if flag.replace("-", "_") == "rdzv_endpoint" and values and ":" in values[0]:
                host, _, port = values[0].rpartition(":")
                dist["main_process_ip"] = host
                dist["main_process_port"] = _int(port, "torchrun --rdzv_endpoint", self.refused)
                continue
            if flag.replace("-", "_") == "rdzv_backend" and values and values[0] in ("static", "c10d"):
                dist["rdzv_backend"] = values[0]
                continue
            if key is None:
                if flag not in ("standalone",):
                    self.refused.append(f"torchrun --{flag}: not carried (the workbench launches through accelerate)")
                continue
            value = values[0] if values else ""
            dist[key] = value if key == "main_process_ip" else _int(value, f"torchrun --{flag}", self.refused)

    def _accelerate(self, words: list[str], dist: dict[str, Any], data: dict[str, Any]) -> None:
        pairs = dict(_launcher_pairs(words))
        config: dict[str, Any] = {}
        if "config_file" in pairs:
            path = Path(pairs.pop("config_file")[0]).expanduser()
            path = path if path.is_absolute() or self.base_dir is None else self.base_dir / path
            try:
                config = yaml.safe_load(path.read_text()) or {}
            except (OSError, yaml.YAMLError) as err:
                self.refused.append(f"accelerate --config_file {path}: cannot read it here ({err})")
                return
        for flag, values in pairs.items():
            config[flag] = values[0] if values else True
        processes = int(config.pop("num_processes", 1) or 1)
        machines = int(config.pop("num_machines", 1) or 1)
        dist["num_machines"] = machines
        dist["nproc_per_node"] = max(1, processes // machines)
        for flag, key in (("machine_rank", "machine_rank"), ("main_process_port", "main_process_port")):
            if flag in config:
                dist[key] = int(config.pop(flag))
        if "main_process_ip" in config:
            dist["main_process_ip"] = str(config.pop("main_process_ip"))
        kind = str(config.pop("distributed_type", "")).upper()
        if config.pop("use_fsdp", False) or kind == "FSDP":
            dist["strategy"] = "fsdp"
            fsdp = config.pop("fsdp_config", {}) or {}
            dist["fsdp"] = _fsdp_section(fsdp, self.notes)
        elif processes > 1:
            dist["strategy"] = "ddp"
        if config.pop("use_cpu", False) or config.pop("cpu", False):
            dist["device"] = "cpu"
        gpu_ids = str(config.pop("gpu_ids", "all"))
        if gpu_ids != "all":
            if re.fullmatch(r"\d+(,\d+)*", gpu_ids):
                dist["gpu_ids"] = [int(x) for x in gpu_ids.split(",")]
            else:
                self.refused.append(f"accelerate gpu_ids {gpu_ids}: only numeric GPU ids can be carried")
        ignored = {"compute_environment", "debug", "downcast_bf16", "enable_cpu_affinity", "main_training_function",
                   "rdzv_backend", "same_network", "gpu_ids", "tpu_env", "tpu_use_cluster", "tpu_use_sudo",
                   "use_cpu", "multi_gpu", "mixed_precision", "dynamo_config", "num_cpu_threads_per_process"}
        if config.get("mixed_precision") not in (None, "no"):
            self.notes.append(f"accelerate mixed_precision {config['mixed_precision']}: swift's --bf16/--fp16 decide "
                              "the Trainer's precision; set precision.bf16/fp16 if the script relied on accelerate's")
        left = sorted(k for k in config if k not in ignored)
        if left:
            self.refused.append(f"accelerate settings not carried: {', '.join(left)}")

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


def _launcher_pairs(words: list[str]) -> list[tuple[str, list[str]]]:
    pairs: list[tuple[str, list[str]]] = []
    for word in words:
        if word.startswith("-") and not _is_number(word):
            name, eq, value = word.lstrip("-").partition("=")
            pairs.append((name, [value] if eq else []))
        elif pairs:
            pairs[-1][1].append(word)
    return pairs


def _fsdp_section(config: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    names = {"fsdp_version": "version", "fsdp_sharding_strategy": "sharding_strategy",
             "fsdp_offload_params": "cpu_offload", "fsdp_auto_wrap_policy": "auto_wrap_policy",
             "fsdp_transformer_layer_cls_to_wrap": "transformer_layer_cls_to_wrap",
             "fsdp_min_num_params": "min_num_params", "fsdp_activation_checkpointing": "activation_checkpointing",
             "fsdp_state_dict_type": "state_dict_type", "fsdp_cpu_ram_efficient_loading": "cpu_ram_efficient_loading",
             "fsdp_sync_module_states": "sync_module_states", "fsdp_use_orig_params": "use_orig_params",
             "fsdp_forward_prefetch": "forward_prefetch", "fsdp_backward_prefetch": "backward_prefetch"}
    section = {}
    for key, value in config.items():
        if key in names:
            section[names[key]] = value
        else:
            notes.append(f"accelerate fsdp_config {key} not carried")
    if isinstance(section.get("sharding_strategy"), int):
        section["sharding_strategy"] = ["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"][
            section["sharding_strategy"] - 1]
    return section


def _int(value: str, where: str, refused: list[str]) -> int:
    if not value.isdigit():
        refused.append(f"{where} {value}: a number is needed (shell variables are not expanded)")
        return 1
    return int(value)


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
        if spec.type == "float" and _is_number(text):
            return float(text)
        return text

    if spec.is_list:
        return list(values)
    return one(values[0]) if values else None
