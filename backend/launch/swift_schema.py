"""ms-swift's own argument schema (parent side) and the rules for `extra_swift_args`.

The schema comes from the `swift_args` oracle question (swift's `HfArgumentParser`, read in a child
process, cached by the ms-swift and transformers versions). Nothing here imports swift.

`extra_problems()` is the one check of `extra_swift_args`: unknown names (with the closest ones),
abbreviations argparse would expand, values of the wrong type or outside `choices`, values that
begin with `-`, names the profile manages, and secrets, which go to the environment instead.
"""

from __future__ import annotations

import difflib
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from backend.core.safe_text import SECRET_NAME, is_secret_name, masked  # noqa: F401 (re-exported)
from backend.oracle import ask
from backend.oracle.swift_args_answer import LIBRARIES, ask_schema_answer, cached_schema_answer

COMMANDS = ("sft", "pt", "export", "infer")

# secrets swift can read from the environment instead of its command line: flag -> variables
# (hub_token: ModelScope reads MODELSCOPE_API_TOKEN when the flag is absent, huggingface_hub HF_TOKEN;
# swanlab_token: swanlab reads SWANLAB_API_KEY)
SECRET_ENV = {"hub_token": ("MODELSCOPE_API_TOKEN", "HF_TOKEN"), "swanlab_token": ("SWANLAB_API_KEY",)}


@dataclass(frozen=True)
class SwiftField:
    name: str
    type: str  # bool | int | float | str | dict | <other>: how swift reads a value given as text
    default: Any
    choices: tuple[Any, ...] | None
    is_list: bool
    help: str
    declared: str = ""
    negations: tuple[str, ...] = ()

    @property
    def summary(self) -> str:
        kind = f"list of {self.type}" if self.is_list else self.type
        if self.choices:
            kind = "one of " + "|".join(str(c) for c in self.choices if c is not None)
        return f"{kind}, swift default {self.default!r}"


@dataclass
class SwiftSchema:
    swift_version: str
    commands: dict[str, dict[str, SwiftField]] = field(default_factory=dict)
    deepspeed_presets: tuple[str, ...] = ()
    # defaults swift decides from the tuner type in `__post_init__`: field -> {tuner_type: value}
    tuner_defaults: dict[str, dict[str, Any]] = field(default_factory=dict)
    # what swift trains in when neither bf16 nor fp16 is given: model dtype -> fp16 | bf16 | fp32
    precision_by_dtype: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_answer(cls, answer: dict[str, Any]) -> SwiftSchema:
        commands = {}
        for command, data in answer["commands"].items():
            commands[command] = {
                f["name"]: SwiftField(
                    name=f["name"], type=f["type"], default=f["default"],
                    choices=tuple(f["choices"]) if f.get("choices") else None, is_list=bool(f["is_list"]),
                    help=f.get("help", ""), declared=f.get("declared", ""),
                    negations=tuple(n.removeprefix("--") for n in f.get("negations", [])),
                )
                for f in data["fields"]
            }
        return cls(swift_version=answer.get("swift_version", "unknown"), commands=commands,
                   deepspeed_presets=tuple(answer.get("deepspeed_presets", ())),
                   tuner_defaults=dict(answer.get("tuner_defaults", {})),
                   precision_by_dtype=dict(answer.get("precision_by_dtype", {})))

    def default_for(self, name: str, tuner_type: str, command: str = "sft") -> tuple[bool, Any]:
        """(known, value): what swift sft uses for flag `name` when it is not given, for this tuner
        type; (False, None) when swift decides it later from the model or the data."""
        by_tuner = self.tuner_defaults.get(name)
        if by_tuner is not None:
            return (tuner_type in by_tuner, by_tuner.get(tuner_type))
        spec = self.fields(command).get(name)
        if spec is None or spec.default is None:
            return (False, None)
        return (True, spec.default)

    def fields(self, command: str = "sft") -> dict[str, SwiftField]:
        return self.commands.get(command, {})

    def closest(self, name: str, command: str = "sft", n: int = 3) -> list[str]:
        return difflib.get_close_matches(name, list(self.fields(command)), n=n, cutoff=0.6)

    def expansions(self, name: str, command: str = "sft") -> list[str]:
        """Flags argparse would expand `--name` to (allow_abbrev): every flag it is a prefix of."""
        names = [*self.fields(command), *(n for f in self.fields(command).values() for n in f.negations)]
        return sorted(n for n in names if n != name and n.startswith(name))


def _on_ui_thread() -> bool:
    """True on a Textual app's main thread, where a 10 s child must never be waited for."""
    return "textual" in sys.modules and threading.current_thread() is threading.main_thread()


def load_schema(*, progress: Callable[[str], None] | None = None, allow_ask: bool | None = None,
                cancelled: Callable[[], bool] | None = None) -> SwiftSchema | None:
    """swift's schema: cached, or asked once (about 10 s) unless on the UI thread; None when unavailable.
    `cancelled` (a worker's): once true the child is stopped and OracleCancelled raised."""
    hit = cached_schema_answer()
    if hit is not None:
        return SwiftSchema.from_answer(hit)
    if allow_ask is False or (allow_ask is None and _on_ui_thread()):
        return None
    if progress is None and "textual" not in sys.modules:  # the first use announces itself on the terminal
        def progress(text: str) -> None:
            print(f"workbench: {text}", file=sys.stderr, flush=True)
    answer = ask_schema_answer(progress=progress, cancelled=cancelled)
    return SwiftSchema.from_answer(answer)


def require_schema(progress: Callable[[str], None] | None = None) -> SwiftSchema:
    schema = load_schema(progress=progress, allow_ask=True)
    assert schema is not None
    return schema


def swift_parse(argvs: list[list[str]], command: str = "sft") -> list[dict[str, Any]]:
    """swift's own parser's reading of each argument list (child process, cached by content)."""
    answer = ask("swift_parse", {"command": command, "argvs": argvs}, libraries=LIBRARIES, timeout=300)
    return answer["results"]


# ---------------------------------------------------------------- extra_swift_args


# argparse's own test for a word that is a negative number, not a flag (`--max_steps -1` is a value)
NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def reads_as_flag(text: str) -> bool:
    """Whether swift's parser (argparse) takes this word for a flag rather than a value."""
    return text.startswith("-") and not NEGATIVE_NUMBER.match(text)


@dataclass(frozen=True)
class ArgProblem:
    key: str
    message: str
    fix: str


def _texts(value: Any) -> list[str]:
    values = value if isinstance(value, list) else [value]
    return [("true" if v else "false") if isinstance(v, bool) else str(v) for v in values]


def value_problem(spec: SwiftField, value: Any) -> str | None:
    """Why `value` is not something swift's parser would accept for `spec` (None when it is)."""
    if isinstance(value, list) and not spec.is_list:
        return f"takes one value, got a list of {len(value)}"
    if isinstance(value, list) and not value:
        return "an empty list passes no value; remove the key for swift's default"
    for text in _texts(value):
        if spec.choices and text not in {str(c) for c in spec.choices if c is not None}:
            allowed = ", ".join(str(c) for c in spec.choices if c is not None)
            return f"{text!r} is not one of {allowed}"
        if spec.type == "bool" and text.lower() not in ("true", "false", "yes", "no", "1", "0", "y", "n", "t", "f"):
            return f"{text!r} is not a boolean (true/false)"
        if spec.type in ("int", "float"):
            try:
                int(text) if spec.type == "int" else float(text)
            except ValueError:
                return f"{text!r} is not {'an integer' if spec.type == 'int' else 'a number'}"
    return None


def extra_problems(extra: dict[str, Any], schema: SwiftSchema | None, managed: dict[str, str],
                   command: str = "sft") -> list[ArgProblem]:
    """Every reason `extra` cannot be passed to `swift <command>` as it stands."""
    problems = []
    for key, value in extra.items():
        problems += _key_problems(key, value, schema, managed, command)
    return problems


def _key_problems(key: str, value: Any, schema: SwiftSchema | None, managed: dict[str, str],
                  command: str) -> list[ArgProblem]:
    if key in managed:
        return [ArgProblem(key, f"{key} is managed by the profile ({managed[key]}); a second value would "
                                f"silently override it.", f"Set {managed[key]} instead.")]
    dashed = [t for t in _texts(value) if t.startswith("-")]
    if dashed:
        return [ArgProblem(key, f"value {masked(dashed[0], key)!r} begins with '-': swift's parser would read it "
                                "as a flag.",
                           "Remove the leading '-' (negative numbers cannot be passed here).")]
    if is_secret_name(key):
        if key in SECRET_ENV:
            names = " or ".join(SECRET_ENV[key])
            return [ArgProblem(key, f"{key} is a secret: on a command line it is visible in `ps`, logs and "
                                    f"every checkpoint's training_args.bin.",
                               f"Remove it; set {names} in your environment, or name it in [env] "
                               f"({SECRET_ENV[key][0]} = \"\" is read from your environment at launch).")]
        return [ArgProblem(key, f"{key} looks like a secret and swift reads it only from its command line, "
                                f"which is visible in `ps`, logs and checkpoints.", "Remove it.")]
    if schema is None:
        return []
    fields = schema.fields(command)
    spec = fields.get(key)
    if spec is None:
        expands = schema.expansions(key, command)
        if expands:
            return [ArgProblem(key, f"{key} is not a swift {command} flag; swift's parser would expand it to "
                                    f"--{expands[0]}" + (f" (or {len(expands) - 1} others)" if len(expands) > 1
                                                         else "") + ".",
                               f"Write the full name ({', '.join(expands[:3])}).")]
        close = schema.closest(key, command)
        hint = f"Did you mean {', '.join(close)}?" if close else "See `workbench schema --swift`."
        return [ArgProblem(key, f"{key} is not an argument of swift {command} (ms-swift {schema.swift_version}).",
                           hint)]
    why = value_problem(spec, value)
    if why:
        return [ArgProblem(key, f"{key}: {why} ({spec.summary}).", "Give a value swift accepts.")]
    return []


def extra_groups(extra: dict[str, Any], schema: SwiftSchema | None,
                 command: str = "sft") -> list[tuple[str, list[str], bool]]:
    """(name, values, equals) per key: `--key=value` for single values (nothing after it can be taken for
    a flag), `--key v1 v2` for lists (backend.launch.command builds the words and checks them)."""
    groups: list[tuple[str, list[str], bool]] = []
    for key, value in extra.items():
        spec = schema.fields(command).get(key) if schema else None
        texts = _texts(value)
        is_list = isinstance(value, list) or (spec is not None and spec.is_list)
        groups.append((key, texts if is_list else texts[:1], not is_list))
    return groups


# ---------------------------------------------------------------- the editor's text form


def parse_extra_text(text: str, schema: SwiftSchema | None = None, command: str = "sft") -> dict[str, Any]:
    """`name=value name2='a value, with commas'` -> extra_swift_args; values are kept as typed.

    No comma splitting: a system prompt or JSON keeps its commas. A flag swift takes several values
    for (`is_list`) is split into shell words (`modules_to_save='embed_tokens lm_head'`); booleans and
    numbers are typed only where swift's schema says so (true/false without a schema).
    """
    import shlex

    try:
        tokens = shlex.split(text)
    except ValueError as err:
        raise ValueError(f"{err}; write name=value pairs separated by spaces, quote values with spaces") from None
    result: dict[str, Any] = {}
    for token in tokens:
        key, sep, raw = token.partition("=")
        key = key.removeprefix("--")
        if not sep or not key:
            raise ValueError(f"{token!r} is not key=value (e.g. use_liger_kernel=true)")
        spec = schema.fields(command).get(key) if schema else None
        result[key] = _typed_text(raw, spec)
    return result


def _typed_text(raw: str, spec: SwiftField | None) -> Any:
    import shlex

    if spec is not None and spec.is_list:
        return shlex.split(raw)
    kind = spec.type if spec is not None else ("bool" if raw.lower() in ("true", "false") else "str")
    if kind == "bool" and raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw) if repr(float(raw)) == raw else raw  # "1e-4" stays as typed
    except ValueError:
        pass
    return raw


def format_extra_text(extra: dict[str, Any]) -> str:
    """The text form `parse_extra_text` reads back to the same values."""
    import shlex

    def text(value: Any) -> str:
        if isinstance(value, list):
            return shlex.quote(" ".join(shlex.quote(str(v)) for v in value))
        return shlex.quote(_texts(value)[0])

    return " ".join(f"{key}={text(value)}" for key, value in extra.items())


def describe_flag(name: str, schema: SwiftSchema | None, managed: dict[str, str], command: str = "sft") -> str:
    """The help line of the extra-args editor for the flag being typed."""
    if schema is None:
        return "swift's argument list is loading..."
    spec = schema.fields(command).get(name)
    if spec is None:
        close = schema.closest(name, command) or schema.expansions(name, command)[:3]
        return f"{name}: not a swift {command} flag" + (f"; did you mean {', '.join(close)}?" if close else "")
    if name in managed:
        return f"{name}: managed by the profile ({managed[name]})"
    help_text = " ".join(spec.help.split())
    return f"{name} ({spec.summary}): {help_text}" if help_text else f"{name} ({spec.summary})"


def last_name(text: str) -> str:
    """The flag name being typed at the end of the editor's text."""
    word = text.rsplit(" ", 1)[-1] if text and not text.endswith(" ") else ""
    return word.partition("=")[0].removeprefix("--")


def key_help(key: str, schema: SwiftSchema | None, managed: dict[str, str], command: str = "sft") -> str:
    """What swift says about the flag a profile key sets (for the form's help line; "" when unknown):
    `training.learning_rate` -> "swift --learning_rate (default None): The learning rate. Defaults to 1e-5 for
    full-parameter training and 1e-4 for tuners like LoRA."."""
    flag = next((name for name, owner in managed.items() if owner == key), None)
    spec = schema.fields(command).get(flag) if schema and flag else None
    if spec is None:
        return ""
    sentences = re.split(r"(?<=\.)\s+", " ".join(spec.help.split()))
    text = " ".join(sentences[:2])
    return f"swift --{flag} (default {spec.default!r})" + (f": {text}" if text else "")
