"""Reading a shell script or command line as bash would, as far as `workbench import` needs: logical
lines (continuations, comments), redirections and wrappers stripped, `export` and `VAR=` lines, `${VAR}` and
`$(expr ...)` expanded, and each swift invocation found (`swift sft ...`, `accelerate launch ... -m
swift.cli.sft`, `torchrun ... swift/cli/sft.py`) with its environment prefix and launcher. Words bash would
only fill in at run time are named, never guessed. The mapping onto a profile is backend/importing/swift_flags.py's.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

SWIFT_LAUNCH_ENV = {"NPROC_PER_NODE", "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES"}


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
        if word.startswith("--") and not is_number(word):
            name, eq, value = word[2:].partition("=")
            pairs.append((name.replace("-", "_"), [value] if eq else []))
        elif pairs:
            pairs[-1][1].append(word)
        else:
            raise ImportError_([f"{word!r} comes before any swift flag"])
    return pairs


def is_number(word: str) -> bool:
    try:
        float(word)
        return True
    except ValueError:
        return False
