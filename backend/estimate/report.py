"""Plain-text rendering with rich: the breakdown with a bar per term, the seed's textbook
view beside ours, host RAM, and the fit verdict."""

from __future__ import annotations

import io

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from backend.core.units import count, gib, in_unit, size, unit_for
from backend.estimate.phases import PHASE_HELP
from backend.estimate.planner import TERM_HELP, Estimate

BAR_WIDTH = 28
_EIGHTHS = " ▏▎▍▌▋▊▉"


def bar(value: float, largest: float, width: int = BAR_WIDTH) -> str:
    """A horizontal bar in eighth-blocks, `width` cells for the largest value."""
    if largest <= 0 or value <= 0:
        return ""
    cells = value / largest * width
    full, rest = int(cells), int((cells - int(cells)) * 8)
    return "█" * full + (_EIGHTHS[rest] if rest else "")


def render_table(estimate: Estimate, describe_terms: bool = False) -> RenderableType:
    """Everything a reader needs, as one rich renderable (print it with a rich Console).

    describe_terms adds a column saying what each term is (needs about 120 columns).
    """
    parts: list[RenderableType] = [_header(estimate), _timeline_table(estimate, describe_terms),
                                   _breakdown_table(estimate, describe_terms), _seed_table(estimate),
                                   _host_line(estimate)]
    if estimate.fit is not None:
        parts.append(_fit_text(estimate))
    if estimate.notes:
        parts.append(Text("\n".join(f"note: {n}" for n in estimate.notes), style="yellow"))
    return Group(*parts)


def render_text(estimate: Estimate, width: int = 120) -> str:
    """The same as `render_table`, as plain text without colour codes."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False, highlight=False)
    console.print(render_table(estimate, describe_terms=width >= 120))
    return buffer.getvalue()


def _header(est: Estimate) -> Text:
    s, r = est.shape, est.request
    tuner = r.tuner if r.tuner == "full" else f"{r.tuner} r={r.lora_rank} on {','.join(r.resolved_targets)}"
    lines = [
        f"{s.architecture} ({s.model_type}): {count(s.total_params)} parameters, {s.count_label}, "
        f"{s.num_layers} layers, "
        f"hidden {s.hidden_size}, {s.num_heads} heads / {s.num_kv_heads} kv heads, vocab {s.vocab_size}",
        f"{tuner}; {r.precision} (weights {r.weight_dtype}); {est.sharding_label}; batch {r.batch_size} x "
        f"{r.max_length} tokens; gradient checkpointing {'on' if r.gradient_checkpointing else 'off'}",
        f"trainable {count(est.params['trainable'])} parameters; {est.state_convention.describe()}",
    ]
    return Text("\n".join(lines))


def _timeline_table(est: Estimate, describe_terms: bool) -> Table:
    """One row per phase: GPU per device, host per node, and the largest terms of each."""
    table = Table(title=f"Timeline: the GPU peaks in {est.peak_phase}, host RAM in {est.host_peak_phase}",
                  title_justify="left")
    unit = unit_for(max((max(p.gpu_total, p.host_total) for p in est.phases), default=0))
    table.add_column("phase")
    table.add_column(f"GPU {unit[0]}", justify="right")
    table.add_column(f"host {unit[0]}", justify="right")
    table.add_column("largest terms", overflow="fold")
    if describe_terms:
        table.add_column("what happens", overflow="fold")
    for phase in est.phases:
        terms = sorted(((v, k) for k, v in phase.gpu.items() if v), reverse=True)[:3]
        mark = " (peak)" if phase.name == est.peak_phase else ""
        extra = [PHASE_HELP[phase.name]] if describe_terms else []
        table.add_row(phase.name + mark, in_unit(phase.gpu_total, unit), in_unit(phase.host_total, unit),
                      ", ".join(f"{k} {size(v)}" for v, k in terms), *extra,
                      style="bold" if mark else None)
    return table


def _breakdown_table(est: Estimate, describe_terms: bool) -> Table:
    table = Table(title=f"Per-device GPU memory at the peak ({est.peak_phase})", title_justify="left")
    total = est.per_device_total_bytes
    unit = unit_for(total)
    table.add_column("term")
    table.add_column(unit[0], justify="right")
    table.add_column("share", justify="right")
    table.add_column("", no_wrap=True)
    if describe_terms:
        table.add_column("what it is", overflow="fold")
    shown = {k: v for k, v in est.breakdown.items() if v > 0}
    largest = max(shown.values(), default=0)
    for name, value in shown.items():
        extra = [TERM_HELP.get(name, "")] if describe_terms else []
        table.add_row(name, in_unit(value, unit), f"{value / total:.0%}", bar(value, largest), *extra)
    table.add_row("total", in_unit(total, unit), "100%", "", *(["per device"] if describe_terms else []), style="bold")
    return table


def _seed_table(est: Estimate) -> Table:
    """The seed's textbook numbers next to ours, term by comparable term."""
    seed, b, req = est.seed, est.phase("steady_step").gpu, est.request  # the textbook sizes a training step
    ours_states = sum(b[k] for k in ("weights", "weights_quantized", "quant_constants", "adapter_weights",
                                     "master_weights", "gradients", "optimizer_states", "autocast_copies"))
    checkpoints = est.shape.num_layers * req.compute_bytes * est.shape.hidden_size * req.batch_size * req.max_length
    table = Table(title=f"Textbook (seed formulas, exact, ci={seed.ci}) vs refined", title_justify="left")
    unit = unit_for(max(seed.total_bytes, sum(b.values())))
    name = unit[0]

    def sized(n: float) -> str:
        return in_unit(n, unit)

    table.add_column("quantity")
    table.add_column("textbook", justify="right")
    table.add_column("refined", justify="right")
    table.add_column("why they differ", overflow="fold")
    rows = [
        ("parameters", count(seed.phi), count(est.shape.total_params),
         "12*nl*hd^2: GPT 4hd MLP, no embeddings"),
        (f"model states {name}", sized(seed.model_states_bytes), sized(ours_states),
         "16*Phi unsharded vs tuner + sharding"),
        (f"act. checkpoints {name}", sized(seed.activation_checkpoint_bytes),
         sized(checkpoints) if req.gradient_checkpointing else "off", "same 2*bsz*seq*hd per layer"),
        (f"activations {name}", sized(seed.activation_checkpoint_bytes + seed.activation_working_bytes),
         sized(b["activations"] + b["backward_working"]), "textbook keeps s^2 scores; SwiGLU wider"),
        (f"logits {name}", "-", sized(b["logits"]), "no vocabulary term in the textbook"),
        (f"state working {name}", sized(seed.model_state_working_bytes), sized(b["sharding_working"]),
         "one hd x 4hd linear vs whole FSDP units"),
    ]
    for row in rows:
        table.add_row(*row)
    table.add_row(f"total {name}", sized(seed.total_bytes), sized(sum(b.values())),
                  "refined adds context, allocator", style="bold")
    return table


def _host_line(est: Estimate) -> Text:
    steady = ", ".join(f"{k} {size(v)}" for k, v in est.host_breakdown.items() if v)
    return Text(f"Host RAM per node: {size(est.host_total_bytes)} (steady {size(est.host_steady_bytes)}: "
                f"{steady}; load-time peak {size(est.host_load_peak_bytes)})")


def _fit_text(est: Estimate) -> Text:
    fit = est.fit
    assert fit is not None
    style = {"fits": "green", "tight": "yellow", "does not fit": "red"}[fit.status]
    text = Text()
    text.append(f"GPU {gib(fit.gpu_memory_bytes, 2)} GiB: ")
    text.append(f"{fit.status.upper()} ({fit.utilization:.0%})", style=f"bold {style}")
    batch = fit.max_batch_size if fit.max_batch_size is not None else "none (batch 1 does not fit)"
    length = "none" if fit.max_length is None else f"{fit.max_length:,}"
    if fit.max_length_is_model_limit:
        length += " (the model's max_position_embeddings)"
    text.append(f"\nlargest batch size that fits: {batch}; largest max_length that fits: {length}")
    if fit.host_memory_bytes is not None:
        verdict = "fits" if fit.host_fits else "DOES NOT FIT"
        text.append(f"\nhost RAM {gib(est.host_total_bytes, 2)} of {gib(fit.host_memory_bytes, 2)} GiB per node: {verdict}")
    ladder = "; ".join(f"{s.label} {gib(s.per_device_total_bytes, 2)}{'' if s.fits else ' x'}" for s in fit.strategies)
    text.append(f"\ncheapest strategy that fits: {fit.cheapest_strategy or 'none'}  [GiB per GPU: {ladder}]")
    return text
