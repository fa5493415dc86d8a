"""What ms-swift itself makes of a dataset, and which tokens it trains: the app side of the data oracle.

The child (backend/data/swift_view_child.py, the question `swift_data_child`) loads each dataset with swift's own `load_dataset` (every documented format, column
aliases, `#N` sampling, folders, csv/json/jsonl/txt) and encodes the rows with swift's own template
for the profile's model, template, system prompt and `max_length`. Nothing about the formats is
re-typed here: a row swift drops is reported with the exception swift raised for it, a length is the
length of swift's `input_ids`, a trained token is a label that is not -100.

Two modes share the loading:
- `report`: rows, rows swift drops and why, token-length percentiles, rows over `max_length` (what
  swift does with them under the truncation strategy, tokens lost), rows with no trained token, the
  trained-token fraction and the exact optimizer steps per epoch;
- `row`: one row as the template renders it, as segments (text, trained, special, lost) for the
  trained-token view.

This module is the app side: `request_for()` builds the request from a profile (the key of the cache:
file contents, model, template, system, max_length and the rest), `ask_report()` / `ask_row()` ask
(cached), `cached_report()` / `known_report()` answer from the cache or the memo only (never start a
child), `summary_line()` and `data_problems()` say what a report means. Light imports only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.core.tail import mark
from backend.data.swift_view_answer import QUESTION

if TYPE_CHECKING:
    from backend.models.resolved import ResolvedProfile

LIBRARIES = ("ms-swift", "transformers", "datasets")
DEFAULT_SAMPLE_LIMIT = 20_000  # rows encoded at most per dataset; above it a random sample, said so
LISTED = 50  # row numbers / errors listed per kind
VIEW_ROWS = 3  # trained-token views of the first rows, sent with the report
# the model's files a report depends on: the template and special tokens read from them decide the
# encoding, config.json the model type and context length
MODEL_INPUTS = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                "chat_template.jinja", "chat_template.json", "generation_config.json")
HUB_NOTE = "hub dataset: not inspected offline (swift downloads it at launch)"
Progress = Callable[[str], object]  # its answer is not used


@dataclass(frozen=True)
class DataRequest:
    """Everything the answer depends on besides the file contents (the cache key's payload)."""

    refs: list[str]  # as swift gets them: absolute path (+ #N) or hub id
    model: str  # local model folder, or a hub id (then nothing is encoded)
    model_type: str | None = None
    template: str | None = None
    system: str | None = None
    max_length: int | None = 2048
    truncation_strategy: str | None = None  # swift's default for sft: delete
    loss_scale: str = "default"
    agent_template: str | None = None
    packing: bool = False
    batch_size: int = 1
    grad_accum: int | None = None  # None: swift's default
    world_size: int = 1
    split_dataset_ratio: float = 0.0
    columns: dict[str, str] | None = None
    sample_limit: int = DEFAULT_SAMPLE_LIMIT
    labels: list[str] = field(default_factory=list)  # what the user wrote, per ref (for messages)

    def payload(self, **extra: Any) -> dict[str, Any]:
        from dataclasses import asdict

        return {**asdict(self), **extra}

    def inputs(self) -> list[Path]:
        """Files whose content keys the cache: every local dataset, and the model's files that decide
        how rows are encoded (its config, tokenizer and template files)."""
        paths = [Path(ref.partition("#")[0]) for ref in self.refs]
        paths = [p for p in paths if p.exists()]
        model = Path(self.model)
        paths += [model / name for name in MODEL_INPUTS if (model / name).is_file()]
        return paths


def _extra(profile: Any, key: str, default: Any = None) -> Any:
    return profile.extra_swift_args.get(key, default)


def _as_bool(value: Any) -> bool:
    return value is True or str(value).lower() in ("true", "1", "yes")


def request_for(profile: Any, base_dir: Path | None, *, which: str = "train", build_model: bool = True,
                sample_limit: int = DEFAULT_SAMPLE_LIMIT, model: str | None = None,
                template: str | None = None, resolved: ResolvedProfile | None = None) -> DataRequest:
    """The request that matches what `swift sft` will do with this profile's datasets (`resolved`: the
    launch's model and datasets as resolved once; resolved here when None)."""
    from backend.models.resolved import resolve_profile

    resolved = resolved or resolve_profile(profile, base_dir)
    if build_model and model is None:
        resolved.build_model()
    datasets = resolved.train if which == "train" else resolved.val
    columns = _extra(profile, "columns")
    if isinstance(columns, str):
        import json

        try:
            columns = json.loads(columns)
        except ValueError:
            columns = None
    return DataRequest(
        refs=[found.swift or found.ref for found in datasets],  # an unknown built-in: the child says it is missing
        labels=[found.ref for found in datasets],
        model=model or resolved.model_arg,
        model_type=profile.model.model_type,
        template=template or profile.model.template,
        system=profile.model.system,
        max_length=profile.training.max_length,
        truncation_strategy=_extra(profile, "truncation_strategy"),
        loss_scale=str(_extra(profile, "loss_scale", "default")),
        agent_template=_extra(profile, "agent_template"),
        packing=_as_bool(_extra(profile, "packing", False)),
        batch_size=profile.training.per_device_train_batch_size,
        grad_accum=profile.training.gradient_accumulation_steps,
        world_size=profile.distribution.world_size,
        split_dataset_ratio=profile.data.split_dataset_ratio if not profile.data.val else 0.0,
        columns=columns if isinstance(columns, dict) else None,
        sample_limit=sample_limit,
    )


def ask_report(request: DataRequest, *, progress: Progress | None = None, refresh: bool = False,
               timeout: float = 1800.0, cancelled: Callable[[], bool] | None = None) -> dict[str, Any]:
    """swift's report on the request's datasets (cached by content + model + template + max_length)."""
    from backend.oracle import ask

    if not refresh and (hit := _memo_get(request)) is not None:
        return hit  # this process asked already and the files are unchanged (no hashing)
    report = ask(QUESTION, request.payload(mode="report"), libraries=LIBRARIES, inputs=request.inputs(),
                 progress=progress, refresh=refresh, timeout=timeout, cancelled=cancelled)
    remember(request, report)
    return report


def cached_report(request: DataRequest) -> dict[str, Any] | None:
    """The cached report or None; never starts a child."""
    from backend.oracle import cached

    return cached(QUESTION, request.payload(mode="report"), libraries=LIBRARIES, inputs=request.inputs())


def ask_row(request: DataRequest, row: int, *, dataset: int = 0, progress: Progress | None = None,
            timeout: float = 600.0, cancelled: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Row `row` (1-based, file order) of dataset number `dataset`, as the template renders it."""
    from backend.oracle import ask

    return ask(QUESTION, request.payload(mode="row", row=row, dataset=dataset), libraries=LIBRARIES,
               inputs=request.inputs(), progress=progress, timeout=timeout, cancelled=cancelled)


TRUNCATED_WARNING_SHARE = 0.05  # more rows than this over max_length: a warning
CACHED_LOOKUP_BYTES = 16 << 20  # hashing more than this on a UI thread is too slow: ask explicitly
_MEMO: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}  # payload -> (file stats, report)


def _stats(request: DataRequest) -> tuple[Any, ...]:
    stats = []
    for path in request.inputs():
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        stats += [(str(f), mark(f)) for f in files]
    return tuple(stats)


def _memo_key(request: DataRequest) -> str:
    import json

    return json.dumps(request.payload(mode="report"), sort_keys=True, default=str)


def _memo_get(request: DataRequest) -> dict[str, Any] | None:
    hit = _MEMO.get(_memo_key(request))
    return hit[1] if hit is not None and hit[0] == _stats(request) else None


def known_report(request: DataRequest) -> dict[str, Any] | None:
    """A report already known: this process's memo (file sizes and times unchanged) or the disk cache
    (small inputs only). Never starts a child; cheap enough for live validation."""
    if (hit := _memo_get(request)) is not None:
        return hit
    if sum(found.size for _, found in _stats(request) if found is not None) > CACHED_LOOKUP_BYTES:
        return None
    report = cached_report(request)
    if report is not None:
        remember(request, report)
    return report


def remember(request: DataRequest, report: dict[str, Any]) -> None:
    _MEMO[_memo_key(request)] = (_stats(request), report)
    _LATEST[tuple(request.labels or request.refs)] = report


_LATEST: dict[tuple[str, ...], dict[str, Any]] = {}  # the datasets as written -> the last report


def summary_line(refs: list[str]) -> str | None:
    """One line for the launch confirmation from the last report on these datasets (None: not known)."""
    report = _LATEST.get(tuple(refs))
    if report is None or report.get("steps_per_epoch") is None:
        return None
    truncated = report.get("truncated_rows", 0)
    strategies = {d.get("truncation_strategy") for d in report.get("datasets", []) if d.get("truncated_rows")}
    cut = (f"{truncated:,} rows over max_length ({'deleted' if strategies == {'delete'} else 'truncated'}, "
           f"{report.get('tokens_lost', 0):,} tokens lost)") if truncated else "no row over max_length"
    return (f"{report['steps_per_epoch']:,} steps per epoch ({report.get('train_rows', 0):,} rows) · {cut} · "
            f"{100 * report.get('trained_token_fraction', 0):.0f} % of tokens trained")


def profile_requests(profile: Any, base_dir: Path | None, *, build_model: bool = False,
                     resolved: ResolvedProfile | None = None) -> list[tuple[str, DataRequest]]:
    """(profile field, request) for the train and val datasets."""
    from backend.models.resolved import resolve_profile

    resolved = resolved or resolve_profile(profile, base_dir)
    pairs = [("data.train", request_for(profile, base_dir, which="train", build_model=build_model,
                                        resolved=resolved))]
    if profile.data.val:
        pairs.append(("data.val", request_for(profile, base_dir, which="val", build_model=build_model,
                                              resolved=resolved)))
    return [(name, request) for name, request in pairs if request.refs]


def profile_data_problems(profile: Any, base_dir: Path | None, *, ask: bool = False, progress: Progress | None = None,
                          resolved: ResolvedProfile | None = None) -> list[tuple[str, str, str, str]]:
    """(field, severity, message, fix) from swift's report on the profile's data.

    `ask=False` (live validation) uses only a report already known; `ask=True` (`workbench validate`)
    asks swift (cached), so unreadable data fails before any model loads."""
    from backend.oracle import OracleError

    problems: list[tuple[str, str, str, str]] = []
    try:
        requests = profile_requests(profile, base_dir, build_model=ask, resolved=resolved)
    except Exception as err:  # a model that cannot be built, say: the data check only says so
        return [("data.train", "warning", f"the data could not be checked with swift: {err}",
                 "Run `workbench data inspect` on the profile to see the details.")]
    for name, request in requests:
        report: dict[str, Any] | None
        if ask:
            try:
                report = ask_report(request, progress=progress)
            except OracleError as err:
                problems.append((name, "warning", f"swift could not inspect the data: {err}",
                                 "Run `workbench data inspect` on the profile to see the details."))
                continue
            remember(request, report)  # asked: a report
        else:
            report = known_report(request)
        if report is not None:
            problems += data_problems(name, report)
    return problems


def data_problems(name: str, report: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Errors: a dataset swift cannot read or keeps no row of. Warnings: rows dropped, more than 5 %
    of rows over max_length, rows that train no token."""
    problems = []
    encoded = zero = empty = 0
    for data in report.get("datasets", []):
        ref = data.get("ref")
        if data.get("kind") == "missing":
            continue  # the path check already says so
        if data.get("status") == "unreadable":
            lines = ", ".join(f"line {b['line']}: {b['reason']}" for b in data.get("bad_lines", [])[:3])
            problems.append((name, "error", f"dataset {ref!r} cannot be read by swift: {data.get('error')}"
                             + (f" ({lines})" if lines else ""),
                             "Fix the lines named, or the path; `workbench data inspect` shows swift's view."))
            continue
        if data.get("status") == "empty" or (data.get("status") == "ok" and data.get("train_rows") == 0):
            problems.append((name, "error", f"dataset {ref!r} leaves swift no row to train on "
                             f"({data.get('rows_in_file', 0)} rows in the file, {data.get('dropped', 0)} dropped, "
                             f"{data.get('truncated_rows', 0)} over max_length, {data.get('encode_errors', 0)} "
                             f"not encodable).", "`workbench data inspect` lists each row's reason."))
            continue
        if data.get("status") != "ok":
            continue
        if data.get("dropped"):
            lines = _numbers(data.get("dropped_rows", []))
            problems.append((name, "warning", f"swift drops {data['dropped']} of {data.get('rows_in_file')} rows of "
                             f"{ref!r} ({lines}).", "Fix or remove those rows; `workbench data inspect` says why."))
        rows = data.get("encoded") or data.get("rows") or 0
        encoded, zero = encoded + rows, zero + data.get("zero_trained_rows", 0)
        over = data.get("truncated_rows", 0)
        if rows and over / rows > TRUNCATED_WARNING_SHARE:
            verb = "deletes" if data.get("truncation_strategy") == "delete" else "truncates"
            problems.append((name, "warning", f"{over} of {rows} rows of {ref!r} are longer than max_length "
                             f"{data.get('max_length')}: swift {verb} them ({data.get('tokens_lost', 0)} tokens "
                             f"lost; rows {_rows(data.get('truncated_row_numbers', []))}).",
                             "Raise training.max_length, or shorten those rows."))
        empty = empty + data.get("empty_reply_rows", 0)
        if data.get("empty_reply_rows") and data["empty_reply_rows"] < rows:
            problems.append((name, "warning", f"{data['empty_reply_rows']} rows of {ref!r} have only empty assistant "
                             f"replies (rows {_rows(data.get('empty_reply_row_numbers', []))}): they teach the model "
                             "to say nothing.", "Fill in those replies, or remove the rows."))
        if data.get("zero_trained_rows"):
            problems.append((name, "warning", f"{data['zero_trained_rows']} rows of {ref!r} train no token at all "
                             f"(rows {_rows(data.get('zero_trained_row_numbers', []))}).",
                             "Check the template, loss_scale and max_length: `workbench data show PROFILE --row N`."))
    if encoded and zero >= encoded:
        problems.append((name, "error", f"no row swift encoded trains a single token ({zero} of {encoded}): the run "
                         "would learn nothing (loss 0.0 from the first step).",
                         "Check the template, loss_scale and max_length: `workbench data show PROFILE --row N`."))
    if encoded and empty >= encoded:
        problems.append((name, "error", f"every assistant reply is empty ({empty} of {encoded} rows): there is "
                         "nothing to learn (only the end-of-turn token is trained).",
                         "Fill in the assistant replies; `workbench data show PROFILE --row N` shows a row."))
    return problems


def _rows(numbers: list[int], shown: int = 10) -> str:
    more = f" and {len(numbers) - shown} more" if len(numbers) > shown else ""
    return ", ".join(map(str, numbers[:shown])) + more


def _numbers(bad: list[dict[str, Any]], shown: int = 5) -> str:
    words = [f"line {b['line']}" if b.get("line") else f"row {b['row']}" for b in bad[:shown]]
    return ", ".join(words) + (" …" if len(bad) > shown else "")


def steps_per_epoch(rows: int, batch_size: int, grad_accum: int, world_size: int) -> int:
    """Optimizer steps in one epoch as HF Trainer + accelerate count them: the sampler's batches
    (last one partial) are sharded over the processes (even batches), then accumulated (the last,
    partial accumulation still steps)."""
    if rows <= 0:
        return 0
    batches = math.ceil(rows / batch_size)
    per_process = math.ceil(batches / world_size)
    return max(math.ceil(per_process / grad_accum), 1)
