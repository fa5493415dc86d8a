"""Shell words: quoting, variables, long commands, for a bash line that reads back exactly.

Ground floor: the command builder prints its command with these, the exports (backend.launchers)
write whole scripts with them.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from backend.core.safe_text import is_hidden, is_secret_name, shell_escape


@dataclass(frozen=True)
class ShellVar:
    """A token the script fills in when it runs, e.g. ShellVar("SLURM_NODEID") -> "$SLURM_NODEID"."""

    name: str
    suffix: str = ""

    def render(self) -> str:
        return f'"${{{self.name}}}{self.suffix}"' if self.suffix else f'"${self.name}"'


Token = str | ShellVar


def quote(token: Token) -> str:
    """One shell word that bash reads back as exactly `token`; control characters (ESC, newline, U+202E)
    are written as `$'...'` escapes, so the printed line never acts on the terminal and pastes exactly."""
    if isinstance(token, ShellVar):
        return token.render()
    if any(is_hidden(c) for c in token):
        return "$'" + "".join(shell_escape(c) for c in token) + "'"
    return shlex.quote(token)


def join(tokens: list[Token]) -> str:
    return " ".join(quote(t) for t in tokens)


def substitute(argv: list[str], replacements: dict[str, Token]) -> list[Token]:
    """argv with the value after each flag in `replacements` swapped for the given token."""
    out: list[Token] = list(argv)
    for i, token in enumerate(argv[:-1]):
        if token in replacements:
            out[i + 1] = replacements[token]
    return out


def render_command(tokens: list[Token], *, break_after: str | None = None, tail: str = "") -> str:
    """One command over several lines: everything up to `break_after` on the first, then
    one `--flag values...` group a line. `tail` is appended verbatim (e.g. '"$@"')."""
    groups: list[list[Token]] = [[]]
    split_from = tokens.index(break_after) + 1 if break_after in tokens else len(tokens)
    for i, token in enumerate(tokens):
        starts_flag = isinstance(token, str) and token.startswith("--") and i >= split_from
        if starts_flag and groups[-1]:
            groups.append([])
        groups[-1].append(token)
    lines = [" ".join(quote(t) for t in group) for group in groups]
    if tail:
        lines.append(tail)
    return " \\\n    ".join(lines)


def export_lines(env: dict[str, str]) -> str:
    """`export KEY=value` lines; a secret (HF_TOKEN ...) reads the running shell's own value, never written."""
    return "\n".join(f"export {key}={quote(ShellVar(key) if is_secret_name(key) else value)}"
                      for key, value in sorted(env.items()))


def flag_value(argv: list[str], flag: str) -> str | None:
    """The value after `flag` in a command's words (`--model DIR`), or None when the flag is not there."""
    return argv[argv.index(flag) + 1] if flag in argv[:-1] else None
