"""Oracle question `swift_data`: what ms-swift itself makes of a dataset, and which tokens it trains.

The child loads each dataset with swift's own `load_dataset` (every documented format, column
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

Parent side: `payload_for()` builds the payload from a profile (the key of the cache: file contents,
model, template, system, max_length and the rest), `inspect_profile()` / `inspect_file()` /
`show_row()` ask (cached), `cached_report()` answers from the cache only (never starts a child).
Heavy imports happen only inside `answer()`, in the child.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

QUESTION = "swift_data"
LIBRARIES = ("ms-swift", "transformers", "datasets")
DEFAULT_SAMPLE_LIMIT = 20_000  # rows encoded at most per dataset; above it a random sample, said so
LISTED = 50  # row numbers / errors listed per kind
VIEW_ROWS = 3  # trained-token views of the first rows, sent with the report
# the model's files a report depends on: the template and special tokens read from them decide the
# encoding, config.json the model type and context length
MODEL_INPUTS = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                "chat_template.jinja", "chat_template.json", "generation_config.json")
HUB_NOTE = "hub dataset: not inspected offline (swift downloads it at launch)"
Progress = Callable[[str], None]


# ================================================================ parent side (light imports only)


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
                template: str | None = None) -> DataRequest:
    """The request that matches what `swift sft` will do with this profile's datasets."""
    from backend.refs import resolve_dataset, resolve_model

    refs = list(getattr(profile.data, which))
    columns = _extra(profile, "columns")
    if isinstance(columns, str):
        import json

        try:
            columns = json.loads(columns)
        except ValueError:
            columns = None
    return DataRequest(
        refs=[_resolve_ref(ref, base_dir, resolve_dataset) for ref in refs],
        labels=refs,
        model=model or resolve_model(profile.model.source, base_dir, build=build_model),
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


def _resolve_ref(ref: str, base_dir: Path | None, resolve: Callable[..., str]) -> str:
    try:
        return resolve(ref, base_dir)
    except KeyError:
        return ref  # an unknown builtin: the child reports it as missing


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
        stats += [(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files]
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
    if sum(size for _, size, _ in _stats(request)) > CACHED_LOOKUP_BYTES:
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


def profile_requests(profile: Any, base_dir: Path | None, *, build_model: bool = False) -> list[tuple[str, DataRequest]]:
    """(profile field, request) for the train and val datasets."""
    pairs = [("data.train", request_for(profile, base_dir, which="train", build_model=build_model))]
    if profile.data.val:
        pairs.append(("data.val", request_for(profile, base_dir, which="val", build_model=build_model)))
    return [(name, request) for name, request in pairs if request.refs]


def profile_data_problems(profile: Any, base_dir: Path | None, *, ask: bool = False,
                          progress: Progress | None = None) -> list[tuple[str, str, str, str]]:
    """(field, severity, message, fix) from swift's report on the profile's data.

    `ask=False` (live validation) uses only a report already known; `ask=True` (`workbench validate`)
    asks swift (cached), so unreadable data fails before any model loads."""
    from backend.oracle import OracleError

    problems: list[tuple[str, str, str, str]] = []
    try:
        requests = profile_requests(profile, base_dir, build_model=ask)
    except Exception as err:  # a model that cannot be built, say: the data check only says so
        return [("data.train", "warning", f"the data could not be checked with swift: {err}",
                 "Run `workbench data inspect` on the profile to see the details.")]
    for name, request in requests:
        if ask:
            try:
                report = ask_report(request, progress=progress)
            except OracleError as err:
                problems.append((name, "warning", f"swift could not inspect the data: {err}",
                                 "Run `workbench data inspect` on the profile to see the details."))
                continue
            remember(request, report)
        else:
            report = known_report(request)
        if report is not None:
            problems += data_problems(name, report)
    return problems


def data_problems(name: str, report: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Errors: a dataset swift cannot read or keeps no row of. Warnings: rows dropped, more than 5 %
    of rows over max_length, rows that train no token."""
    problems = []
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
        over = data.get("truncated_rows", 0)
        if rows and over / rows > TRUNCATED_WARNING_SHARE:
            verb = "deletes" if data.get("truncation_strategy") == "delete" else "truncates"
            problems.append((name, "warning", f"{over} of {rows} rows of {ref!r} are longer than max_length "
                             f"{data.get('max_length')}: swift {verb} them ({data.get('tokens_lost', 0)} tokens "
                             f"lost; rows {_rows(data.get('truncated_row_numbers', []))}).",
                             "Raise training.max_length, or shorten those rows."))
        if data.get("zero_trained_rows"):
            problems.append((name, "warning", f"{data['zero_trained_rows']} rows of {ref!r} train no token at all "
                             f"(rows {_rows(data.get('zero_trained_row_numbers', []))}).",
                             "Check the template, loss_scale and max_length: `workbench data show PROFILE --row N`."))
    return problems


def _rows(numbers: list[int], shown: int = 10) -> str:
    more = f" and {len(numbers) - shown} more" if len(numbers) > shown else ""
    return ", ".join(map(str, numbers[:shown])) + more


def _numbers(bad: list[dict[str, Any]], shown: int = 5) -> str:
    words = [f"line {b['line']}" if b.get("line") else f"row {b['row']}" for b in bad[:shown]]
    return ", ".join(words) + (" …" if len(bad) > shown else "")


# ================================================================ child side


def answer(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
    request = DataRequest(**{k: v for k, v in payload.items() if k not in ("mode", "row", "dataset")})
    child = _Child(request, progress)
    if payload.get("mode") == "row":
        return child.row(int(payload.get("dataset", 0)), int(payload["row"]))
    return child.report()


class _Drops:
    """Rows swift's preprocessor drops, seen from inside swift's own loop (raw row index, reason)."""

    def __init__(self) -> None:
        self.seen = 0
        self.rows: list[tuple[int, str]] = []

    def reset(self) -> None:
        self.seen, self.rows = 0, []


def _reason(err: BaseException) -> str:
    text = " ".join(str(err).split())
    if len(text) > 240:
        text = text[:239] + "…"
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _observe_preprocessor(drops: _Drops) -> None:
    """Wrap swift's `RowPreprocessor.batched_preprocess` so each dropped row is recorded with the
    exception swift raised for it. A clean batch runs swift's code once, unchanged; a batch with a
    bad row is re-run row by row in strict mode to name it. The rows kept are exactly swift's."""
    from swift.dataset.preprocessor.core import RowPreprocessor

    original = RowPreprocessor.batched_preprocess
    if getattr(original, "_workbench_observed", False):
        return

    def observed(self: Any, batched_row: dict[str, Any], *, strict: bool,
                 ignore_max_length_error: bool) -> dict[str, Any]:
        size = len(next(iter(batched_row.values()))) if batched_row else 0
        start = drops.seen
        drops.seen += size
        try:
            result = original(self, batched_row, strict=True, ignore_max_length_error=ignore_max_length_error)
            if _batch_size(result) == size:
                return result
        except Exception:
            if strict:
                raise
        kept: list[dict[str, Any]] = []
        for i in range(size):
            one = {key: values[i:i + 1] for key, values in batched_row.items()}
            fields = ", ".join(k for k, v in one.items() if v and v[0] is not None)
            try:
                result = original(self, one, strict=True, ignore_max_length_error=ignore_max_length_error)
            except Exception as err:  # swift (strict=False) deletes this row
                drops.rows.append((start + i, f"{_reason(err)} (row fields: {fields})"))
                continue
            if _batch_size(result) == 0:
                drops.rows.append((start + i, f"swift's {type(self).__name__} keeps nothing of this row "
                                              f"(row fields: {fields or 'none'})"))
                continue
            kept += self.batched_to_rows(result)
        merged = self.rows_to_batched(kept)
        if not merged:
            merged["messages"] = []
        return merged

    observed._workbench_observed = True  # type: ignore[attr-defined]
    RowPreprocessor.batched_preprocess = observed  # type: ignore[method-assign]


def _root_reason(err: BaseException) -> str:
    """The first exception of a chain (datasets wraps the parser's error), and the wrapper's text."""
    root = err
    while (root.__cause__ or root.__context__) is not None and root is not (root.__cause__ or root.__context__):
        root = root.__cause__ or root.__context__  # type: ignore[assignment]
    return _reason(err) if root is err else f"{_reason(root)} ({type(err).__name__})"


def _batch_size(batched: dict[str, Any] | None) -> int:
    if not batched:
        return 0
    return max((len(v) for v in batched.values() if v is not None), default=0)


def _length_stats(ordered: list[int]) -> dict[str, float]:
    return {"p50": _percentile(ordered, 50), "p90": _percentile(ordered, 90), "p99": _percentile(ordered, 99),
            "max": ordered[-1] if ordered else 0, "min": ordered[0] if ordered else 0,
            "mean": round(sum(ordered) / len(ordered), 1) if ordered else 0}


def _percentile(ordered: list[int], q: float) -> int:
    """Nearest-rank percentile of sorted values."""
    if not ordered:
        return 0
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def steps_per_epoch(rows: int, batch_size: int, grad_accum: int, world_size: int) -> int:
    """Optimizer steps in one epoch as HF Trainer + accelerate count them: the sampler's batches
    (last one partial) are sharded over the processes (even batches), then accumulated (the last,
    partial accumulation still steps)."""
    if rows <= 0:
        return 0
    batches = math.ceil(rows / batch_size)
    per_process = math.ceil(batches / world_size)
    return max(math.ceil(per_process / grad_accum), 1)


class _Child:
    def __init__(self, request: DataRequest, progress: Progress) -> None:
        self.request = request
        self.progress = progress
        self.drops = _Drops()
        self._templates: tuple[Any, Any] | None = None
        self._template_error: str | None = None
        self.model_choice: dict[str, Any] | None = None  # swift needs model_type/template set: which, choices
        self.max_length = request.max_length  # None until the model says (swift: the model's max_model_len)

    # ------------------------------------------------------------ loading

    def _kind(self, ref: str) -> str:
        path = ref.partition("#")[0]
        if os.path.exists(path):
            return "local"
        if path.startswith(("/", "./", "../", "~")) or Path(path).suffix.lower() in (
                ".jsonl", ".json", ".csv", ".txt"):
            return "missing"
        return "hub"

    def _load(self, ref: str) -> tuple[Any, int]:
        """swift's own load of one dataset: (the dataset swift trains on, rows before preprocessing)."""
        from swift.dataset import load_dataset

        _observe_preprocessor(self.drops)
        self.drops.reset()
        # num_proc=None: swift's own preprocessing, run in this process (datasets starts a pool for
        # num_proc=1), so the observer sees every row; the rows kept are the same
        train, _ = load_dataset([ref], num_proc=None, load_from_cache_file=False, columns=self.request.columns,
                                strict=False)
        return train, self.drops.seen

    def _template_pair(self) -> tuple[Any, Any] | None:
        """swift's template as training uses it, and the same without max_length (full lengths)."""
        if self._templates is not None or self._template_error is not None:
            return self._templates
        r = self.request
        if not os.path.isdir(r.model):
            self._template_error = f"model {r.model!r} is not a local folder: rows are loaded, not encoded"
            return None
        from swift import get_processor, get_template

        self.progress(f"loading the tokenizer and template ({r.template or 'from the model'})")
        strategy = r.truncation_strategy or "delete"
        kwargs = dict(template_type=r.template, default_system=r.system, agent_template=r.agent_template,
                      loss_scale=r.loss_scale)
        try:
            processor = get_processor(r.model, model_type=r.model_type)
            if self.max_length is None:  # swift's default: the model's own limit
                self.max_length = processor.model_info.max_model_len
            real = get_template(processor, max_length=self.max_length,
                                truncation_strategy="raise" if strategy == "delete" else strategy, **kwargs)
        except ValueError as err:  # swift cannot infer or does not know model_type/template: data, not a crash
            self.model_choice = _model_choice(r, err)
            if self.model_choice is None:
                raise
            self._template_error = f"rows are loaded, not encoded: swift needs {self.model_choice['field']}"
            return None
        full = get_template(processor, max_length=None, **kwargs)
        for template in (real, full):
            template.set_mode("train")
        self._templates = (real, full)
        return self._templates

    # ------------------------------------------------------------ report

    def report(self) -> dict[str, Any]:
        started = time.monotonic()
        datasets = [self._report_one(i, ref) for i, ref in enumerate(self.request.refs)]
        train_rows = sum(d.get("train_rows", 0) for d in datasets)
        estimated = any(d.get("sampled") for d in datasets)
        steps = None
        if all(d["status"] == "ok" for d in datasets) and datasets:
            rows = train_rows
            if self.request.packing:
                packs = sum(d.get("packs") or 0 for d in datasets)
                rows = packs if packs else rows
            if self.request.split_dataset_ratio:
                rows -= math.ceil(self.request.split_dataset_ratio * rows)
            steps = steps_per_epoch(rows, self.request.batch_size, self._grad_accum(), self.request.world_size)
        lengths = sorted(n for d in datasets for n in d.pop("_lengths", []))
        tokens = sum(d.get("tokens", 0) for d in datasets)
        trained = sum(d.get("trained_tokens", 0) for d in datasets)
        errors = [{"dataset": d["ref"], **e, "kind": kind} for d in datasets
                  for kind, key in (("dropped by swift's loader", "dropped_rows"),
                                    ("swift's template cannot encode it", "encode_error_rows"))
                  for e in d.get(key, [])]
        errors += [{"dataset": d["ref"], **e, "kind": "not valid JSON"} for d in datasets for e in d.get("bad_lines", [])]
        return {
            "datasets": datasets,
            "rows": sum(d.get("rows") or 0 for d in datasets),
            "dropped": sum(d.get("dropped") or 0 for d in datasets),
            "token_lengths": _length_stats(lengths),
            "truncated_rows": sum(d.get("truncated_rows", 0) for d in datasets),
            "tokens_lost": sum(d.get("tokens_lost", 0) for d in datasets),
            "zero_trained_rows": sum(d.get("zero_trained_rows", 0) for d in datasets),
            "trained_token_fraction": round(trained / tokens, 4) if tokens else 0.0,
            "errors": errors[:LISTED * 4],
            "train_rows": train_rows,
            "steps_per_epoch": steps,
            "steps_estimated": estimated,
            "max_length": self.max_length,
            "batch": {"per_device_train_batch_size": self.request.batch_size,
                      "gradient_accumulation_steps": self._grad_accum(),
                      "world_size": self.request.world_size, "packing": self.request.packing,
                      "split_dataset_ratio": self.request.split_dataset_ratio},
            "template": self._templates[0].template_meta.template_type if self._templates else None,
            "template_note": self._template_error,
            "model_choice": self.model_choice,
            "seconds": round(time.monotonic() - started, 3),
        }

    def _grad_accum(self) -> int:
        """The profile's, else swift's default (swift/trainers/arguments.py: 16 / batch / world size)."""
        r = self.request
        return r.grad_accum or max(1, math.ceil(16 / r.batch_size / r.world_size))

    def _report_one(self, index: int, ref: str) -> dict[str, Any]:
        label = self.request.labels[index] if index < len(self.request.labels) else ref
        base: dict[str, Any] = {"ref": label, "resolved": ref, "kind": self._kind(ref)}
        if base["kind"] == "hub":
            return {**base, "status": "hub", "note": HUB_NOTE}
        if base["kind"] == "missing":
            return {**base, "status": "unreadable", "error": f"{ref.partition('#')[0]} does not exist"}
        self.progress(f"{label}: loading with swift's load_dataset")
        try:
            train, raw_rows = self._load(ref)
        except Exception as err:
            return {**base, "status": "unreadable", "error": f"swift cannot load it: {_root_reason(err)}",
                    "bad_lines": _bad_lines(ref.partition("#")[0])}
        lines = _line_map(ref)
        kept_raw = _kept_indices(raw_rows, self.drops.rows, len(train))
        dropped = [{"row": i + 1, "line": _line(lines, i), "reason": why} for i, why in self.drops.rows]
        result: dict[str, Any] = {
            **base, "status": "ok", "rows_in_file": raw_rows, "rows": len(train),
            "dropped": len(dropped), "dropped_rows": dropped[:LISTED],
            "drop_reasons": dict(Counter(_short(d["reason"]) for d in dropped).most_common(10)),
            "sampled_ref": "#" in ref, "line_numbers": lines is not None,
        }
        if len(train) == 0:
            return {**result, "status": "empty", "error": "swift keeps no row of this dataset",
                    "train_rows": 0}
        templates = self._template_pair()
        if templates is None:
            return {**result, "train_rows": len(train), "encoded": 0, "note": self._template_error}
        result.update(self._encode_all(label, train, kept_raw, lines, templates))
        return result

    def _encode_all(self, label: str, train: Any, kept_raw: list[int] | None, lines: list[int] | None,
                    templates: tuple[Any, Any]) -> dict[str, Any]:
        r = self.request
        real, full = templates
        strategy = r.truncation_strategy or "delete"
        total = len(train)
        indices = list(range(total))
        sampled = total > r.sample_limit
        if sampled:
            indices = sorted(random.Random(0).sample(indices, r.sample_limit))
        lengths: list[int] = []
        pack_lengths: list[int] = []
        over: list[int] = []
        zero: list[int] = []
        errors: list[dict[str, Any]] = []
        views: list[dict[str, Any]] = []
        trained_tokens = tokens = lost = 0
        last = time.monotonic()
        for done, j in enumerate(indices, start=1):
            raw = kept_raw[j] if kept_raw is not None else j
            number = raw + 1
            try:
                encoded = full.encode(train[j])
            except Exception as err:
                errors.append({"row": number, "line": _line(lines, raw), "reason": _reason(err)})
                continue
            length = len(encoded["input_ids"])
            labels = encoded["labels"]
            if len(views) < VIEW_ROWS:  # the first rows' trained-token views come with the report
                views.append({"ref": label, "row": number, "line": _line(lines, raw), "rows": total,
                              "template": real.template_meta.template_type,
                              **_segments(full.tokenizer, encoded["input_ids"], labels, self.max_length,
                                          r.truncation_strategy)})
            lengths.append(length)
            trained = sum(1 for x in labels if x != -100)
            if self.max_length is not None and length > self.max_length:
                over.append(number)
                if strategy == "delete":
                    lost += length
                    continue  # swift deletes the row: nothing of it is trained
                try:
                    cut = real.encode(train[j])
                except Exception as err:
                    errors.append({"row": number, "line": _line(lines, raw), "reason": _reason(err)})
                    continue
                lost += length - len(cut["input_ids"])
                length, labels = len(cut["input_ids"]), cut["labels"]
                trained = sum(1 for x in labels if x != -100)
            pack_lengths.append(length)
            tokens += length
            trained_tokens += trained
            if trained == 0:
                zero.append(number)
            if time.monotonic() - last > 1.0:
                last = time.monotonic()
                self.progress(f"{label}: encoded {done:,} of {len(indices):,} rows with swift's template")
        ordered = sorted(lengths)
        encoded_rows = len(indices)
        scale = total / encoded_rows if sampled and encoded_rows else 1.0
        deleted = len(over) if strategy == "delete" else 0
        train_rows = total - round((deleted + len(errors)) * scale)
        packs = None
        if r.packing and not sampled and pack_lengths and self.max_length:
            from swift.dataset.packing import calculate_matched_group

            groups, _ = calculate_matched_group(list(enumerate(pack_lengths)), self.max_length, is_finished=True)
            packs = len(groups)
        return {
            "encoded": encoded_rows, "sampled": sampled, "sample_limit": r.sample_limit,
            "token_lengths": _length_stats(ordered), "_lengths": ordered,
            "max_length": self.max_length, "truncation_strategy": strategy,
            "truncated_rows": len(over), "truncated_row_numbers": over[:LISTED], "tokens_lost": lost,
            "zero_trained_rows": len(zero), "zero_trained_row_numbers": zero[:LISTED],
            "trained_tokens": trained_tokens, "tokens": tokens,
            "trained_token_fraction": round(trained_tokens / tokens, 4) if tokens else 0.0,
            "encode_errors": len(errors), "encode_error_rows": errors[:LISTED],
            "train_rows": max(train_rows, 0), "packs": packs, "views": views,
        }

    # ------------------------------------------------------------ one row

    def row(self, dataset: int, number: int) -> dict[str, Any]:
        refs = self.request.refs
        if not 0 <= dataset < len(refs):
            return {"error": f"dataset {dataset} does not exist (the profile lists {len(refs)})"}
        ref = refs[dataset]
        label = self.request.labels[dataset] if dataset < len(self.request.labels) else ref
        kind = self._kind(ref)
        if kind == "hub":
            return {"ref": label, "error": HUB_NOTE}
        if kind == "missing":
            return {"ref": label, "error": f"{ref.partition('#')[0]} does not exist"}
        self.progress(f"{label}: loading with swift's load_dataset")
        try:
            train, raw_rows = self._load(ref)
        except Exception as err:
            return {"ref": label, "error": f"swift cannot load it: {_root_reason(err)}"}
        lines = _line_map(ref)
        base = {"ref": label, "row": number, "rows_in_file": raw_rows, "rows": len(train),
                "line": _line(lines, number - 1)}
        if not 1 <= number <= raw_rows:
            return {**base, "error": f"row {number} does not exist: the dataset has {raw_rows} rows"}
        dropped = dict(self.drops.rows)
        if number - 1 in dropped:
            return {**base, "error": f"swift drops this row: {dropped[number - 1]}"}
        kept_raw = _kept_indices(raw_rows, self.drops.rows, len(train))
        position = kept_raw.index(number - 1) if kept_raw is not None else number - 1
        templates = self._template_pair()
        if templates is None:
            return {**base, "error": self._template_error, "model_choice": self.model_choice}
        real, full = templates
        try:
            encoded = full.encode(train[position])
        except Exception as err:
            return {**base, "error": f"swift's template cannot encode this row: {_reason(err)}"}
        return {**base, **_segments(full.tokenizer, encoded["input_ids"], encoded["labels"], self.max_length,
                                    self.request.truncation_strategy),
                "template": real.template_meta.template_type, "messages": train[position].get("messages")}


def _model_choice(request: DataRequest, err: ValueError) -> dict[str, Any] | None:
    """What the user must set when swift cannot infer (or does not know) the model_type or the template,
    with the choices swift's own registry offers; None when the error is about something else."""
    import json

    from swift.model.model_meta import get_matched_model_types
    from swift.model.register import MODEL_MAPPING
    from swift.template.register import TEMPLATE_MAPPING

    config = Path(request.model) / "config.json"
    try:
        architectures = json.loads(config.read_text(encoding="utf-8")).get("architectures") or []
    except (OSError, ValueError):
        architectures = []
    arch = architectures[0] if architectures else "an unknown architecture"
    matches = list(get_matched_model_types(architectures or None))  # swift's own candidates
    model_type, template = request.model_type, request.template
    if model_type is None and len(matches) == 1:
        model_type = matches[0]  # swift inferred it: the error is about the template, if anything
    if model_type is None or model_type not in MODEL_MAPPING:
        field, choices = "model.model_type", matches
        if model_type is not None:
            message = f"swift does not know model_type {model_type!r}"
        elif matches:
            message = f"swift cannot infer model_type: {arch} matches {len(matches)} types"
        else:
            message = f"swift cannot infer model_type for {arch}"
    else:
        meta = MODEL_MAPPING[model_type]
        field, choices = "model.template", list(meta.candidate_templates)
        if template is None and not meta.template and len(choices) != 1:
            message = f"swift cannot infer the template of model_type {model_type}"
        elif template is not None and template not in TEMPLATE_MAPPING:
            message = f"swift does not know template {template!r}"
        else:
            return None  # swift's error is about something else: a real failure
    fix = (f"Set {field} to one of: {', '.join(choices)}." if choices
           else f"Set {field} (swift's supported models list the values).")
    return {"field": field, "message": message, "choices": choices, "fix": fix, "swift_error": _reason(err)}


def _segments(tokenizer: Any, ids: list[int], labels: list[int], max_length: int | None,
              truncation_strategy: str | None) -> dict[str, Any]:
    """Runs of tokens that share (trained, special, lost) decoded as one piece of text each."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    for token_id, token in (getattr(tokenizer, "added_tokens_decoder", {}) or {}).items():
        if getattr(token, "special", False):
            special.add(int(token_id))
    length = len(ids)
    strategy = truncation_strategy or "delete"
    kept = (0, length)
    if max_length is not None and length > max_length:
        kept = (length - max_length, length) if strategy == "left" else (0, max_length)
    segments: list[dict[str, Any]] = []
    run: list[int] = []
    state: tuple[bool, bool, bool] | None = None

    def flush() -> None:
        if run and state is not None:
            text = tokenizer.decode(run, skip_special_tokens=False, clean_up_tokenization_spaces=False)
            segments.append({"text": text, "trained": state[0], "special": state[1], "lost": state[2],
                             "tokens": len(run)})

    for position, (token_id, label) in enumerate(zip(ids, labels, strict=False)):
        lost = not kept[0] <= position < kept[1]
        current = (label != -100, token_id in special, lost)
        if current != state or current[1]:
            flush()
            run, state = [], current
        run.append(token_id)
    flush()
    trained = sum(1 for x in labels if x != -100)
    return {"segments": segments, "tokens": length, "trained_tokens": trained,
            "max_length": max_length, "truncation_strategy": strategy,
            "over_max_length": length > (max_length or length),
            "deleted": strategy == "delete" and kept != (0, length), "kept": list(kept)}


def _short(reason: str) -> str:
    return reason.split(":")[0] if len(reason) > 80 else reason


def _kept_indices(raw_rows: int, drops: list[tuple[int, str]], kept: int) -> list[int] | None:
    """Raw (file-order) index of each row swift kept, when each raw row gave at most one row."""
    dropped = {i for i, _ in drops}
    indices = [i for i in range(raw_rows) if i not in dropped]
    return indices if len(indices) == kept else None


def _line(lines: list[int] | None, index: int) -> int | None:
    return lines[index] if lines is not None and 0 <= index < len(lines) else None


def _line_map(ref: str) -> list[int] | None:
    """The line each raw row starts on, in the order swift reads a single file (None when unknown:
    folders, `#N` samples)."""
    path_part, _, sample = ref.partition("#")
    path = Path(path_part)
    if sample or not path.is_file():
        return None
    suffix = path.suffix.lower()
    if suffix == ".txt":
        with open(path, encoding="utf-8", errors="replace") as handle:
            return [number for number, _ in enumerate(handle, start=1)]
    from backend.inspect_data import iter_records

    try:
        return [line for line, _ in iter_records(path)]
    except Exception:
        return None


def _bad_lines(path_part: str) -> list[dict[str, Any]]:
    """Where a file swift cannot load is broken (lines that are not JSON), found by reading it."""
    from backend.inspect_data import RowError, iter_records

    path = Path(path_part)
    if not path.is_file():
        return []
    bad = []
    try:
        for line, record in iter_records(path):
            if isinstance(record, RowError):
                bad.append({"line": line, "reason": str(record)})
                if len(bad) >= LISTED:
                    break
    except Exception:
        return bad
    return bad
