"""A run's diagnosis: where its step time went, honest throughput (real and padded tokens, model FLOPs per token
from the exact shape, MFU against the datasheet), and the verdicts. `workbench doctor RUN` prints it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.doctor.flops import TokenFlops, token_flops
from backend.doctor.measure import PARTS, Measured, read_measured
from backend.doctor.offload import offload_of
from backend.doctor.peaks import TERA, GpuPeak, gpu_peak
from backend.doctor.verdicts import RunSettings, Verdict, judge
from backend.models.shape import ModelShape
from backend.profile import LaunchProfile, ProfileError
from backend.rundir.layout import RunFolder

PART_NAMES = {"data_wait": "waiting for data", "forward_backward": "forward + backward", "optimizer": "optimizer step",
              "other_in_step": "rest of the step", "logging": "logging", "eval": "evaluation",
              "save": "checkpoint saving", "between_other": "other stalls between steps"}


@dataclass
class Diagnosis:
    run_id: str
    measured: Measured
    settings: RunSettings
    flops: TokenFlops | None
    shape_note: str
    peak: GpuPeak | None
    precision: str
    verdicts: list[Verdict]

    @property
    def lead(self) -> Any:
        return self.measured.lead

    def real_tokens_per_second(self) -> float | None:
        """Per GPU (per process), during steps."""
        lead = self.lead
        return lead.real_tokens / lead.in_steps if lead and lead.in_steps > 0 else None

    def mfu(self) -> tuple[float | None, str]:
        """(MFU, how it was found or why there is none)."""
        speed = self.real_tokens_per_second()
        lead = self.lead
        if lead is None or speed is None or self.flops is None:
            return None, "MFU: not measured yet (no step timed)"
        if lead.device_name is None:
            return None, "MFU: none on CPU (no datasheet peak for a CPU); tokens/s and FLOPs per token hold"
        if self.peak is None:
            return None, f"MFU: unknown GPU {lead.device_name!r} (not in the datasheet table)"
        peak = self.peak.tflops(self.precision) * TERA
        mfu = speed * self.flops.model / peak
        hfu = speed * self.flops.hardware / peak
        extra = f", HFU {hfu:.1%} with recompute" if self.flops.recompute else ""
        return mfu, (f"MFU {mfu:.1%} of {self.peak.name}'s {self.peak.tflops(self.precision):g} TFLOPS "
                     f"({self.precision}, datasheet){extra}")

    def padded_tokens_per_second(self) -> float | None:
        """Per process, during steps: what the matmuls spent on padding."""
        lead = self.lead
        return lead.padded_tokens / lead.in_steps if lead and lead.in_steps > 0 else None

    def lines(self) -> list[str]:
        """What `workbench doctor RUN` prints."""
        out = [f"doctor: run {self.run_id}", *self.measured_lines()]
        if self.lead is None:
            return out
        active = self.numbered()
        out.append("  verdicts:" if active else "  verdicts: none (no evidence of a fixable slowdown)")
        for number, verdict in active:
            hint = f"(`workbench doctor {self.run_id} --apply {number}` queues it)" if number else ""
            out += [f"    {line}" for line in verdict_text(verdict, number, hint)]
        return out + self.skipped_lines()

    def measured_lines(self) -> list[str]:
        """Where the step's time went, tokens real and padded, throughput, FLOPs per token and MFU."""
        lead = self.lead
        if lead is None:
            return ["  no step timed yet (the trainer writes step_time events at each log)",
                    *[f"  {p}" for p in self.measured.problems]]
        out = [f"  time over {len(lead.step_seconds)} steps (rank {lead.rank}, {lead.wall:.2f} s in the loop, "
               f"{lead.clock} clock):"]
        for part in PARTS:
            if lead.seconds[part] > 0:
                out.append(f"    {PART_NAMES[part]:<28} {lead.seconds[part]:9.3f} s  {lead.share(part):6.1%}")
        if len(self.measured.ranks) > 1:
            out.append("  per rank: " + ", ".join(
                f"rank {r.rank} median step {r.steady_step or 0:.3f} s"
                + (f" (its own work {r.own_work:.3f} s)" if r.own_work is not None else "")
                for r in self.measured.ranks.values()))
        share = self.measured.padding_share
        out.append(f"  tokens: {self.measured.real_tokens:,} real, {self.measured.padded_tokens:,} padding"
                   + (f" ({share:.1%} of the batches)" if share is not None else ""))
        speed, padded = self.real_tokens_per_second(), self.padded_tokens_per_second()
        if speed is not None:
            out.append(f"  throughput: {speed:,.0f} real tokens/s, {padded or 0:,.0f} padded tokens/s per process "
                       "during steps")
        if self.flops is not None:
            out.append(f"  FLOPs: {self.flops.describe()} [{self.shape_note}]")
        out.append(f"  {self.mfu()[1]}")
        return out

    def numbered(self) -> list[tuple[int | None, Verdict]]:
        """The verdicts found, each with its number for --apply (None: it changes nothing in the profile)."""
        out: list[tuple[int | None, Verdict]] = []
        number = 0
        for verdict in self.verdicts:
            if verdict.skipped is None:
                number += bool(verdict.change)
                out.append((number if verdict.change else None, verdict))
        return out

    def skipped_lines(self) -> list[str]:
        return [f"  skipped: {v.said}: {v.skipped}" for v in self.verdicts if v.skipped is not None] + [
            f"  {p}" for p in self.measured.problems]

    def applicable(self) -> list[Verdict]:
        """The verdicts with a profile change, numbered from 1 as printed."""
        return [v for v in self.verdicts if v.skipped is None and v.change]

    def to_json(self) -> dict[str, Any]:
        lead = self.lead
        mfu, mfu_text = self.mfu()
        return {
            "run": self.run_id,
            "steps": len(lead.step_seconds) if lead else 0,
            "seconds": dict(lead.seconds) if lead else {},
            "shares": {part: lead.share(part) for part in PARTS} if lead else {},
            "ranks": {r.rank: {"steps": len(r.step_seconds), "median_step": r.steady_step, "own_work": r.own_work,
                               "real_tokens": r.real_tokens, "padded_tokens": r.padded_tokens}
                      for r in self.measured.ranks.values()},
            "real_tokens": self.measured.real_tokens, "padded_tokens": self.measured.padded_tokens,
            "padding_share": self.measured.padding_share,
            "real_tokens_per_second": self.real_tokens_per_second(),
            "flops_per_token": self.flops.model if self.flops else None,
            "hardware_flops_per_token": self.flops.hardware if self.flops else None,
            "mfu": mfu, "mfu_said": mfu_text,
            "verdicts": [v.to_json() for v in self.verdicts],
            "problems": self.measured.problems,
        }


def verdict_text(verdict: Verdict, number: int | None, hint: str = "") -> list[str]:
    """One verdict as the doctor says it: the finding, its evidence, the gain it expects, the change."""
    out = [f"{f'{number}.' if number else '-'} {verdict.said}", f"   evidence: {verdict.evidence}",
           f"   expect: {verdict.gain}"]
    if verdict.change:
        out.append(f"   change: {verdict.change_text()}" + (f"  {hint}" if hint else ""))
    return out


def run_settings(run: RunFolder) -> RunSettings:
    """swift's args.json of the run (every default filled in); {} while swift has not written it."""
    try:
        args = json.loads((run.output_dir / "args.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        args = {}
    args = args if isinstance(args, dict) else {}
    try:
        profile: LaunchProfile | None = run.read_profile()
    except ProfileError:
        profile = None  # said by the verdicts that need it: none of them guesses
    return RunSettings(args, world_size=run.world_size() or 1, offload=offload_of(profile, args))


def run_flops(shape: ModelShape, settings: RunSettings, attended: float) -> TokenFlops:
    tuner = str(settings.get("tuner_type") or settings.get("train_type") or "lora")
    targets = settings.get("target_modules") or ["all-linear"]
    return token_flops(shape, tuner="full" if tuner == "full" else "lora", sequence=attended,
                       lora_rank=int(settings.get("lora_rank", 8)),
                       targets=tuple(targets if isinstance(targets, list) else [targets]),
                       recompute=bool(settings.get("gradient_checkpointing")))


def _shape(settings: RunSettings) -> tuple[ModelShape | None, str]:
    from backend.models.shape_exact import exact_shape
    from backend.models.shape_formula import ConfigError

    model = settings.get("model")
    if not model or not Path(str(model)).is_dir():
        return None, "no local model folder in args.json"
    try:
        shape = exact_shape(str(model))
    except (ConfigError, OSError, ValueError) as err:
        return None, f"model shape unknown ({err})"
    return shape, f"shape: {shape.count_label}"


def diagnose(run: RunFolder) -> Diagnosis:
    measured = read_measured(run.path)
    settings = run_settings(run)
    lead = measured.lead
    shape, note = _shape(settings)
    flops = run_flops(shape, settings, lead.attended_length) if shape is not None and lead is not None else None
    device_name = lead.device_name if lead else None
    peak = gpu_peak(device_name)
    begin = measured.begin
    precision = begin.precision if begin and begin.precision else "fp32"
    verdicts = judge(measured, settings, peak, device_name is not None, measured.gpu_memory)
    return Diagnosis(run.run_id, measured, settings, flops, note, peak, precision, verdicts)


def verdict_lines(run: RunFolder) -> list[str]:
    """The verdicts in one line each, for `workbench status` (no model shape asked: no child process)."""
    measured = read_measured(run.path)
    lead = measured.lead
    if lead is None:
        return []
    peak = gpu_peak(lead.device_name)
    verdicts = [v for v in judge(measured, run_settings(run), peak, lead.device_name is not None,
                                 measured.gpu_memory) if v.skipped is None]
    return [f"doctor: {v.said}" for v in verdicts] + ([f"  (`workbench doctor {run.run_id}` says why and what "
                                                        f"to change)"] if verdicts else [])
