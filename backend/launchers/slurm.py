"""`workbench export slurm`: an sbatch script that runs a profile on the nodes of a SLURM job,
into a run folder the workbench monitors like any other.

The export makes a new run folder (the same files `workbench run` writes) plus:

    <run>/slurm_node.sh   one machine's launcher: `accelerate launch` with --machine_rank $SLURM_NODEID
    <run>/job.sbatch      the batch script (or the file given with -o)

Preemption (#27): the script asks SLURM for `--signal=B:USR1@120` (SIGUSR1 to the batch step 120 s before
the time limit or a preemption) and `--requeue`. The batch shell `exec`s the supervisor, so the supervisor
itself gets that SIGUSR1 and passes it on to the trainer as a save-and-stop request (backend/contract/save_request.py:
a file in the shared run folder, seen by rank 0 wherever it runs): the trainer saves at the end of its
step and stops. The job profile has `[run] save_on_term = true`, so SLURM's SIGTERM does the same. When
SLURM requeues the job (SLURM_RESTART_COUNT > 0), the supervisor resumes the run in place from its
newest complete checkpoint (resume.prepare_resume); the step count carries on.

When the job starts, the batch script takes the main address from the allocation's first
host (`scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1`) and runs the workbench's
supervisor on that node (`python -m backend.cli.supervise slurm RUN_DIR`). The supervisor runs
command.json's argv, `srun ... bash slurm_node.sh`, which starts one launcher per node, keeps
state.json current and records how the job ended. The run folder, the model and the
datasets must be on a file system every node sees.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from backend.cluster.slurm_job import JOB_FILE_NAME
from backend.core.fs import write_text_atomic
from backend.core.paths import workspace_dir
from backend.core.process_identity import RUN_MARKER_ENV
from backend.core.shell_words import ShellVar, export_lines, render_command, substitute
from backend.hardware.machine import GpuInfo, HardwareInfo
from backend.launch.cluster_device import ClusterGpus, cluster_gpus
from backend.launch.command import LaunchPlan, build_launch
from backend.launch.validate import Problem, ResolvedProfile, errors, resolve_profile, validate
from backend.launchers.shell import write_script
from backend.profile import LaunchProfile
from backend.rundir import index
from backend.rundir.layout import RunFolder, RunState, new_run_id
from backend.runs.errors import LaunchRefused
from backend.runs.start import write_run_files

NODE_SCRIPT_NAME = "slurm_node.sh"
BATCH_SCRIPT_NAME = "job.sbatch"
# written into the run's profile and accelerate config: the real address is known only when the job starts
MAIN_ADDRESS_PLACEHOLDER = "$MAIN_ADDR"
# SLURM --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
TIME_PATTERN = re.compile(r"\d+(:\d{1,2}){0,2}|\d+-\d{1,2}(:\d{1,2}){0,2}")
NAME_PATTERN = re.compile(r"[A-Za-z0-9_.,+-]+")
# rules that ask this machine's GPUs; the compute nodes' GPUs cannot be asked from here
HARDWARE_FIELDS = ("precision.bf16", "precision.tf32")


@dataclass(frozen=True)
class SlurmOptions:
    """The allocation to ask for; None means: take it from the profile."""

    nodes: int | None = None
    gpus_per_node: int | None = None
    time: str = "04:00:00"
    partition: str | None = None
    account: str | None = None
    cpus_per_task: int | None = None
    job_name: str | None = None
    main_port: int | None = None
    mem_mib: int | None = None  # --mem per node (`queue add --slurm`: the host RAM forecast plus the margin)
    python: str = sys.executable  # the Python environment with the workbench, as the compute nodes see it

    def problems(self) -> list[str]:
        """Bad options, each naming the option and the fix."""
        found = []
        if self.nodes is not None and self.nodes < 1:
            found.append(f"--nodes {self.nodes}: ask for at least 1 node")
        if self.gpus_per_node is not None and self.gpus_per_node < 0:
            found.append(f"--gpus-per-node {self.gpus_per_node}: use 0 (CPU nodes) or more")
        if not TIME_PATTERN.fullmatch(self.time):
            found.append(f"--time {self.time!r} is not a SLURM time; use minutes, HH:MM:SS or D-HH:MM:SS")
        for option, value in (("--partition", self.partition), ("--account", self.account),
                              ("--job-name", self.job_name)):
            if value is not None and not NAME_PATTERN.fullmatch(value):
                found.append(f"{option} {value!r}: use letters, digits and _ . , + - only")
        if self.cpus_per_task is not None and self.cpus_per_task < 1:
            found.append(f"--cpus-per-task {self.cpus_per_task}: use 1 or more")
        if self.main_port is not None and not 1 <= self.main_port <= 65535:
            found.append(f"--port {self.main_port}: use a port from 1 to 65535")
        if self.mem_mib is not None and self.mem_mib < 1:
            found.append(f"memory request {self.mem_mib} MiB: use 1 MiB or more")
        return found


@dataclass
class SlurmExport:
    run: RunFolder
    batch_script: Path
    node_script: Path
    profile: LaunchProfile


def gpus_per_node(profile: LaunchProfile, options: SlurmOptions) -> int:
    """The GPUs a node asks for, by the one rule of cluster submissions (backend.launch.cluster_device)."""
    return slurm_gpus(profile, options).per_node


def device_note(profile: LaunchProfile, options: SlurmOptions) -> str | None:
    """What to say of the GPUs asked for when the profile left its device to "auto"; None otherwise."""
    return slurm_gpus(profile, options).note


def slurm_gpus(profile: LaunchProfile, options: SlurmOptions) -> ClusterGpus:
    return cluster_gpus(profile, named=options.gpus_per_node, how_to_name="--gpus-per-node")


def job_profile(profile: LaunchProfile, options: SlurmOptions) -> LaunchProfile:
    """The profile as the job runs it: the allocation's shape, SLURM's GPUs, rank from the node id."""
    job = profile.model_copy(deep=True)
    d = job.distribution
    gpus = gpus_per_node(profile, options)
    d.num_machines = options.nodes or d.num_machines
    d.machine_rank = 0
    d.gpu_ids = []  # SLURM sets CUDA_VISIBLE_DEVICES to the node's allocated GPUs
    d.device = "cuda" if gpus else "cpu"
    if gpus:
        d.nproc_per_node = gpus
    if d.strategy == "single" and d.world_size > 1:
        d.strategy = "ddp"
    if d.num_machines > 1:
        d.main_process_ip = MAIN_ADDRESS_PLACEHOLDER
    if options.main_port is not None:
        d.main_process_port = options.main_port
    job.run.save_on_term = True  # SLURM's SIGTERM at the time limit or a preemption: save, then stop (#27)
    return job


def allocation_hardware(gpus: int) -> HardwareInfo:
    """What one node of the allocation has, as far as it is known from here."""
    # the nodes' cores and RAM are not known from here (0: validate skips the rules that need them)
    return HardwareInfo(gpus=tuple(GpuInfo(index=i, name="GPU of the SLURM allocation") for i in range(gpus)),
                        cpu_count=0, ram_total_bytes=0)


def cluster_problems(profile: LaunchProfile, hardware: HardwareInfo, base_dir: Path | None,
                     resolved: ResolvedProfile | None = None) -> list[Problem]:
    """Validation against the allocation; GPU-model checks become warnings (not askable from here).
    `resolved`: the model and datasets as the export resolved them (resolved by validate when None)."""
    problems = []
    for problem in validate(profile, hardware, base_dir=base_dir, resolved=resolved):
        if problem.field in HARDWARE_FIELDS and problem.severity == "error":
            problem = Problem(
                problem.field, "warning",
                f"{problem.field.split('.')[1]} needs Ampere or newer GPUs (compute capability >= 8.0) and CUDA >= 11 "
                "on the compute nodes; that cannot be checked from here.",
                "Check a node of the partition (`nvidia-smi --query-gpu=name,compute_cap --format=csv`), or turn "
                "it off.")
        problems.append(problem)
    return problems


def export_slurm(
    profile: LaunchProfile,
    options: SlurmOptions,
    *,
    base_dir: Path | None = None,
    workspace: Path | None = None,
    batch_script: Path | None = None,
) -> SlurmExport:
    """Make the run folder and both scripts; nothing is submitted. Raises ValueError for bad
    options, LaunchRefused for profile errors, FileExistsError for an existing batch script."""
    bad = options.problems()
    if bad:
        raise ValueError("; ".join(bad))
    if batch_script is not None and batch_script.exists():
        raise FileExistsError(f"{batch_script} exists; remove it or give another -o path")
    job = job_profile(profile, options)
    hardware = allocation_hardware(gpus_per_node(profile, options))
    resolved = resolve_profile(job, base_dir)  # once: the scripts name what was validated
    blocking = errors(cluster_problems(job, hardware, base_dir, resolved))
    if blocking:
        raise LaunchRefused(blocking)
    resolved.build_model()
    folder = (workspace or workspace_dir()) / new_run_id(job.name)
    folder.mkdir(parents=True)
    run = RunFolder(folder)
    plan = build_launch(job, run.path, hardware, base_dir=base_dir, python=options.python, resolved=resolved)
    plan.env.pop("CUDA_VISIBLE_DEVICES", None)
    write_run_files(run, job, plan, base_dir)  # profile, configs, command, state, forecast: as `workbench run` does
    node_script = run.path / NODE_SCRIPT_NAME
    write_script(node_script, render_node_script(run, plan))
    srun = srun_argv(job, options, node_script)
    command = {"argv": srun, "env": plan.redacted_env(), "cwd": str(run.path), "output_dir": str(plan.output_dir),
               "shell": shlex.join(srun), "node_argv": plan.argv, "slurm": dataclasses.asdict(options)}
    write_text_atomic(run.command_path, json.dumps(command, indent=2))
    batch = batch_script or run.path / BATCH_SCRIPT_NAME
    write_script(batch, render_batch_script(run, job, options, batch))
    index.register(run.path)
    return SlurmExport(run=run, batch_script=batch, node_script=node_script, profile=job)


def srun_argv(job: LaunchProfile, options: SlurmOptions, node_script: Path) -> list[str]:
    """One task per node; GPUs and CPUs named again because srun steps do not always inherit them."""
    nodes = job.distribution.num_machines
    argv = ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    gpus = gpus_per_node(job, options)
    if gpus:
        argv.append(f"--gpus-per-node={gpus}")
    if options.cpus_per_task:
        argv.append(f"--cpus-per-task={options.cpus_per_task}")
    return [*argv, "bash", str(node_script)]


def render_node_script(run: RunFolder, plan: LaunchPlan) -> str:
    tokens = substitute(plan.argv, {
        "--machine_rank": ShellVar("SLURM_NODEID"),
        "--main_process_ip": ShellVar("MAIN_ADDR"),
        "--main_process_port": ShellVar("MAIN_PORT"),
    })
    command = render_command(tokens, break_after="swift.cli.sft", tail='"$@"')
    return f"""#!/bin/bash
# One machine's launcher of run {run.run_id}; srun starts it once on every node of the job.
# The machine rank is SLURM_NODEID; MAIN_ADDR and MAIN_PORT come from the batch script.
# Arguments are passed on to swift (`workbench resume` adds --resume_from_checkpoint).
set -euo pipefail
: "${{SLURM_NODEID:?start this with srun inside the SLURM job}}"
: "${{MAIN_ADDR:?set by the batch script}}"
: "${{MAIN_PORT:?set by the batch script}}"
{export_lines(plan.env)}
cd {shlex.quote(plan.cwd)}
exec {command}
"""


def _sbatch_lines(job: LaunchProfile, options: SlurmOptions, run: RunFolder) -> list[str]:
    nodes = job.distribution.num_machines
    gpus = gpus_per_node(job, options)
    lines = [f"--job-name={options.job_name or _job_name(job.name)}", f"--nodes={nodes}", "--ntasks-per-node=1"]
    if gpus:
        lines.append(f"--gpus-per-node={gpus}")
    if options.cpus_per_task:
        lines.append(f"--cpus-per-task={options.cpus_per_task}")
    if options.mem_mib:
        lines.append(f"--mem={options.mem_mib}M")
    lines.append(f"--time={options.time}")
    # SIGUSR1 to the batch step (the supervisor) 120 s before the end: save and stop; then run again (#27)
    lines += ["--signal=B:USR1@120", "--requeue"]
    if options.partition:
        lines.append(f"--partition={options.partition}")
    if options.account:
        lines.append(f"--account={options.account}")
    lines.append(f"--output={run.path / 'slurm-%j.out'}")
    return [f"#SBATCH {line}" for line in lines]


def _job_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "-", name).strip("-")[:64] or "workbench"


def render_batch_script(run: RunFolder, job: LaunchProfile, options: SlurmOptions, path: Path) -> str:
    d = job.distribution
    header = "\n".join(_sbatch_lines(job, options, run))
    python = shlex.quote(options.python)
    return f"""#!/bin/bash
{header}
#
# finetune-workbench run {run.run_id} of profile "{job.name}":
# {d.num_machines} node(s) x {d.nproc_per_node} process(es), {d.strategy}, on {d.device}.
#   submit:  sbatch {shlex.quote(str(path))}
#   follow:  workbench status {run.run_id}   (from another machine: workbench attach {shlex.quote(str(run.path))})
# The run folder, the model and the datasets must be on a file system every node sees, and
# {python} must be the workbench's Python environment on every node.
set -euo pipefail
: "${{SLURM_JOB_NODELIST:?submit this script with sbatch}}"

RUN_DIR={shlex.quote(str(run.path))}
# machine 0 is the allocation's first host; each node's machine rank is its SLURM_NODEID
MAIN_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)"
MAIN_PORT={d.main_process_port}
export MAIN_ADDR MAIN_PORT

cd "$RUN_DIR"
# the run's marker: every process of the run carries it, the supervisor too (it proves who keeps the run)
export {RUN_MARKER_ENV}="$RUN_DIR"
# the workbench's supervisor runs `srun ... {NODE_SCRIPT_NAME}` (command.json) and keeps state.json current.
# exec: the supervisor is the batch step, so it gets --signal=B:USR1 itself and passes it on to the trainer
# (a save-and-stop request in the run folder); requeued (SLURM_RESTART_COUNT > 0), it resumes the run in place
exec {python} -m backend.cli.supervise slurm "$RUN_DIR" >>"$RUN_DIR/output.log" 2>&1
"""


# ---------------------------------------------------------------- inside the job


def job_main(argv: list[str] | None = None) -> int:
    """Run inside the batch job on the first node: note the job, then supervise the srun step."""
    from backend.runs.supervise import supervise_run

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m backend.cli.supervise slurm RUN_DIR (run by the batch script)", file=sys.stderr)
        return 2
    run = RunFolder(args[0])
    state = run.read_state()
    if state.status != "starting" and _requeued():
        state = _resume_requeued(run, state)
    if state.status != "starting":
        print(f"workbench: run {run.run_id} is already {state.status}; export the profile again for a new run "
              f"(or `workbench resume {run.run_id}`)", file=sys.stderr)
        return 2
    job = {key: os.environ.get(key) for key in ("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES")}
    job |= {"main_addr": os.environ.get("MAIN_ADDR"), "main_port": os.environ.get("MAIN_PORT"),
            "batch_host": socket.gethostname()}
    write_text_atomic(run.path / JOB_FILE_NAME, json.dumps(job, indent=2))
    run.update_state(host=socket.gethostname())
    print(f"===== workbench: SLURM job {job['SLURM_JOB_ID']} on {job['SLURM_JOB_NODELIST']}, "
          f"main {job['main_addr']}:{job['main_port']} =====", flush=True)
    return supervise_run(run)



def _requeued() -> bool:
    """SLURM set SLURM_RESTART_COUNT: this job ran before and was requeued (preempted, or its time was up)."""
    count = os.environ.get("SLURM_RESTART_COUNT", "")
    return count.isdigit() and int(count) > 0


def _resume_requeued(run: RunFolder, state: RunState) -> RunState:
    """A requeued job's run: its last attempt is over (SLURM ended that job), so it goes on in place."""
    return resume_in_place(run, state, f"SLURM requeued the job (restart {os.environ.get('SLURM_RESTART_COUNT')})")


def resume_in_place(run: RunFolder, state: RunState, why: str) -> RunState:
    """A run whose job the scheduler started again (SLURM's requeue, SkyPilot's recovery): its last attempt is
    over, so it goes on in place from its newest complete checkpoint; without one it starts again from the
    beginning. Said in the log, with `why`."""
    from backend.runs.errors import RunRefused
    from backend.runs.resume import prepare_resume

    def say(line: str) -> None:
        print(f"workbench: {line}", flush=True)

    try:
        prepare_resume(run, state, report=say)
        print(f"===== workbench: {why}: resuming from {run.read_state().resumed_from} =====", flush=True)
    except RunRefused as err:
        print(f"===== workbench: {why}; {err}: it starts again from the beginning =====", flush=True)
        run.update_state(status="starting", attempt=state.attempt + 1, exit_code=None, signal=None,
                         failure_reason=None, ended_at=None, stop_requested=False, trainer_pid=None,
                         trainer_started=None, supervisor_pid=None, supervisor_started=None)
    return run.read_state()
