"""Profile commands: show (the exact command), validate, and the embedded demo model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TextColumn

from backend.cli.common import console, err_console, fail, load_or_exit
from backend.command import build_launch
from backend.hardware import detect_hardware
from backend.validate import errors, validate


def show(
    profile: Annotated[str, typer.Argument(help="Profile file, or the name of a shipped profile.")],
    run_dir: Annotated[
        Path | None, typer.Option(help="Folder for the configs and output (default: a preview folder).")
    ] = None,
    node: Annotated[int | None, typer.Option("--node", help="Print machine K's command (multi-machine runs).")] = None,
    all_nodes: Annotated[bool, typer.Option("--all-nodes", help="Print every machine's command.")] = False,
) -> None:
    """Print the exact launch as one copy-pasteable shell line, plus its accelerate config.

    The config files the line points at are written, so the line runs as printed.
    """
    from backend.runs.layout import preview_dir

    loaded, path = load_or_exit(profile)
    folder = (run_dir or preview_dir(loaded.name)).resolve()
    if node is not None or all_nodes:
        from backend.cli.export import show_nodes

        return show_nodes(loaded, path, folder, node)
    hardware = detect_hardware()
    plan = build_launch(loaded, folder, hardware, base_dir=path.parent)
    plan.write_configs()
    for problem in validate(loaded, hardware, base_dir=path.parent):
        err_console.print(str(problem), style="yellow" if problem.severity == "warning" else "red",
                          markup=False, highlight=False, soft_wrap=True)
    console.print(f"# accelerate config: {plan.accelerate_config_path}", highlight=False, soft_wrap=True)
    console.print(plan.accelerate_yaml(), highlight=False, markup=False, end="")
    if plan.deepspeed_config_path:
        console.print(f"# DeepSpeed config: {plan.deepspeed_config_path}", highlight=False, soft_wrap=True)
    console.print("# command:", highlight=False)
    print(plan.shell_line())


def check(profile: Annotated[str, typer.Argument(help="Profile file, or the name of a shipped profile.")]) -> None:
    """Check a profile against this machine; exit 1 when an error stands."""
    loaded, path = load_or_exit(profile)
    problems = validate(loaded, detect_hardware(), base_dir=path.parent)
    for problem in problems:
        console.print(str(problem), highlight=False, markup=False)
    if not problems:
        console.print(f"{path}: no problems found")
    if errors(problems):
        raise typer.Exit(1)


def demo_model(
    name: Annotated[str, typer.Option(help="Which built-in model to build.")] = "tiny-qwen2",
) -> None:
    """Build the embedded tiny model offline (cached; seconds)."""
    from backend.demo.build import BUILTIN_MODELS, builtin_model_path, ensure_builtin_model

    if name not in BUILTIN_MODELS:
        fail(f"unknown built-in model {name!r}; known: {', '.join(BUILTIN_MODELS)}")
    if (builtin_model_path(name) / "config.json").exists():
        console.print(f"{name}: already built at {builtin_model_path(name)}")
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), console=err_console) as progress:
        task = progress.add_task(f"building {name}", total=1.0)
        path = ensure_builtin_model(
            name, on_progress=lambda stage, fraction: progress.update(task, completed=fraction, description=stage)
        )
    console.print(f"{name}: built at {path}")


def schema(section: Annotated[str | None, typer.Argument(help="Only this section, e.g. tuner.")] = None) -> None:
    """List every profile key with its type, default and one-line help."""
    from backend.profile import schema_rows

    rows = [row for row in schema_rows() if section is None or row[0].startswith(section)]
    if not rows:
        fail(f"no section {section!r}; sections: model, data, tuner, precision, distribution, training, output, debug")
    for key, kind, default, help_text in rows:
        console.print(f"{key} ({kind}, default {default}): {help_text}", highlight=False, markup=False,
                      soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command()(schema)
    app.command()(show)
    app.command("validate")(check)
    app.command("demo-model")(demo_model)
