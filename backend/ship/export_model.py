"""Ship the model: export a run's checkpoint to a format people serve, then check that it answers like the trained one.

    merged     the checkpoint's merged 16-bit model (the merge job, jobs/merge.py; an existing merge is reused)
    ollama     a Modelfile (FROM ./model: the merged model's files, hard-linked into the export folder, so the
               folder is whole on its own) whose TEMPLATE, SYSTEM and stop tokens are swift's template's,
               the one the model was trained with; written by a job whose child asks swift (the `ollama` worker)
    bnb-4bit, awq, gptq   `swift export --quant_method ...` on the merged model: these need a GPU (AWQ/GPTQ also a
               calibration dataset), so they are refused on a machine without CUDA, with the reason
    gguf       llama.cpp's own converter (convert_hf_to_gguf.py) when it is installed; no maintained pip package
               provides it, so otherwise refused with what to install and the command to run

Every export is a tracked job (jobs/job.py) writing into a hidden temporary folder beside its target, moved into
place only when complete (ExportFinish): nothing is overwritten. After each export the parity check
(jobs/parity.py) answers the first prompts of the run's data with the checkpoint and with the export and keeps
parity.json in the export's folder.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from backend.checkpoints.merged import MergedModel, merged_models
from backend.checkpoints.targets import ModelTarget, TargetError, choose_checkpoint, from_checkpoint, from_model_dir
from backend.core.collector import paused_while_loading, skip_last_collections
from backend.core.fs import write_text_atomic
from backend.jobs.job import ExportFinish, JobFinishError, JobFolder, JobSpec, start_job, wait_job
from backend.merge.job import MergeRefused, start_merge
from backend.rundir.layout import RunFolder
from backend.ship.parity import DEFAULT_ROWS, ParityReport, finish_parity, start_parity_job

FORMATS = ("merged", "bnb-4bit", "awq", "gptq", "gguf", "ollama")
EXPORTS_DIR_NAME = "exports"
MODELFILE = "Modelfile"
MODEL_DIR_NAME = "model"  # the merged model inside an Ollama export (the Modelfile's FROM ./model)
TEMPLATE_CHECK = "template_check.json"
# format -> (swift's --quant_method, bits, needs a calibration dataset)
QUANTIZED: dict[str, tuple[str, int, bool]] = {"bnb-4bit": ("bnb", 4, False), "awq": ("awq", 4, True),
                                               "gptq": ("gptq", 4, True)}
GGUF_CONVERTER_ENV = "WORKBENCH_GGUF_CONVERTER"  # path of llama.cpp's convert_hf_to_gguf.py
GGUF_CONVERTER_NAMES = ("convert_hf_to_gguf.py", "convert-hf-to-gguf", "convert_hf_to_gguf")
JobSeen = Callable[[str, JobFolder], None]  # (what the job does, its folder): told as each job starts


class ExportRefused(Exception):
    """The export was not started; the message says why and what to do instead."""


class ExportFailed(Exception):
    """A job of the export failed; the message names it and its log."""


@dataclass
class ExportPlan:
    run: RunFolder
    to: str
    checkpoint: Path
    why: str
    merged: MergedModel | None  # the checkpoint's existing merged model (reused), None: a merge runs first
    target: Path  # the export's folder (for merged: the merged model's folder)
    notes: list[str] = field(default_factory=list)


@dataclass
class ExportResult:
    to: str
    folder: Path
    checkpoint: Path
    parity: ParityReport | None

    def to_dict(self) -> dict[str, object]:
        return {"format": self.to, "folder": str(self.folder), "checkpoint": str(self.checkpoint),
                "parity": self.parity.to_dict() if self.parity else None}


def gguf_converter() -> Path | None:
    """llama.cpp's convert_hf_to_gguf.py: $WORKBENCH_GGUF_CONVERTER, or one on PATH."""
    named = os.environ.get(GGUF_CONVERTER_ENV)
    if named:
        return Path(named) if Path(named).is_file() else None
    for name in GGUF_CONVERTER_NAMES:
        found = shutil.which(name)
        if found:
            return Path(found)
    return None


def gguf_refusal(merged: str) -> str:
    return ("GGUF needs llama.cpp's own converter (convert_hf_to_gguf.py), and no maintained pip package installs "
            "it: the `gguf` package (0.19) holds only the file reader/writer, and llama-cpp-python ships the "
            "runtime, not the converter. Install it from llama.cpp's repository:\n"
            "  git clone --depth 1 https://github.com/ggml-org/llama.cpp\n"
            "  pip install -r llama.cpp/requirements/requirements-convert_hf_to_gguf.txt\n"
            f"then either run it yourself on the merged model:\n"
            f"  python llama.cpp/convert_hf_to_gguf.py {merged} --outfile model-f16.gguf --outtype f16\n"
            f"or set {GGUF_CONVERTER_ENV}=$PWD/llama.cpp/convert_hf_to_gguf.py and run this command again.")


def _has_cuda() -> bool:
    from backend.hardware.machine import detect_hardware

    return detect_hardware().has_cuda


def default_target(run: RunFolder, checkpoint: Path, to: str) -> Path:
    return run.path / EXPORTS_DIR_NAME / f"{checkpoint.name}-{to}"


def merged_of(run: RunFolder, checkpoint: Path) -> MergedModel | None:
    """The newest merged model made from this checkpoint, None when there is none."""
    mine = [m for m in merged_models([run.path]) if Path(m.checkpoint).resolve() == checkpoint.resolve()]
    return max(mine, key=lambda m: m.created_at) if mine else None


def plan_export(run: RunFolder, to: str, checkpoint: int | None = None, out: Path | None = None) -> ExportPlan:
    """Check everything before anything starts; ExportRefused says why not. Writes nothing."""
    if to not in FORMATS:
        raise ExportRefused(f"--to: {to!r} is not a format; choose one of {', '.join(FORMATS)}")
    try:
        found, why = choose_checkpoint(run, checkpoint)
    except TargetError as err:
        raise ExportRefused(str(err)) from None
    merged = merged_of(run, found)
    merged_path = str(merged.path) if merged else f"{run.path}/merged/{found.name}-merged"
    if to in QUANTIZED:
        method, bits, calibration = QUANTIZED[to]
        if not _has_cuda():
            need = "a CUDA GPU and a calibration dataset" if calibration else "a CUDA GPU"
            raise ExportRefused(f"--to {to}: swift export --quant_method {method} --quant_bits {bits} needs {need}; "
                                "this machine has no CUDA GPU, so nothing was started. Run it on a GPU machine: "
                                f"workbench export-model {run.run_id} --to {to}; here, --to merged or --to ollama "
                                "work.")
    if to == "gguf" and gguf_converter() is None:
        raise ExportRefused(f"--to gguf: {gguf_refusal(merged_path)}")
    target = Path(out).expanduser().resolve() if out else None
    notes = [f"checkpoint: {why}"]
    if to == "merged":
        if target is None and merged is not None:
            return ExportPlan(run, to, found, why, merged, merged.path,
                              [*notes, f"reusing the merged model {merged.path} (no new merge)"])
        target = target or Path(merged_path)
        merged = None
    else:
        target = target or default_target(run, found, to)
        notes.append(f"merged model: {merged.path} (reused)" if merged else f"merges {found.name} first")
    if target.exists():
        raise ExportRefused(f"{target} already exists; exports are never overwritten, nothing was changed. "
                            "Choose another folder with --out (or remove that one).")
    _refuse_out(run, target)
    return ExportPlan(run, to, found, why, merged, target, notes)


def _refuse_out(run: RunFolder, target: Path) -> None:
    """ExportRefused, before any job, for a target inside the run's checkpoint folder (the scoreboard would list
    it as a checkpoint) or where no folder can be made (its nearest existing folder is asked with a probe
    folder, made and removed at once)."""
    output = run.output_dir.resolve()
    if target == output or output in target.parents:
        raise ExportRefused(f"--out {target} is inside the run's checkpoint folder {output} (the scoreboard would "
                            "take it for a checkpoint); nothing was started. Choose a folder outside it.")
    parent = next(p for p in target.parents if p.exists())
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".workbench-probe-", dir=parent))
    except OSError as err:
        raise ExportRefused(f"--out {target}: no folder can be made in {parent} ({err.strerror or err}); nothing "
                            "was started. Choose a writable folder.") from None


def run_export(plan: ExportPlan, rows: int = DEFAULT_ROWS, seen: JobSeen | None = None,
               timeout: float | None = None) -> ExportResult:
    """Carry the plan out, job after job (merge when needed, the export, the parity check), waiting for each."""
    told = seen or (lambda what, job: None)
    step = int(plan.checkpoint.name.rsplit("-", 1)[1])
    merged_dir = plan.merged.path if plan.merged else None
    if merged_dir is None:
        try:
            job = start_merge(plan.run, step, output=plan.target if plan.to == "merged" else None)
        except MergeRefused as err:
            raise ExportRefused(str(err)) from None
        told("merge", job)
        _wait(job, "merge", timeout)
        merged_dir = Path(job.read_spec().output)
    merged_target = from_model_dir(merged_dir)
    exported, notes = merged_target, list[str]()
    if plan.to != "merged":
        job = start_export_job(plan, merged_target)
        told(f"export to {plan.to}", job)
        _wait(job, f"export to {plan.to}", timeout)
        exported, notes = _export_target(plan, merged_target)
    trained = from_checkpoint(plan.checkpoint, label=f"{plan.run.run_id} {plan.checkpoint.name} (adapter)")
    if trained.adapters == ():  # a full fine-tune checkpoint is a model already
        notes.append("a full fine-tune checkpoint: the merged model is the checkpoint itself")
    first = start_parity_job(plan.run, trained, rows)  # one model loaded at a time: the export's job after it
    told("parity: the trained checkpoint's answers", first)
    _wait(first, "parity (trained checkpoint)", timeout)
    second = start_parity_job(plan.run, exported, rows)
    told("parity: the export's answers", second)
    _wait(second, "parity (export)", timeout)
    report = finish_parity(plan.target, first, second, trained, exported, notes=notes)
    return ExportResult(plan.to, plan.target, plan.checkpoint, report)


def _wait(job: JobFolder, what: str, timeout: float | None) -> None:
    state = wait_job(job, timeout=timeout)
    if state.status != "finished":
        raise ExportFailed(f"{what} {state.status}: {state.failure_reason or 'see its log'} (job {job.job_id}, "
                           f"log {job.log_path})")


def _export_target(plan: ExportPlan, merged: ModelTarget) -> tuple[ModelTarget, list[str]]:
    """What answers as the export in the parity check, and what to say about it."""
    if plan.to == "ollama":
        notes = []
        check = _read_json(plan.target / TEMPLATE_CHECK)
        if check is not None:
            notes.append("Modelfile template renders a system/user/assistant exchange exactly as swift's "
                         f"{merged.template} template: {'yes' if check.get('same') else 'NO, see template_check.json'}")
        served = "ollama is installed, but" if shutil.which("ollama") else "ollama is not installed here, so"
        notes.append(f"{served} the answers compared are the Modelfile's FROM model (the merged folder) "
                     "through transformers")
        return merged, notes
    if plan.to == "gguf":
        return merged, ["no llama.cpp runtime is run here: the answers compared are the merged model's, "
                        "from which the GGUF was converted"]
    facts = {"model_type": merged.model_type, "template": merged.template}
    return from_model_dir(plan.target, **facts), []


def _read_json(path: Path) -> dict[str, object] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def start_export_job(plan: ExportPlan, merged: ModelTarget) -> JobFolder:
    """The export's own job (ollama, gguf, a quantization) on the merged model, into a hidden temporary folder."""
    temp = plan.target.parent / f".{plan.target.name}.partial-{secrets.token_hex(3)}"
    if plan.to == "ollama":
        argv = [sys.executable, "-m", "backend.ship.export_model", "ollama", "--model", merged.model,
                "--model-type", merged.model_type or "", "--template", merged.template or "", "--out", str(temp)]
    elif plan.to == "gguf":
        converter = gguf_converter()
        assert converter is not None  # checked by plan_export
        temp.mkdir(parents=True)
        argv = [sys.executable, str(converter), merged.model, "--outfile", str(temp / "model-f16.gguf"),
                "--outtype", "f16"]
    else:
        method, bits, calibration = QUANTIZED[plan.to]
        argv = [sys.executable, "-m", "swift.cli.export", "--model", merged.model, "--quant_method", method,
                "--quant_bits", str(bits), "--output_dir", str(temp)]
        for flag, value in (("--model_type", merged.model_type), ("--template", merged.template)):
            if value:
                argv += [flag, value]
        if calibration:
            from backend.ship.parity import parity_sources

            argv += ["--dataset", *parity_sources(plan.run)[0]]
    plan.target.parent.mkdir(parents=True, exist_ok=True)
    spec = JobSpec(kind="export", description=f"export {plan.checkpoint.name} of {plan.run.run_id} to {plan.to}",
                   argv=argv, cwd=str(Path(__file__).resolve().parents[2]), output=str(plan.target),
                   finish=ExportFinish(temp=str(temp), target=str(plan.target)), notes=plan.notes)
    return start_job(plan.run.jobs_dir, spec)


def finish_export(data: ExportFinish) -> str:
    """Run by the job's supervisor: move the finished export into place, never over an existing folder."""
    temp, target = Path(data.temp), Path(data.target)
    if not temp.is_dir() or not any(temp.iterdir()):
        raise JobFinishError(f"the export ended without writing anything into {temp}")
    if target.exists():
        raise JobFinishError(f"{target} appeared while this export ran; it was kept and the new export discarded")
    try:
        os.rename(temp, target)
    except OSError as err:
        raise JobFinishError(f"could not move the export into {target} ({err})") from None
    return f"export written to {target}"


# ---------------------------------------------------------------- Ollama: the Modelfile


@dataclass
class TemplatePieces:
    """swift's template as text: placeholders {{SYSTEM}} and {{QUERY}} as swift writes them."""

    system_prefix: str
    prefix: str
    prompt: str
    suffix: str
    default_system: str | None
    stop_words: list[str]


def modelfile_text(model_dir: str, pieces: TemplatePieces) -> str:
    """An Ollama Modelfile serving `model_dir` with the template the model was trained with: the same
    TEMPLATE as swift's --to_ollama, plus the default SYSTEM prompt swift trains with (its --to_ollama leaves
    it out) and the stop tokens (the end-of-turn token without the newline that follows it)."""
    system = pieces.system_prefix.replace("{{SYSTEM}}", "{{ .System }}")
    otherwise = f"{{{{ else }}}}{pieces.prefix}" if pieces.prefix else ""
    prompt = pieces.prompt.replace("{{QUERY}}", "{{ .Prompt }}")
    lines = [f"FROM {model_dir}",
             f'TEMPLATE """{{{{ if .System }}}}{system}{otherwise}{{{{ end }}}}{{{{ if .Prompt }}}}{prompt}'
             f'{{{{ end }}}}{{{{ .Response }}}}{pieces.suffix}"""']
    if pieces.default_system:
        lines.append(f'SYSTEM """{pieces.default_system}"""')
    stops = [pieces.suffix.strip(), *pieces.stop_words]
    for stop in dict.fromkeys(s for s in stops if s):
        lines.append(f"PARAMETER stop {json.dumps(stop)}")
    return "\n".join(lines) + "\n"


def render_modelfile_template(pieces: TemplatePieces, system: str | None, prompt: str, response: str) -> str:
    """What Ollama sends the model for one exchange, rendered from the same pieces as the Modelfile."""
    system = system if system is not None else pieces.default_system
    head = pieces.system_prefix.replace("{{SYSTEM}}", system) if system else pieces.prefix
    return head + pieces.prompt.replace("{{QUERY}}", prompt) + response + pieces.suffix


def _ollama_worker(args: argparse.Namespace) -> None:
    """In the job's child: ask swift's template for its pieces, write the Modelfile and check it."""
    with paused_while_loading():
        from swift import get_processor, get_template
        from swift.pipelines.export.ollama import replace_and_concat

        processor = get_processor(args.model, model_type=args.model_type or None)
        template = get_template(processor, template_type=args.template or None)
    meta = template.template_meta

    def text(items: list[object], placeholder: str = "", keyword: str = "") -> str:
        return str(replace_and_concat(template, items, placeholder, keyword))

    stops = [s if isinstance(s, str) else processor.decode(s) for s in (meta.stop_words or [])]
    pieces = TemplatePieces(text(meta.system_prefix or []), text(meta.prefix), text(meta.prompt), text(meta.suffix),
                            meta.default_system, stops)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    _copy_model(Path(args.model), out / MODEL_DIR_NAME)
    write_text_atomic(out / MODELFILE, modelfile_text(f"./{MODEL_DIR_NAME}", pieces))
    template.set_mode("train")
    cases = []
    for system in ("You are Quill.", None):
        messages = [{"role": "user", "content": "who are you?"}, {"role": "assistant", "content": "I am Quill."}]
        if system:
            messages.insert(0, {"role": "system", "content": system})
        swift_text = processor.decode(template.encode({"messages": messages})["input_ids"])
        ours = render_modelfile_template(pieces, system, "who are you?", "I am Quill.")
        cases.append({"system": system, "swift": swift_text, "modelfile": ours, "same": swift_text == ours})
    check = {"same": all(c["same"] for c in cases), "template": args.template, "cases": cases}
    write_text_atomic(out / TEMPLATE_CHECK, json.dumps(check, indent=2, ensure_ascii=False))
    print(f"Modelfile written; template check: {'same' if check['same'] else 'DIFFERENT'}", flush=True)


def _copy_model(source: Path, folder: Path) -> None:
    """The merged model's files in the export folder (hard links where the disk allows, else copies): the
    Modelfile's FROM is that folder, relative, so the export folder is whole wherever it is moved."""
    for item in sorted(source.rglob("*")):
        if item.is_symlink() or not (item.is_file() or item.is_dir()):
            continue
        goal = folder / item.relative_to(source)
        if item.is_dir():
            goal.mkdir(parents=True, exist_ok=True)
            continue
        goal.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(item, goal)
        except OSError:
            shutil.copy2(item, goal)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="workbench export worker")
    sub = parser.add_subparsers(dest="what", required=True)
    ollama = sub.add_parser("ollama", help="write an Ollama Modelfile for a model folder")
    ollama.add_argument("--model", required=True)
    ollama.add_argument("--model-type", default="")
    ollama.add_argument("--template", default="")
    ollama.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    _ollama_worker(args)


if __name__ == "__main__":
    skip_last_collections()  # torch and swift loaded: the end takes ~1.5 s less (backend/core/collector.py)
    main()
