"""`workbench data inspect|show`: what ms-swift itself makes of a dataset, and which tokens it trains.

Both ask the `swift_data` oracle (a child process; cached by file content + model + template +
max_length), so the answer is swift's own loader and template, never a re-implementation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from backend.cli.common import console, err_console, fail, load_or_exit, resolve_profile_path
from backend.core.paths import BUILTIN_SWIFT_TYPES, is_builtin

data_app = typer.Typer(help="Inspect datasets with ms-swift's own loader and template.", no_args_is_help=True)

DEFAULT_MODEL = "builtin:tiny-qwen2"
BUILTIN_TYPES = {"builtin:tiny-qwen2": BUILTIN_SWIFT_TYPES, "builtin:small-qwen2": BUILTIN_SWIFT_TYPES}

Target = Annotated[str, typer.Argument(help="A profile (file or shipped name), or a dataset file / folder / "
                                            "builtin: / hub id (then read with --model and --template).")]
ModelOption = Annotated[str | None, typer.Option("--model", help="With a dataset: the model whose template "
                                                                 "and tokenizer encode it (default: the embedded "
                                                                 "tiny model).")]
TemplateOption = Annotated[str | None, typer.Option("--template", help="swift template (default: the profile's, "
                                                                       "else swift's choice for the model).")]
MaxLengthOption = Annotated[int | None, typer.Option("--max-length", min=8, help="Override max_length "
                                                                                 "(default: the profile's, "
                                                                                 "else the model's).")]
SampleOption = Annotated[int | None, typer.Option("--sample-limit", min=1, help="Encode at most this many rows "
                                                                               "per dataset (a random sample "
                                                                               "above it, said so).")]


def _is_profile(target: str) -> bool:
    path = resolve_profile_path(target)
    return path.suffix == ".toml" and path.is_file()


def build_request(target: str, *, model: str | None, template: str | None, max_length: int | None,
                  sample_limit: int | None) -> Any:
    """The swift_data request for a profile, or for one dataset read with a model."""
    from backend.data.swift_view import DEFAULT_SAMPLE_LIMIT, DataRequest, request_for
    from backend.models.refs import resolve_dataset, resolve_model

    limit = sample_limit or DEFAULT_SAMPLE_LIMIT
    if _is_profile(target):
        profile, path = load_or_exit(target)
        _refuse_hostile([ref for ref in [*profile.data.train, *profile.data.val] if not is_builtin(ref)], path.parent)
        request = request_for(profile, path.parent, sample_limit=limit,
                              model=resolve_model(model, Path.cwd(), build=True) if model else None,
                              template=template)
        if max_length is not None:
            from dataclasses import replace

            request = replace(request, max_length=max_length)
        return request
    source = model or DEFAULT_MODEL
    model_type, default_template = BUILTIN_TYPES.get(source, (None, None))
    if not is_builtin(target):
        _refuse_hostile([target], Path.cwd())
    try:
        ref = resolve_dataset(target, Path.cwd())
    except KeyError as err:
        fail(str(err.args[0]))
    return DataRequest(refs=[ref], labels=[target], model=resolve_model(source, Path.cwd(), build=True),
                       model_type=model_type, template=template or default_template, max_length=max_length,
                       sample_limit=limit)


def _refuse_hostile(refs: list[str], base_dir: Path) -> None:
    """Exit 2 before swift (or the cache key's read) opens a FIFO, a symlink loop, a line too long or a row
    nested too deep (backend/data/files.py)."""
    from backend.data.files import hostile_dataset
    from backend.models.refs import local_path

    problem = hostile_dataset([str(local_path(ref.partition("#")[0], base_dir).absolute()) for ref in refs])
    if problem:
        fail(problem)


def _progress(line: str) -> None:
    err_console.print(line, style="dim", markup=False, highlight=False, soft_wrap=True)


def _ask(call: Any) -> dict[str, Any]:
    from backend.oracle import OracleError

    try:
        return call()
    except OracleError as err:
        fail(f"swift could not inspect the data: {err}\n{err.detail[-2000:]}")


@data_app.command("inspect")
def inspect(
    target: Target,
    as_json: Annotated[bool, typer.Option("--json", help="Print swift's report as JSON.")] = False,
    model: ModelOption = None,
    template: TemplateOption = None,
    max_length: MaxLengthOption = None,
    sample_limit: SampleOption = None,
    refresh: Annotated[bool, typer.Option("--refresh", help="Ask swift again (ignore the cache).")] = False,
) -> None:
    """Rows, rows swift drops and why, token lengths, truncation, trained tokens and steps per epoch.

    Exit 1 when a dataset cannot be read or keeps no row."""
    from backend.data.swift_view import ask_report
    from backend.data.view import report_text

    request = build_request(target, model=model, template=template, max_length=max_length,
                            sample_limit=sample_limit)
    report = _ask(lambda: ask_report(request, progress=_progress, refresh=refresh))
    if as_json:
        shown = {**report, "datasets": [{k: v for k, v in d.items() if k != "views"} for d in report["datasets"]]}
        print(json.dumps(shown, indent=2))
    else:
        console.print(report_text(report), highlight=False, soft_wrap=True, end="")
    if any(d.get("status") in ("unreadable", "empty") for d in report.get("datasets", [])):
        raise typer.Exit(1)


@data_app.command("show")
def show(
    target: Target,
    row: Annotated[int, typer.Option("--row", "-r", min=1, help="Row number in file order (1 = the first row).")]
    = 1,
    dataset: Annotated[int, typer.Option("--dataset", "-d", min=1, help="Which of the profile's datasets.")] = 1,
    model: ModelOption = None,
    template: TemplateOption = None,
    max_length: MaxLengthOption = None,
    markers: Annotated[bool | None, typer.Option("--markers/--no-markers", help="Plain-text markers around the "
                                                                              "trained tokens (default: when "
                                                                              "not a terminal).")] = None,
) -> None:
    """One row exactly as the template renders it, the trained tokens (labels != -100) highlighted."""
    from backend.data.swift_view import ask_row
    from backend.data.view import row_text

    request = build_request(target, model=model, template=template, max_length=max_length, sample_limit=None)
    answer = _ask(lambda: ask_row(request, row, dataset=dataset - 1, progress=_progress))
    use_markers = (not console.is_terminal) if markers is None else markers
    text = row_text(answer, markers=use_markers)
    text.rstrip()
    if console.is_terminal:
        console.print(text, highlight=False, soft_wrap=True)
    else:
        print(text.plain)
    if answer.get("error"):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(data_app, name="data")
