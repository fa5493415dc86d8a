"""Export commands (`workbench export slurm|torchrun|skypilot`) and the per-machine view of `workbench show`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from backend.cli.common import console, err_console, fail, load_or_exit
from backend.core.safe_text import visible
from backend.hardware.machine import detect_hardware
from backend.launch.validate import Problem, validate
from backend.profile import LaunchProfile

export_app = typer.Typer(
    help="Write launches for other engines: a SLURM batch script, a SkyPilot task, or a plain torchrun script.",
    no_args_is_help=True,
)


def _print_problems(problems: list[Problem]) -> None:
    for problem in problems:
        colour = "yellow" if problem.severity == "warning" else "red"
        err_console.print(f"[{colour}]{escape(visible(problem))}[/]", highlight=False)


@export_app.command("slurm")
def slurm(
    profile: Annotated[str, typer.Argument(help="Profile file, or the name of a shipped profile.")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Batch script to write (default: "
                                                "job.sbatch in the new run folder).")] = None,
    nodes: Annotated[int | None, typer.Option(help="Nodes (machines); default: the profile's num_machines.")] = None,
    gpus_per_node: Annotated[int | None, typer.Option(
        "--gpus-per-node", help="GPUs (= processes) per node; 0 for CPU nodes; default: the profile's nproc_per_node.",
    )] = None,
    time: Annotated[str, typer.Option(help="Time limit, as SLURM writes it (HH:MM:SS, D-HH:MM:SS).")] = "04:00:00",
    partition: Annotated[str | None, typer.Option(help="SLURM partition (default: the cluster's).")] = None,
    account: Annotated[str | None, typer.Option(help="SLURM account to charge (default: yours).")] = None,
    cpus_per_task: Annotated[int | None, typer.Option("--cpus-per-task", help="CPU cores per node.")] = None,
    port: Annotated[int | None, typer.Option(help="Rendezvous port on the first node; default: the "
                                             "profile's main_process_port.")] = None,
    python: Annotated[str, typer.Option(help="The workbench's Python on the compute nodes.")] = sys.executable,
    workspace: Annotated[Path | None, typer.Option(help="Where the run folder goes (shared by all nodes).")] = None,
) -> None:
    """Write an sbatch script (and its run folder) that trains PROFILE on a SLURM allocation."""
    from backend.launchers import slurm as slurm_export
    from backend.runs.errors import LaunchRefused

    loaded, path = load_or_exit(profile)
    options = slurm_export.SlurmOptions(nodes=nodes, gpus_per_node=gpus_per_node, time=time, partition=partition,
                                        account=account, cpus_per_task=cpus_per_task, main_port=port, python=python)
    try:
        result = slurm_export.export_slurm(loaded, options, base_dir=path.parent, workspace=workspace,
                                           batch_script=output.resolve() if output else None)
    except (ValueError, FileExistsError) as err:
        fail(str(err))
    except LaunchRefused as err:
        _print_problems(err.problems)
        raise typer.Exit(2) from None
    hardware = slurm_export.allocation_hardware(slurm_export.gpus_per_node(loaded, options))
    warnings = slurm_export.cluster_problems(result.profile, hardware, path.parent)
    _print_problems([p for p in warnings if p.severity == "warning"])
    d = result.profile.distribution
    note = slurm_export.device_note(loaded, options)
    console.print(f"wrote {result.batch_script}\n  run {result.run.run_id}: {d.num_machines} node(s) x "
                  f"{d.nproc_per_node} process(es), {d.strategy} on {d.device}\n  run folder: {result.run.path}\n"
                  + (f"  {note}\n" if note else "")
                  + f"  submit: sbatch {result.batch_script}\n  follow: workbench status {result.run.run_id}",
                  highlight=False, soft_wrap=True, markup=False)


@export_app.command("skypilot")
def skypilot(
    profile: Annotated[str, typer.Argument(help="Profile file, or the name of a shipped profile.")],
    bucket: Annotated[str, typer.Option(help="The bucket the run folder lives in (mounted, MOUNT mode): a name "
                                        "SkyPilot creates or reuses, or s3://NAME/PATH, gs://... .")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Task YAML to write (default: print it).")] = None,
    accelerator: Annotated[str | None, typer.Option(help="GPU name (A100, H100 ...); default: any the memory "
                                                    "forecast fits.")] = None,
    nodes: Annotated[int | None, typer.Option(help="Nodes; default: the profile's num_machines.")] = None,
    spot: Annotated[bool, typer.Option("--spot", help="Spot instances (a preemption is recovered from the newest "
                                       "checkpoint).")] = False,
    infra: Annotated[str | None, typer.Option(help="Where: aws, gcp/us-central1, k8s ... (default: any enabled).")] = None,
    max_restarts: Annotated[int, typer.Option("--max-restarts", help="Restarts after a failure that is not a "
                                              "preemption.")] = 0,
) -> None:
    """Write a SkyPilot task YAML that trains PROFILE as a managed job, checked by SkyPilot's own parser."""
    from backend.launchers.skypilot import SkyOptions, export_skypilot
    from backend.oracle.sky_task import SkyPilotMissing, SkyTaskRefused, check_task
    from backend.runs.errors import LaunchRefused

    loaded, path = load_or_exit(profile)
    if output is not None and output.exists():
        fail(f"{output} exists; remove it or give another -o path")
    options = SkyOptions(bucket=bucket, accelerator=accelerator, nodes=nodes, use_spot=spot, infra=infra,
                         max_restarts=max_restarts)
    try:
        exported = export_skypilot(loaded, options, base_dir=path.parent)
        check_task(exported.text)
    except ValueError as err:  # SkyTaskRefused too: SkyPilot's words
        fail(("SkyPilot refused the task: " if isinstance(err, SkyTaskRefused) else "") + visible(err))
    except SkyPilotMissing as err:
        fail(str(err))
    except LaunchRefused as err:
        _print_problems(err.problems)
        raise typer.Exit(2) from None
    _print_problems(exported.warnings)
    if output is None:
        print(exported.text, end="")
        return
    from backend.core.fs import write_text_atomic

    write_text_atomic(output, exported.text)
    lines = [f"wrote {output} (checked by SkyPilot's parser)", f"  run {exported.run_id} in the bucket {bucket}",
             *(f"  {note}" for note in exported.notes), f"  submit: {exported.launch_command(output)}"]
    console.print("\n".join(lines), highlight=False, markup=False, soft_wrap=True)


@export_app.command("torchrun")
def torchrun(
    profile: Annotated[str, typer.Argument(help="Profile file, or the name of a shipped profile.")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Script to write (default: print it).")] = None,
    run_dir: Annotated[Path | None, typer.Option(help="Folder for the config files and events (default: a "
                                                 "preview folder).")] = None,
) -> None:
    """Print (or write) a bash script that starts PROFILE's training with plain torchrun."""
    from backend.launchers.shell import write_script
    from backend.launchers.torchrun import export_torchrun
    from backend.rundir.layout import preview_dir

    loaded, path = load_or_exit(profile)
    folder = (run_dir or preview_dir(loaded.name) / "torchrun").resolve()
    hardware = detect_hardware()
    _print_problems(validate(loaded, hardware, base_dir=path.parent))
    try:
        exported = export_torchrun(loaded, folder, hardware, base_dir=path.parent)
    except ValueError as err:
        fail(str(err))
    if output is None:
        print(exported.script, end="")
        return
    if output.exists():
        fail(f"{output} exists; remove it or give another -o path")
    write_script(output, exported.script)
    console.print(f"wrote {output} (config files in {exported.run_dir})", highlight=False, soft_wrap=True)


def show_nodes(profile: LaunchProfile, path: Path, folder: Path, node: int | None) -> None:
    """`workbench show --node K / --all-nodes`: machine K's (or every machine's) exact command."""
    from backend.launch.command import FlagLikeValue
    from backend.launch.nodes import check_node, check_rank, node_commands, render_node_commands

    if node is not None:
        try:
            check_rank(profile, node)
        except ValueError as err:
            fail(f"--node: {err}")
    hardware = detect_hardware()
    try:
        commands = node_commands(profile, folder, hardware, base_dir=path.parent,
                                 ranks=None if node is None else [node])
    except FlagLikeValue as err:  # never print a line that would smuggle a flag
        fail(f"{err}; the command is not printed")
    commands[0].plan.write_configs()  # the rank is on each line, so one config file serves every machine
    this_rank = node if node is not None else profile.distribution.machine_rank
    _print_problems(validate(profile, hardware, base_dir=path.parent) + check_node(profile, this_rank))
    console.print(f"# {commands[0].rendezvous.describe()}", highlight=False, soft_wrap=True)
    console.print(f"# before the run, on every machine at about the same time: workbench preflight {path} --node K "
                  "(the address, the ranks, the versions, the shared output folder, an all-reduce)", highlight=False,
                  markup=False, soft_wrap=True)
    console.print(f"# accelerate config (the same file on every machine): {commands[0].plan.accelerate_config_path}",
                  highlight=False, soft_wrap=True)
    console.print(commands[0].plan.accelerate_yaml(), highlight=False, markup=False, end="")
    if commands[0].plan.deepspeed_config_path:
        console.print(f"# DeepSpeed config: {commands[0].plan.deepspeed_config_path}", highlight=False, soft_wrap=True)
    print(render_node_commands(commands), end="")


def register(app: typer.Typer) -> None:
    app.add_typer(export_app, name="export")
