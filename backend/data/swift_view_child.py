"""Oracle question `swift_data_child`, the child side of backend/data/swift_view.py: swift loads
and encodes the data.

Runs only in the oracle's child process: loads each dataset with swift's own `load_dataset` and
encodes the rows with swift's own template; watches swift's preprocessor to name each row it drops;
builds the trained-token view of one row. Heavy imports (swift, transformers) happen only inside
`answer()`.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

from backend.data.swift_view import HUB_NOTE, LISTED, VIEW_ROWS, DataRequest, Progress, steps_per_epoch
from backend.data.swift_view_drops import Drops, observe_preprocessor, reason, root_reason
from backend.data.swift_view_rows import (
    bad_lines,
    kept_indices,
    length_stats,
    line_map,
    line_of,
    segments,
    short_reason,
)
from backend.profile.batch import swift_default_accumulation


def answer(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:
    request = DataRequest(**{k: v for k, v in payload.items() if k not in ("mode", "row", "dataset")})
    child = _Child(request, progress)
    if payload.get("mode") == "row":
        return child.row(int(payload.get("dataset", 0)), int(payload["row"]))
    return child.report()


class _Child:
    def __init__(self, request: DataRequest, progress: Progress) -> None:
        self.request = request
        self.progress = progress
        self.drops = Drops()
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

        observe_preprocessor(self.drops)
        self.drops.reset()
        # num_proc=None: swift's own preprocessing, run in this process (datasets starts a pool for
        # num_proc=1), so the observer sees every row; the rows kept are the same
        train, _ = load_dataset([ref], num_proc=None, load_from_cache_file=False, columns=self.request.columns,
                                strict=False)
        return train, self.drops.seen

    def _load_failure(self, ref: str, err: BaseException) -> str:
        """Why swift cannot load `ref`, said as what it means: an empty file, every row dropped (with
        swift's reasons; its loader then divides by zero), else swift's own exception."""
        path = Path(ref.partition("#")[0])
        if _is_blank(path):
            return "the file is empty: there is no row to train on"
        seen, rows = self.drops.seen, self.drops.rows
        if seen and len(rows) >= seen:
            reasons = Counter(short_reason(why) for _, why in rows).most_common(3)
            said = "; ".join(f"{count} × {why}" for why, count in reasons)
            return f"swift drops every one of its {seen} rows, so nothing is left to train on ({said})"
        return f"swift cannot load it: {root_reason(err)}"

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
            "token_lengths": length_stats(lengths),
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
        """The profile's, else swift's default."""
        r = self.request
        return r.grad_accum or swift_default_accumulation(r.batch_size, r.world_size)

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
            return {**base, "status": "unreadable", "error": self._load_failure(ref, err),
                    "bad_lines": bad_lines(ref.partition("#")[0])}
        lines = line_map(ref)
        kept_raw = kept_indices(raw_rows, self.drops.rows, len(train))
        dropped = [{"row": i + 1, "line": line_of(lines, i), "reason": why} for i, why in self.drops.rows]
        result: dict[str, Any] = {
            **base, "status": "ok", "rows_in_file": raw_rows, "rows": len(train),
            "dropped": len(dropped), "dropped_rows": dropped[:LISTED],
            "drop_reasons": dict(Counter(short_reason(why) for _, why in self.drops.rows).most_common(10)),
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
        empty: list[int] = []
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
                errors.append({"row": number, "line": line_of(lines, raw), "reason": reason(err)})
                continue
            length = len(encoded["input_ids"])
            labels = encoded["labels"]
            if len(views) < VIEW_ROWS:  # the first rows' trained-token views come with the report
                views.append({"ref": label, "row": number, "line": line_of(lines, raw), "rows": total,
                              "template": real.template_meta.template_type,
                              **segments(full.tokenizer, encoded["input_ids"], labels, self.max_length,
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
                    errors.append({"row": number, "line": line_of(lines, raw), "reason": reason(err)})
                    continue
                lost += length - len(cut["input_ids"])
                length, labels = len(cut["input_ids"]), cut["labels"]
                trained = sum(1 for x in labels if x != -100)
            pack_lengths.append(length)
            tokens += length
            trained_tokens += trained
            if trained == 0:
                zero.append(number)
            elif _replies_empty(train[j]):
                empty.append(number)  # only the end-of-turn token is trained: nothing to learn
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
            "token_lengths": length_stats(ordered), "_lengths": ordered,
            "max_length": self.max_length, "truncation_strategy": strategy,
            "truncated_rows": len(over), "truncated_row_numbers": over[:LISTED], "tokens_lost": lost,
            "zero_trained_rows": len(zero), "zero_trained_row_numbers": zero[:LISTED],
            "empty_reply_rows": len(empty), "empty_reply_row_numbers": empty[:LISTED],
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
            return {"ref": label, "error": f"swift cannot load it: {root_reason(err)}"}
        lines = line_map(ref)
        base = {"ref": label, "row": number, "rows_in_file": raw_rows, "rows": len(train),
                "line": line_of(lines, number - 1)}
        if not 1 <= number <= raw_rows:
            return {**base, "error": f"row {number} does not exist: the dataset has {raw_rows} rows"}
        dropped = dict(self.drops.rows)
        if number - 1 in dropped:
            return {**base, "error": f"swift drops this row: {dropped[number - 1]}"}
        kept_raw = kept_indices(raw_rows, self.drops.rows, len(train))
        position = kept_raw.index(number - 1) if kept_raw is not None else number - 1
        templates = self._template_pair()
        if templates is None:
            return {**base, "error": self._template_error, "model_choice": self.model_choice}
        real, full = templates
        try:
            encoded = full.encode(train[position])
        except Exception as err:
            return {**base, "error": f"swift's template cannot encode this row: {reason(err)}"}
        return {**base, **segments(full.tokenizer, encoded["input_ids"], encoded["labels"], self.max_length,
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
    return {"field": field, "message": message, "choices": choices, "fix": fix, "swift_error": reason(err)}


def _is_blank(path: Path) -> bool:
    """A file with no row: empty, or only whitespace (a folder or an unreadable file is not blank)."""
    try:
        with open(path, "rb") as handle:
            while block := handle.read(1 << 20):
                if block.strip():
                    return False
    except OSError:
        return False
    return path.is_file()


def _replies_empty(row: Any) -> bool:
    """Whether every assistant turn of a row swift standardised (`messages`) says nothing."""
    try:
        replies = [m.get("content") for m in row["messages"] if m.get("role") == "assistant"]
    except (KeyError, TypeError, AttributeError):
        return False
    return bool(replies) and all(isinstance(text, str) and not text.strip() for text in replies)
