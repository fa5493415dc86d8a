"""Parity check of an export: the same prompts answered greedily by the trained checkpoint (base + adapter)
and by the exported model, through the batch inference job (jobs/batch_infer.py); equal text is "same answers",
otherwise the first divergence is named (the prompt, both answers, the character where they part).

Kept in the export's folder as parity.json. No torch here: the answers come from the two infer jobs.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from backend.checkpoints.targets import ModelTarget
from backend.core.fs import write_text_atomic
from backend.inference.batch import InferRefused, InferSettings, plan_infer, validation_sources
from backend.jobs.job import JobFolder, start_job
from backend.rundir.layout import RunFolder

PARITY_NAME = "parity.json"
DEFAULT_ROWS = 5
MAX_NEW_TOKENS = 64
SAME = "same answers"
DIFFERENT = "different answers"
SAME_BUT_END = "same answers, different end-of-turn token"  # swift stops at its template's stop words; others don't


@dataclass
class Divergence:
    index: int
    prompt: str
    adapter: str
    export: str
    char: int  # first character where the two answers differ (== the shorter length when one extends the other)
    token: int | None  # first answer token that differs, when both token lists are known


@dataclass
class ParityReport:
    verdict: str
    rows: int
    same: int
    adapter: str  # what answered as the trained model
    export: str  # what answered as the export
    runtime: str
    source: list[str]
    first_divergence: Divergence | None = None
    notes: list[str] = field(default_factory=list)
    end_of_turn: list[str] = field(default_factory=list)  # how the export's end-of-turn differs from the trained one
    # the answers compared, row by row: {"index", "prompt", "trained", "export"} (export None: no answer)
    answers: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parity_sources(run: RunFolder) -> tuple[list[str], str]:
    """(dataset files, what they are): the run's validation data, else its training data."""
    try:
        return validation_sources(run), "validation"
    except InferRefused:
        pass
    args_path = run.output_dir / "args.json"
    args = json.loads(args_path.read_text(encoding="utf-8")) if args_path.is_file() else {}
    if args.get("dataset"):
        return list(args["dataset"]), "training"
    raise InferRefused(f"run {run.run_id} has no validation or training dataset recorded in {args_path}; "
                       "the parity check needs prompts")


def start_parity_job(run: RunFolder, target: ModelTarget, rows: int = DEFAULT_ROWS) -> JobFolder:
    """Start one batch inference job (`target` answering the first `rows` prompts). The parity check runs its two
    jobs one after the other (run_export waits for the first): one model loaded at a time, so a GPU that holds
    one holds the check."""
    sources, _ = parity_sources(run)
    settings = InferSettings(max_new_tokens=MAX_NEW_TOKENS, temperature=0.0, limit=rows)
    job_id, spec = plan_infer(run, dataset=sources, settings=settings, target=target)
    Path(spec.output).parent.mkdir(parents=True, exist_ok=True)
    return start_job(run.jobs_dir, spec, job_id=job_id)


def start_parity(run: RunFolder, trained: ModelTarget, exported: ModelTarget,
                 rows: int = DEFAULT_ROWS) -> tuple[JobFolder, JobFolder]:
    """Both jobs at once (tests comparing two models that both fit); run_export starts them one at a time."""
    return start_parity_job(run, trained, rows), start_parity_job(run, exported, rows)


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _first_difference(a: list[Any] | str, b: list[Any] | str) -> int:
    for position, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return position
    return min(len(a), len(b))


def end_of_turn(folder: Path) -> tuple[str | None, set[int]]:
    """(the tokenizer's eos_token, the ids generation stops at) of a model folder, as a serving runtime reads them
    (generation_config.json, else config.json)."""
    def read(name: str) -> dict[str, Any]:
        try:
            data = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    token = read("tokenizer_config.json").get("eos_token")
    ids = read("generation_config.json").get("eos_token_id", read("config.json").get("eos_token_id"))
    found = {ids} if isinstance(ids, int) else {i for i in ids or [] if isinstance(i, int)}
    return (token if isinstance(token, str) else None), found


def end_of_turn_differences(trained_model: str, export_model: str) -> list[str]:
    """What in the export's end-of-turn differs from the trained model's (its base folder): the tokenizer's
    eos_token, or a stop id of the trained model the export does not stop at. Empty when both agree or when
    either is not a local folder."""
    trained, export = Path(trained_model), Path(export_model)
    if not (trained.is_dir() and export.is_dir()):
        return []
    (token_a, ids_a), (token_b, ids_b) = end_of_turn(trained), end_of_turn(export)
    found = []
    if token_a != token_b:
        found.append(f"tokenizer eos_token: trained {token_a!r}, export {token_b!r}")
    if ids_a - ids_b:
        found.append(f"eos_token_id: the trained model stops at {sorted(ids_a)}, the export at {sorted(ids_b)} "
                     "(runtimes that stop at eos, such as vLLM, llama.cpp or transformers' generate, will run on "
                     "past the end of the answer)")
    return found


def compare(adapter_rows: list[dict[str, Any]], export_rows: list[dict[str, Any]], *, adapter: str, export: str,
            source: list[str], notes: list[str] | None = None, end: list[str] | None = None) -> ParityReport:
    """The parity report of two batch inference results (rows matched by their index)."""
    by_index = {row["index"]: row for row in export_rows}
    same, first = 0, None
    answers = []
    for row in sorted(adapter_rows, key=lambda r: r["index"]):
        other = by_index.get(row["index"])
        theirs = "" if other is None else str(other["answer"])
        answers.append({"index": row["index"], "prompt": row["prompt"], "trained": row["answer"],
                        "export": None if other is None else other["answer"]})
        if other is not None and row["answer"] == theirs:
            same += 1
            continue
        if first is None:
            tokens_a, tokens_b = row.get("tokens"), (other or {}).get("tokens")
            token = _first_difference(tokens_a, tokens_b) if tokens_a is not None and tokens_b is not None else None
            first = Divergence(row["index"], row["prompt"], row["answer"], theirs,
                               _first_difference(row["answer"], theirs), token)
    verdict = SAME if first is None and adapter_rows and len(export_rows) == len(adapter_rows) else DIFFERENT
    if verdict == SAME and end:
        verdict = SAME_BUT_END
    return ParityReport(verdict, len(adapter_rows), same, adapter, export,
                        "transformers (swift TransformersEngine, greedy, temperature 0)", source, first, notes or [],
                        end or [], answers)


def finish_parity(folder: Path, adapter_job: JobFolder, export_job: JobFolder, trained: ModelTarget,
                  exported: ModelTarget, notes: list[str] | None = None) -> ParityReport:
    """Compare the two finished jobs' answers (and the two models' end-of-turn tokens); keep the report as
    <folder>/parity.json."""
    report = compare(_rows(Path(adapter_job.read_spec().output)), _rows(Path(export_job.read_spec().output)),
                     adapter=trained.label, export=exported.label, source=_sources(adapter_job), notes=notes,
                     end=end_of_turn_differences(trained.model, exported.model))
    write_text_atomic(Path(folder) / PARITY_NAME, json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    return report


def _sources(job: JobFolder) -> list[str]:
    argv = job.read_spec().argv
    start = argv.index("--dataset") + 1
    end = next((i for i in range(start, len(argv)) if argv[i].startswith("--")), len(argv))
    return argv[start:end]


def read_parity(folder: Path) -> ParityReport | None:
    """The parity report kept in an export folder, or None when there is none (or it is damaged)."""
    try:
        data = json.loads((Path(folder) / PARITY_NAME).read_text(encoding="utf-8"))
        divergence = data.pop("first_divergence", None)
        return ParityReport(**data, first_divergence=Divergence(**divergence) if divergence else None)
    except (OSError, ValueError, TypeError):
        return None


def describe(report: ParityReport) -> list[str]:
    """The report as lines of plain text (never markup)."""
    lines = [f"parity: {report.verdict} ({report.same}/{report.rows} prompts answered alike)",
             f"  trained: {report.adapter}", f"  export:  {report.export}", f"  runtime: {report.runtime}"]
    d = report.first_divergence
    if d is not None:
        lines += [f"  first divergence: row {d.index}, character {d.char}"
                  + (f" (answer token {d.token})" if d.token is not None else ""),
                  f"    prompt:  {d.prompt!r}",
                  f"    trained: {d.adapter!r}",
                  f"    export:  {d.export!r}",
                  f"    common start: {d.adapter[:d.char]!r}"]
    lines += [f"  end of turn differs: {line}" for line in report.end_of_turn]
    lines += [f"  note: {note}" for note in report.notes]
    return lines
