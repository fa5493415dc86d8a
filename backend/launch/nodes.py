"""Several machines: each machine's exact command, the rendezvous, and the checks one machine can make alone.

A run on N machines is N launches of the same `accelerate launch`, one per machine, that
differ only in `--machine_rank`. Machine 0's launcher listens on the main address and port
(torch elastic's rendezvous); the others connect to it. accelerate hands the launch to
torchrun, which starts `nproc_per_node` processes on each machine; on CPU they talk over
gloo (swift's `--use_cpu true`), on GPUs over NCCL.

What a machine can check on its own before launching: that the main address resolves
here, that machine 0 really is the machine owning that address, and that the port is free
there. Whether the other machines can reach it is only known when they try.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

from backend.hardware.machine import HardwareInfo
from backend.launch.command import LaunchPlan, build_launch
from backend.launch.validate import Problem
from backend.profile import LaunchProfile


@dataclass(frozen=True)
class Rendezvous:
    """Where and how the machines of a run find each other."""

    num_machines: int
    nproc_per_node: int
    main_address: str
    main_port: int
    backend: str

    @classmethod
    def of(cls, profile: LaunchProfile) -> Rendezvous:
        d = profile.distribution
        return cls(d.num_machines, d.nproc_per_node, d.main_process_ip, d.main_process_port, d.rdzv_backend)

    @property
    def world_size(self) -> int:
        return self.num_machines * self.nproc_per_node

    def describe(self) -> str:
        shape = f"{self.num_machines} machine(s) x {self.nproc_per_node} process(es) = {self.world_size}"
        if self.num_machines == 1:
            return shape
        return f"{shape}; main {self.main_address}:{self.main_port}, {self.backend} rendezvous"


@dataclass
class NodeCommand:
    """One machine's launch."""

    machine_rank: int
    rendezvous: Rendezvous
    plan: LaunchPlan

    def title(self) -> str:
        r = self.rendezvous
        if r.num_machines == 1:
            return "# command:"
        where = (f"run it on the machine at {r.main_address}" if self.machine_rank == 0
                 else f"run it on another machine that reaches {r.main_address}:{r.main_port}")
        return f"# machine {self.machine_rank} of {r.num_machines} (machine_rank {self.machine_rank}): {where}"

    def shell_line(self) -> str:
        return self.plan.shell_line()


def check_rank(profile: LaunchProfile, machine_rank: int) -> None:
    machines = profile.distribution.num_machines
    if not 0 <= machine_rank < machines:
        raise ValueError(f"machine rank {machine_rank} does not exist: the profile has {machines} machine(s), "
                         f"ranks 0 to {machines - 1}")


def node_command(
    profile: LaunchProfile,
    run_dir: Path,
    hardware: HardwareInfo,
    machine_rank: int,
    *,
    base_dir: Path | None = None,
    python: str = sys.executable,
) -> NodeCommand:
    """Machine `machine_rank`'s exact launch (its config files live in `run_dir`)."""
    check_rank(profile, machine_rank)
    plan = build_launch(profile, run_dir, hardware, base_dir=base_dir, machine_rank=machine_rank, python=python)
    return NodeCommand(machine_rank, Rendezvous.of(profile), plan)


def node_commands(
    profile: LaunchProfile,
    run_dir: Path,
    hardware: HardwareInfo,
    *,
    base_dir: Path | None = None,
    ranks: Iterable[int] | None = None,
    python: str = sys.executable,
) -> list[NodeCommand]:
    """Every machine's launch (or those of `ranks`), machine 0 first."""
    wanted = range(profile.distribution.num_machines) if ranks is None else ranks
    return [node_command(profile, run_dir, hardware, k, base_dir=base_dir, python=python) for k in wanted]


def render_node_commands(commands: list[NodeCommand]) -> str:
    """The per-machine commands as text: a title line, then the copy-pasteable line."""
    return "\n".join(f"{c.title()}\n{c.shell_line()}" for c in commands) + "\n"


# ---------------------------------------------------------------- checks on this machine


def resolve(address: str) -> list[str]:
    """The IP addresses `address` resolves to here; raises OSError when it does not resolve."""
    infos = socket.getaddrinfo(address, None, proto=socket.IPPROTO_TCP)
    return sorted({str(info[4][0]).split("%")[0] for info in infos})


def local_addresses() -> set[str]:
    """Every IP address of this machine's network interfaces."""
    found = set()
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family in (socket.AF_INET, socket.AF_INET6):
                found.add(address.address.split("%")[0])
    return found


def port_free(port: int, host: str = "") -> bool:
    """Whether a listener could bind `port` here now (as torch's TCPStore will)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port that is free now (for tests and one-machine trials)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _is_loopback(addresses: list[str]) -> bool:
    return all(ipaddress.ip_address(a).is_loopback for a in addresses)


def check_node(profile: LaunchProfile, machine_rank: int | None = None) -> list[Problem]:
    """What this machine can check about its part of a multi-machine run, before launching.

    `machine_rank` is this machine's rank (the profile's when None). Binds a socket for a
    moment, so it is not one of the pure validation rules.
    """
    d = profile.distribution
    rank = d.machine_rank if machine_rank is None else machine_rank
    if d.num_machines == 1 or not d.main_process_ip:
        return []
    try:
        addresses = resolve(d.main_process_ip)
    except OSError as err:
        return [Problem("distribution.main_process_ip", "error",
                        f"{d.main_process_ip!r} does not resolve on this machine ({err}).",
                        "Use machine 0's IP address, or a host name every machine resolves (DNS or /etc/hosts).")]
    loopback = _is_loopback(addresses)
    problems = []
    if rank == 0:
        mine = loopback or bool(set(addresses) & local_addresses())
        if not mine:
            problems.append(Problem(
                "distribution.machine_rank", "warning",
                f"machine 0 listens on the main address {d.main_process_ip} ({', '.join(addresses)}), which is not "
                "an address of this machine.",
                "Run machine 0's command on the machine that has that address, or set main_process_ip to one of "
                "this machine's addresses."))
        if not port_free(d.main_process_port):
            problems.append(Problem(
                "distribution.main_process_port", "error",
                f"port {d.main_process_port} is in use on this machine; machine 0's launcher must listen there.",
                f"Choose a free port (the same on every machine), or stop what listens on it "
                f"(`ss -ltnp 'sport = :{d.main_process_port}'` shows it)."))
    elif loopback:
        problems.append(Problem(
            "distribution.main_process_ip", "warning",
            f"{d.main_process_ip} is a loopback address: only processes on this very machine reach it.",
            "Fine for a trial of several launches on one machine; for real machines use machine 0's network address."))
    return problems
