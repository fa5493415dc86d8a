"""Profile commands: show (the exact command), validate, and the embedded demo model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import BarColumn, Progress, TextColumn

from backend.cli.common import console, err_console, fail, load_or_exit
from backend.core.safe_text import redact_words, visible
from backend.hardware.machine import detect_hardware
from backend.launch.command import FlagLikeValue, LaunchPlan, build_launch
from backend.launch.validate import errors, resolve_profile, validate

if TYPE_CHECKING:
    from backend.launch.swift_schema import SwiftSchema
    from backend.profile import LaunchProfile


def show(
    profile: Annotated[str, typer.Argument(help="Profile file, or the name of a shipped profile.")],
    run_dir: Annotated[
        Path | None, typer.Option(help="Folder for the configs and output (default: a preview folder).")
    ] = None,
    node: Annotated[int | None, typer.Option("--node", help="Print machine K's command (multi-machine runs).")] = None,
    all_nodes: Annotated[bool, typer.Option("--all-nodes", help="Print every machine's command.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print {argv, env, accelerate_config, launcher} as JSON.")]
    = False,
    explain: Annotated[bool, typer.Option("--explain", help="List every swift flag with the profile key or the "
                                                            "reason that puts it there.")] = False,
) -> None:
    """Print the exact launch as one copy-pasteable shell line, plus its accelerate config.

    The config files the line points at are written, so the line runs as printed. Secrets are shown as ***.
    """
    from backend.rundir.layout import preview_dir

    loaded, path = load_or_exit(profile)
    folder = (run_dir or preview_dir(loaded.name)).resolve()
    if node is not None or all_nodes:
        from backend.cli.export import show_nodes

        return show_nodes(loaded, path, folder, node)
    hardware = detect_hardware()
    resolved = resolve_profile(loaded, path.parent)  # once: the line shown names what is validated below
    try:
        plan = build_launch(loaded, folder, hardware, base_dir=path.parent, resolved=resolved)
    except FlagLikeValue as err:  # never print a line that would smuggle a flag (`workbench validate` lists all)
        fail(f"{err}; the command is not printed")
    try:
        plan.write_configs()
    except OSError as err:  # a read-only or full data dir: one line, not a traceback
        fail(f"cannot write the config files the line points at ({err}); the command is not printed", code=1)
    if as_json:
        print(json.dumps(plan.as_json(), indent=2))
        return
    if explain:
        print_explanation(plan)
        return
    for problem in validate(loaded, hardware, base_dir=path.parent, resolved=resolved):
        err_console.print(visible(problem), style="yellow" if problem.severity == "warning" else "red",
                          markup=False, highlight=False, soft_wrap=True)
    console.print(f"# accelerate config: {plan.accelerate_config_path}", highlight=False, soft_wrap=True)
    console.print(plan.accelerate_yaml(), highlight=False, markup=False, end="")
    if plan.deepspeed_config_path:
        console.print(f"# DeepSpeed config: {plan.deepspeed_config_path}", highlight=False, soft_wrap=True)
    console.print("# command:", highlight=False)
    print(plan.shell_line())


def print_explanation(plan: LaunchPlan) -> None:
    """Each swift flag and where it comes from; the forced ones with the workbench's reason."""
    for flag in plan.flags:
        value = " ".join(flag.values)
        source = f"forced: {flag.reason}" + (f" (see {flag.key})" if flag.key else "") if flag.forced else flag.key
        console.print(visible(f"--{flag.name} {value}  <- {source}"), highlight=False, markup=False, soft_wrap=True)
    for word in redact_words(plan.extra):
        console.print(visible(f"{word}  <- extra_swift_args"), highlight=False, markup=False, soft_wrap=True)
    from backend.launch.managed_flags import managed_flags

    passed = {flag.name for flag in plan.flags}
    unset = sorted({key for name, key in managed_flags().items()
                    if name not in passed and key.startswith(("training.", "precision."))})
    if unset:
        console.print(f"Unset, so swift's default applies: {', '.join(unset)}", highlight=False, markup=False,
                      soft_wrap=True)
    console.print("Every other swift flag keeps swift's own default (`workbench schema --swift`).", highlight=False)


def check(profile: Annotated[str, typer.Argument(help="Profile file, or the name of a shipped profile.")]) -> None:
    """Check a profile against this machine; exit 1 when an error stands."""
    loaded, path = load_or_exit(profile)
    problems = validate(loaded, detect_hardware(), base_dir=path.parent, ask_data=True,  # data: swift reads it
                        progress=lambda text: err_console.print(f"workbench: {text}", markup=False, highlight=False))
    for problem in problems:
        console.print(visible(problem), highlight=False, markup=False)
    if not problems:
        console.print(f"{path}: no problems found")
    if errors(problems):
        raise typer.Exit(1)


def demo_model(
    name: Annotated[str, typer.Option(help="Which built-in model to build.")] = "tiny-qwen2",
) -> None:
    """Build the embedded tiny model offline (cached; seconds)."""
    from backend.models.demo.build import BUILTIN_MODELS, builtin_model_path, ensure_builtin_model

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


def schema(
    section: Annotated[str | None, typer.Argument(help="Only this section, e.g. tuner (or a swift flag prefix).")]
    = None,
    swift: Annotated[bool, typer.Option("--swift", help="List every flag of swift's own parser, managed or free.")]
    = False,
    command: Annotated[str, typer.Option(help="With --swift: sft, pt, export or infer.")] = "sft",
) -> None:
    """List every profile key with its type, default and one-line help (or, with --swift, every swift flag)."""
    from backend.profile import schema_rows

    if swift:
        return swift_schema_listing(section, command)
    rows = [row for row in schema_rows() if section is None or row[0].startswith(section)]
    if not rows:
        fail(f"no section {section!r}; sections: model, data, tuner, precision, distribution, training, output, debug")
    for key, kind, default, help_text in rows:
        console.print(f"{key} ({kind}, default {default}): {help_text}", highlight=False, markup=False,
                      soft_wrap=True)


def _swift_schema_or_exit() -> SwiftSchema:
    """swift's argument schema (asked once per swift version, with a progress line), or exit 2 saying why."""
    from backend.launch.swift_schema import require_schema
    from backend.oracle import OracleError

    try:
        return require_schema(progress=lambda text: err_console.print(text, style="dim", markup=False,
                                                                      highlight=False))
    except OracleError as err:
        fail(f"could not read swift's arguments: {err}\n{err.detail}")


def swift_schema_listing(prefix: str | None, command: str) -> None:
    from backend.launch.managed_flags import managed_flags
    from backend.launch.swift_schema import COMMANDS, SECRET_ENV, is_secret_name

    if command not in COMMANDS:
        fail(f"unknown swift command {command!r}; use one of {', '.join(COMMANDS)}")
    schema = _swift_schema_or_exit()
    managed = managed_flags() if command in ("sft", "pt") else {}
    fields = [f for name, f in schema.fields(command).items() if prefix is None or name.startswith(prefix)]
    for f in fields:
        where = f"managed by {managed[f.name]}" if f.name in managed else "free: extra_swift_args"
        if is_secret_name(f.name):
            where = f"secret: set {' or '.join(SECRET_ENV.get(f.name, ()))} in [env]" if f.name in SECRET_ENV \
                else "secret: refused on a command line"
        help_text = " ".join(f.help.split())
        console.print(f"{f.name} ({f.summary}) [{where}]: {help_text}", highlight=False, markup=False,
                      soft_wrap=True)
    count = len(schema.fields(command))
    first_class = sum(1 for v in managed.values() if not v.startswith("the workbench"))
    console.print(f"# ms-swift {schema.swift_version} {command}: {count} flags; {first_class} set by profile keys, "
                  f"{len(managed) - first_class} forced by the workbench, {count - len(managed)} free",
                  highlight=False, markup=False)


def import_command(
    source: Annotated[str, typer.Argument(help="A shell script, - for stdin, or the command itself in quotes.")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the profile here (TOML).")] = None,
    command: Annotated[int | None, typer.Option("--command", help="Which swift command of the script (1, 2 ...).")]
    = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing --output file.")] = False,
) -> None:
    """Turn a `swift sft|pt` command or script into a profile; exit 2 (nothing written) when it cannot be carried."""
    import sys

    from backend.importing.swift_flags import ImportError_, import_script
    from backend.profile import profile_to_toml, save_profile

    if source == "-":
        text, base_dir = sys.stdin.read(), Path.cwd()
    elif Path(source).expanduser().is_file():
        path = Path(source).expanduser()
        text, base_dir = path.read_text(encoding="utf-8", errors="replace"), path.resolve().parent
    else:
        text, base_dir = source, Path.cwd()
    if output is not None and output.exists() and not force:
        fail(f"{output} exists; choose another name or pass --force")
    schema = _swift_schema_or_exit()
    name = output.stem if output else "imported"
    try:
        result = import_script(text, schema, pick=command, name=name, base_dir=base_dir)
    except ImportError_ as err:
        _print_refusal(err.reasons, [c.title() for c in err.commands] if len(err.commands) > 1 else [])
        raise typer.Exit(2) from None
    for note in [*result.notes, *_pinned_defaults(result.profile, schema.swift_version)]:
        err_console.print(f"note: {visible(note)}", markup=False, highlight=False, soft_wrap=True)
    if output is None:
        print(profile_to_toml(result.profile, keep_set=True), end="")  # what the script pinned stays pinned
        return
    save_profile(result.profile, output, keep_set=True)
    err_console.print(f"wrote {output}", markup=False, highlight=False)


def _pinned_defaults(profile: LaunchProfile, swift_version: str) -> list[str]:
    """The import report's line on the keys the script set to today's default (they are kept)."""
    from backend.profile import ALWAYS_WRITTEN
    from backend.profile.toml_file import given_keys

    pinned = [f"{section}.{name}" for section, names in given_keys(profile).items() for name in reversed(names)
              if name not in ALWAYS_WRITTEN.get(section, ())
              and getattr(getattr(profile, section), name) == type(getattr(profile, section)).model_fields[name]
              .get_default(call_default_factory=True)]
    if not pinned:
        return []
    return [f"{', '.join(pinned)}: equal to the default with ms-swift {swift_version}; kept so that a later swift "
            "does not change them"]


def _print_refusal(reasons: list[str], commands: list[str]) -> None:
    for reason in reasons:
        err_console.print(f"cannot import: {visible(reason)}", style="red", markup=False, highlight=False, soft_wrap=True)
    for number, title in enumerate(commands, 1):
        err_console.print(f"  [{number}] {visible(title)}", markup=False, highlight=False, soft_wrap=True)
    err_console.print("nothing was written", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.command()(schema)
    app.command()(show)
    app.command("validate")(check)
    app.command("demo-model")(demo_model)
    app.command("import")(import_command)
