"""`workbench export skypilot PROFILE` (#40 item 1): a SkyPilot task that trains the profile on a cloud or on
Kubernetes, as a managed job that SkyPilot runs again after a preemption.

The task YAML holds, from the profile and the memory forecast:
- `resources`: the GPUs per node (`accelerators`: the one asked for, else every GPU in ACCELERATOR_GIB whose
  memory holds the forecast's per-GPU peak plus the profile's [queue] memory_margin, SkyPilot picking the
  cheapest), host `memory` (the forecast's host peak plus the margin, "N+"), `use_spot`, `infra`, and
  `job_recovery` (FAILOVER; --max-restarts on errors);
- `num_nodes`: the profile's num_machines (or --nodes);
- `file_mounts`: the bucket on RUNS_MOUNT in MOUNT mode: WORKBENCH_WORKSPACE points there, so the run folder
  (state.json, events.jsonl, output.log, the checkpoints) lives in the bucket and a recovered job finds it;
- `workdir`: the workbench's source; `setup` installs it in a virtual environment with the versions of
  torch, ms-swift and transformers installed here (what validate checked the profile against);
- `run`: the profile as the job runs it (written by a here-document) and the workbench's own supervisor,
  `python -m backend.cli.supervise sky JOB_PROFILE RUN_ID` (job_main below): on node 0 it makes the run
  folder on the first attempt, resumes it in place from its newest complete checkpoint on a recovery (the
  step count carries on), and supervises the launch (events, watchdog, save-on-signal); every other node
  starts its launcher with its SKYPILOT_NODE_RANK as the machine rank;
- `secrets`: the names of the secret variables the run needs (the profile's env names that look like
  secrets, and the tokens set here), never their values: `sky jobs launch --secret NAME` passes them.

SkyPilot's own parser checks the YAML (backend/oracle/sky_task.py, in a child, cached).
"""

from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from backend.core.process_identity import RUN_MARKER_ENV
from backend.core.safe_text import is_secret_name, visible
from backend.launch.cluster_device import ClusterGpus, cluster_gpus
from backend.launch.validate import Problem, errors
from backend.launchers.slurm import allocation_hardware, cluster_problems
from backend.models.refs import resolve_model
from backend.profile import LaunchProfile
from backend.profile.toml_file import profile_to_toml
from backend.rundir.layout import new_run_id
from backend.runs.errors import LaunchRefused

RUNS_MOUNT = "/workbench-runs"  # the bucket, in MOUNT mode: the run folders
JOB_DIR = "~/workbench-job"  # the job profile, written by `run`
JOB_PROFILE = f"{JOB_DIR}/job.toml"
VENV = "~/workbench-venv"
PROFILE_END = "WORKBENCH_PROFILE_END"
GIB = 1024**3
# GPU memory in GiB of the accelerator names SkyPilot's catalogs use: a fact of the hardware, not of a
# library. The forecast's per-GPU peak (plus the margin) chooses among them.
ACCELERATOR_GIB = {"T4": 16, "L4": 24, "A10G": 24, "A10": 24, "L40S": 48, "A100": 40, "A100-80GB": 80,
                   "H100": 80, "H200": 141}
BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
BUCKET_URI = re.compile(r"(s3|gs|r2|cos|oci)://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9._/-]*)?")
INFRA = re.compile(r"[a-z0-9]+(/[A-Za-z0-9_.*-]+){0,2}")
ACCELERATOR = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# the libraries whose installed versions the job installs too (the profile was checked against them)
PINNED = ("torch", "ms-swift", "transformers", "peft", "accelerate")
SECRETS_FROM_HERE = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "MODELSCOPE_API_TOKEN", "WANDB_API_KEY")


@dataclass(frozen=True)
class SkyOptions:
    bucket: str  # a bucket name SkyPilot creates or reuses, or a URI (s3://, gs://, r2://, cos://, oci://)
    accelerator: str | None = None  # e.g. "A100-80GB"; None: every GPU the forecast fits
    nodes: int | None = None
    use_spot: bool = False
    infra: str | None = None  # "aws", "gcp/us-central1", "k8s" ...
    max_restarts: int = 0  # job_recovery.max_restarts_on_errors (a preemption is always recovered)
    name: str | None = None

    def problems(self) -> list[str]:
        found = []
        if not (BUCKET_NAME.fullmatch(self.bucket) or BUCKET_URI.fullmatch(self.bucket)):
            found.append(f"--bucket '{visible(self.bucket, 80)}': give a bucket name (lower-case letters, digits, . "
                         f"and -, 3 to 63 characters) or a URI such as s3://NAME/PATH")
        if self.accelerator is not None and not ACCELERATOR.fullmatch(self.accelerator):
            found.append(f"--accelerator '{visible(self.accelerator, 80)}': give a GPU name as SkyPilot writes it "
                         f"(A100, H100, L4 ...; `sky show-gpus` lists them)")
        if self.nodes is not None and self.nodes < 1:
            found.append(f"--nodes {self.nodes}: ask for at least 1 node")
        if self.infra is not None and not INFRA.fullmatch(self.infra):
            found.append(f"--infra '{visible(self.infra, 80)}': give a cloud, cloud/region or k8s (as `sky check` "
                         f"names them)")
        if self.max_restarts < 0:
            found.append(f"--max-restarts {self.max_restarts}: use 0 or more")
        if self.name is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", self.name):
            found.append(f"--name '{visible(self.name, 80)}': use letters, digits and _ . - only")
        return found


@dataclass
class SkyExport:
    run_id: str
    task: dict[str, Any]
    text: str
    profile: LaunchProfile
    secrets: list[str]
    notes: list[str] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)

    def launch_command(self, path: Path | str) -> str:
        secrets = "".join(f" --secret {name}" for name in self.secrets)
        return f"sky jobs launch {path}{secrets} --yes"


def sky_gpus(profile: LaunchProfile, options: SkyOptions) -> ClusterGpus:
    """The GPUs a node asks for, by the one rule of cluster submissions (backend.launch.cluster_device): a
    named --accelerator names nproc_per_node of them."""
    named = profile.distribution.nproc_per_node if options.accelerator else None
    return cluster_gpus(profile, named=named, how_to_name="--accelerator")


def job_profile(profile: LaunchProfile, options: SkyOptions) -> LaunchProfile:
    """The profile as the job runs it: the nodes' shape, SkyPilot's GPUs, save on SIGTERM (a preemption)."""
    job = profile.model_copy(deep=True)
    d = job.distribution
    d.device = sky_gpus(profile, options).device
    d.num_machines = options.nodes or d.num_machines
    d.machine_rank = 0
    d.gpu_ids = []  # SkyPilot gives the node its GPUs
    if d.strategy == "single" and d.world_size > 1:
        d.strategy = "ddp"
    if d.num_machines > 1:
        d.main_process_ip = "$MAIN_ADDR"  # known when the job starts: the first of SKYPILOT_NODE_IPS
    job.run.save_on_term = True
    return job


def export_skypilot(profile: LaunchProfile, options: SkyOptions, *, base_dir: Path | None = None) -> SkyExport:
    """The task for `profile`; nothing is written or submitted. ValueError for bad options or a forecast no GPU
    holds, LaunchRefused for profile errors."""
    bad = options.problems()
    if bad:
        raise ValueError("; ".join(bad))
    job = job_profile(profile, options)
    gpus = sky_gpus(profile, options)
    checked = cluster_problems(job, allocation_hardware(gpus.per_node), base_dir)
    if errors(checked):
        raise LaunchRefused(errors(checked))
    forecast = _forecast(job, base_dir)
    run_id = new_run_id(job.name)
    export = SkyExport(run_id, {}, "", job, _secret_names(job), warnings=[p for p in checked if p.severity == "warning"])
    export.notes += [gpus.note] if gpus.note else []
    export.task = _task(job, options, forecast, run_id, export)
    export.text = yaml.dump(export.task, Dumper=_TaskDumper, sort_keys=False, width=1000)
    return export


class _TaskDumper(yaml.SafeDumper):
    """Scripts (setup, run) as literal blocks, as a person writes them in a task YAML."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_TaskDumper.add_representer(str, _str)


def _forecast(job: LaunchProfile, base_dir: Path | None) -> dict[str, Any]:
    try:
        from backend.estimate.forecast import forecast_for_profile

        return forecast_for_profile(job, resolve_model(job.model.source, base_dir), base_dir=base_dir)
    except Exception:  # noqa: BLE001 - no forecast: the task asks for the GPU named, or says it cannot choose
        return {}


def _task(job: LaunchProfile, options: SkyOptions, forecast: dict[str, Any], run_id: str,
          export: SkyExport) -> dict[str, Any]:
    resources = _resources(job, options, forecast, export)
    storage: dict[str, Any] = {"mode": "MOUNT"}
    if "://" in options.bucket:
        storage["source"] = options.bucket
    else:
        storage["name"] = options.bucket
    envs = {key: value for key, value in job.env.items() if not is_secret_name(key)}
    envs["WORKBENCH_WORKSPACE"] = RUNS_MOUNT
    task: dict[str, Any] = {
        "name": options.name or re.sub(r"[^A-Za-z0-9_.-]+", "-", job.name).strip("-")[:63] or "workbench",
        "workdir": str(_source_root()),
        "resources": resources,
        "num_nodes": job.distribution.num_machines,
        "envs": envs,
    }
    if export.secrets:
        task["secrets"] = {name: None for name in export.secrets}
    task["file_mounts"] = {RUNS_MOUNT: storage}
    task["setup"] = _setup()
    task["run"] = _run_script(job, run_id)
    return task


def _resources(job: LaunchProfile, options: SkyOptions, forecast: dict[str, Any],
               export: SkyExport) -> dict[str, Any]:
    margin = job.queue.memory_margin
    resources: dict[str, Any] = {}
    if options.infra:
        resources["infra"] = options.infra
    gpus = sky_gpus(job, options).per_node
    if gpus:
        resources["accelerators"] = _accelerators(gpus, options, forecast.get("per_device_total_bytes"), margin,
                                                  export)
    else:
        resources["cpus"] = "4+"
    host = forecast.get("host_total_bytes")
    if isinstance(host, (int, float)) and host > 0:
        resources["memory"] = f"{max(1, math.ceil(host * (1 + margin) / GIB))}+"
        export.notes.append(f"memory: {resources['memory']} GiB per node (the forecast's host peak "
                            f"{host / GIB:.1f} GiB plus the {margin:.0%} margin)")
    resources["use_spot"] = options.use_spot
    resources["job_recovery"] = {"strategy": "FAILOVER", "max_restarts_on_errors": options.max_restarts}
    return resources


def _accelerators(gpus: int, options: SkyOptions, per_gpu: object, margin: float,
                  export: SkyExport) -> str | dict[str, int]:
    if options.accelerator:
        return f"{options.accelerator}:{gpus}"
    if not isinstance(per_gpu, (int, float)) or per_gpu <= 0:
        raise ValueError("the memory forecast could not size the GPUs; name one with --accelerator (A100, H100 ...)")
    need = per_gpu * (1 + margin) / GIB
    fits = {name: gpus for name, gib in ACCELERATOR_GIB.items() if gib >= need}
    if not fits:
        raise ValueError(f"the forecast needs {need:.1f} GiB per GPU (with the margin), more than any GPU of "
                         f"{', '.join(ACCELERATOR_GIB)}; shard the model over more GPUs, or name one with --accelerator")
    export.notes.append(f"accelerators: any of {', '.join(fits)} x {gpus} (the forecast's {per_gpu / GIB:.1f} GiB "
                        f"per GPU plus the {margin:.0%} margin; SkyPilot picks the cheapest it can get)")
    return fits


def _secret_names(job: LaunchProfile) -> list[str]:
    names = {key for key in job.env if is_secret_name(key)}
    names |= {key for key in SECRETS_FROM_HERE if os.environ.get(key)}
    return sorted(names)


def _source_root() -> Path:
    """The workbench's source folder (the one with pyproject.toml): SkyPilot syncs it to the nodes."""
    return Path(__file__).resolve().parents[2]


def _setup() -> str:
    from backend.oracle import library_versions

    # the release, without a local build label (torch's +cpu / +cu124: the node's pip picks its own build)
    pins = [f"{name}=={version.split('+')[0]}" for name, version in library_versions(PINNED).items()
            if version != "missing"]
    return (f"set -e\npython3 -m venv {VENV}\n{VENV}/bin/pip install --upgrade pip\n"
            f"{VENV}/bin/pip install -e . {' '.join(pins)}\n")


def _run_script(job: LaunchProfile, run_id: str) -> str:
    profile_text = profile_to_toml(job)
    if any(line.strip() == PROFILE_END for line in profile_text.splitlines()):
        raise ValueError(f"the profile holds a line {PROFILE_END}: it cannot be written into the task")
    return (f"set -e\nmkdir -p {JOB_DIR}\ncat > {JOB_PROFILE} <<'{PROFILE_END}'\n{profile_text.rstrip()}\n"
            f"{PROFILE_END}\n"
            f"# node 0 keeps the run folder in the bucket ($WORKBENCH_WORKSPACE/{run_id}) and supervises the run;\n"
            f"# a recovered job resumes it in place from its newest complete checkpoint\n"
            f"exec {VENV}/bin/python -m backend.cli.supervise sky {JOB_PROFILE} {run_id}\n")


# ---------------------------------------------------------------- inside the job


def job_main(argv: list[str]) -> int:
    """Run by the task on every node: node 0 makes (or resumes) the run folder and supervises it; the others
    start their launcher with their rank."""
    from backend.profile import load_profile
    from backend.rundir.layout import RunFolder, workspace_dir

    if len(argv) != 2:
        print("usage: python -m backend.cli.supervise sky JOB_PROFILE RUN_ID (run by the SkyPilot task)",
              file=sys.stderr)
        return 2
    profile_path, run_id = Path(argv[0]).expanduser(), argv[1]
    rank = int(os.environ.get("SKYPILOT_NODE_RANK", "0") or 0)
    ips = os.environ.get("SKYPILOT_NODE_IPS", "").split()
    job = load_profile(profile_path)
    if job.distribution.num_machines > 1:
        job.distribution.main_process_ip = ips[0] if ips else "127.0.0.1"
        job.distribution.machine_rank = rank
    run = RunFolder(workspace_dir() / run_id)
    if rank > 0:
        return _other_node(job, run, profile_path.parent)
    return _main_node(job, run, profile_path.parent)


def _main_node(job: LaunchProfile, run: Any, base_dir: Path) -> int:
    from backend.hardware.machine import detect_hardware
    from backend.launch.command import build_launch
    from backend.launchers.slurm import resume_in_place
    from backend.rundir import index
    from backend.runs.start import write_run_files
    from backend.runs.supervise import supervise_run

    if not run.state_path.exists():  # the first attempt: the run folder, as `workbench run` makes it
        run.path.mkdir(parents=True, exist_ok=True)
        plan = build_launch(job, run.path, detect_hardware(), base_dir=base_dir, python=sys.executable)
        write_run_files(run, job, plan, base_dir)
        index.register(run.path)
    else:
        state = run.read_state()
        if state.status != "starting":
            why = f"SkyPilot recovered the job on another instance ({visible(os.environ.get('SKYPILOT_TASK_ID'), 120)})"
            with open(run.log_path, "a", encoding="utf-8") as log:  # stdout is SkyPilot's job log; say it here too
                log.write(f"\n===== workbench: {why} =====\n")
            resume_in_place(run, state, why)
    os.environ[RUN_MARKER_ENV] = str(run.path)
    return supervise_run(run)


def _other_node(job: LaunchProfile, run: Any, base_dir: Path) -> int:
    """Rank > 0: this node's launcher, as node 0's command but with this node's rank (no supervisor: node 0's
    keeps the run's state; events come from rank 0)."""
    import time

    from backend.hardware.machine import detect_hardware
    from backend.launch.command import build_launch

    deadline = time.monotonic() + 600
    while not run.command_path.exists() and time.monotonic() < deadline:  # node 0 writes the configs
        time.sleep(2)
    plan = build_launch(job, run.path, detect_hardware(), base_dir=base_dir, python=sys.executable)
    env = {**os.environ, **plan.env, RUN_MARKER_ENV: str(run.path)}
    os.chdir(plan.cwd)
    os.execvpe(str(plan.argv[0]), [str(a) for a in plan.argv], env)
    return 0  # not reached



# ---------------------------------------------------------------- submitted here


@dataclass
class SkySubmitted:
    run: Any  # RunFolder: the run's local folder (its profile, the task, sky_job.json)
    job_id: str
    export: SkyExport


def submit_skypilot(profile: LaunchProfile, options: SkyOptions, *, base_dir: Path | None = None,
                    workspace: Path | None = None) -> SkySubmitted:
    """Export the task, have SkyPilot's parser check it, submit it as a managed job (`sky jobs launch`), and
    make the run's local folder (profile.toml, sky_task.yaml, sky_job.json, state "starting" on host
    "skypilot"): the runs list shows it, `workbench status` asks SkyPilot for its state, `workbench stop`
    cancels the job. Raises ValueError / LaunchRefused / SkyTaskRefused / SkyPilotMissing before anything is
    submitted, SkyUnavailable when sky refuses (nothing is left behind)."""
    import json
    import tempfile
    import time

    from backend.cluster import sky_jobs
    from backend.core.fs import write_text_atomic
    from backend.oracle.sky_task import check_task
    from backend.profile import save_profile
    from backend.rundir import index
    from backend.rundir.layout import RunFolder, workspace_dir

    export = export_skypilot(profile, options, base_dir=base_dir)
    check_task(export.text)
    parent = workspace or workspace_dir()
    parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=parent, prefix=".sky-") as scratch:
        task_path = Path(scratch) / "sky_task.yaml"
        task_path.write_text(export.text, encoding="utf-8")
        job_id = sky_jobs.submit(str(task_path), name=export.task["name"], secrets=export.secrets)
        run = RunFolder.create(parent, export.run_id)
        task_path.replace(run.path / "sky_task.yaml")
    save_profile(export.profile, run.profile_path)
    write_text_atomic(run.path / sky_jobs.JOB_FILE_NAME, json.dumps(
        {"job_id": job_id, "bucket": options.bucket, "run_dir": f"{RUNS_MOUNT}/{export.run_id}",
         "submitted_at": time.time()}, indent=2))
    shell = export.launch_command(run.path / "sky_task.yaml")
    write_text_atomic(run.command_path, json.dumps({"argv": shell.split(), "env": {}, "cwd": str(run.path),
                                                    "output_dir": f"{RUNS_MOUNT}/{export.run_id}/output",
                                                    "shell": shell}, indent=2))
    run.write_state(run.new_state(export.profile.name).model_copy(update={"host": "skypilot", "boot_id": None}))
    index.register(run.path)
    return SkySubmitted(run, job_id, export)
