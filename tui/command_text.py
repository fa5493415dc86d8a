"""Text forms of a launch plan: a readable multi-line command and a runnable shell script.

Pure functions (no Textual): the preview pane shows `multiline_command(plan)`, "save as
script" writes `launch_script(...)`. Both are the same argv as `plan.shell_line()`, only
broken into lines with backslash continuations, so what is shown is what runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from backend.core.shell_words import ShellVar, quote
from backend.launch.swift_schema import is_secret_name

if TYPE_CHECKING:
    from backend.launch.command import LaunchPlan


def command_lines(plan: LaunchPlan) -> list[str]:
    """One line per environment variable, launcher, and `--option value...` group."""
    # as `plan.shell_line()` writes them: a secret reads the shell's own variable (never its value here),
    # control characters are $'...' escapes (shown, never sent to the terminal)
    lines = [f"{key}={quote(ShellVar(key) if is_secret_name(key) else value)}"
             for key, value in sorted(plan.env.items())]
    argv = [quote(arg) for arg in plan.redacted_argv()]
    # python -m accelerate.commands.launch --config_file CFG -m swift.cli.sft: keep the
    # launcher on one line, then the swift options one group per line
    split = plan.argv.index("swift.cli.sft") + 1 if "swift.cli.sft" in plan.argv else 1
    lines.append(" ".join(argv[:split]))
    group: list[str] = []
    for arg in argv[split:]:
        if arg.startswith("--") and group:
            lines.append("  " + " ".join(group))
            group = []
        group.append(arg)
    if group:
        lines.append("  " + " ".join(group))
    return lines


def multiline_command(plan: LaunchPlan) -> str:
    """The shell line with `\\` continuations: pasting it runs exactly `plan.shell_line()`."""
    return " \\\n".join(command_lines(plan))


def launch_script(plan: LaunchPlan, profile_name: str, profile_path: Path | None) -> str:
    source = f" ({profile_path})" if profile_path else ""
    return (
        "#!/usr/bin/env bash\n"
        f"# Launch of profile '{profile_name}'{source}, written by finetune-workbench.\n"
        f"# The accelerate config it names was written to {plan.accelerate_config_path.parent}.\n"
        "# Runs in the foreground; `workbench` launches the same command detached with a run folder.\n"
        "set -euo pipefail\n"
        f"exec env {multiline_command(plan)}\n"
    )


def display_path(path: Path, cwd: Path | None = None) -> str:
    """A short, machine-independent form of a path for titles: relative to cwd, or ~/..."""
    path = Path(path).expanduser()
    try:
        resolved = path.resolve()
    except OSError:
        resolved = path
    cwd = (cwd or Path.cwd()).resolve()
    if resolved.is_relative_to(cwd):
        return str(resolved.relative_to(cwd))
    home = Path.home().resolve()
    if resolved.is_relative_to(home):
        return "~/" + str(resolved.relative_to(home))
    return str(resolved)
