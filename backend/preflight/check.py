"""The preflight's verdicts (#39): what this machine can say alone (the profile's ranks, the address, the port),
then the rendezvous child's facts from every machine, each check with its fix."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.launch.nodes import check_node, check_rank, resolve
from backend.profile import LaunchProfile

COMPARED = ("workbench", "swift", "torch", "transformers", "cuda", "nccl")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""

    def lines(self) -> list[str]:
        head = f"{'ok  ' if self.ok else 'FAIL'}  {self.name}: {self.detail}"
        return [head] + ([f"      fix: {self.fix}"] if self.fix and not self.ok else [])


def preflight(profile: LaunchProfile, machine_rank: int, output_dir: Path | None,
              timeout: float = 60.0) -> list[Check]:
    """Every check for machine `machine_rank`; the rendezvous runs only once the profile's own shape is right."""
    d = profile.distribution
    try:
        check_rank(profile, machine_rank)
    except ValueError as err:
        return [Check("ranks", False, str(err), f"pass --node 0 to {d.num_machines - 1}, one per machine")]
    if d.num_machines == 1:
        return [Check("machines", True, "one machine: nothing to check across machines")]
    if not d.main_process_ip:
        return [Check("address", False, "distribution.main_process_ip is empty",
                      "set it to machine 0's network address (`hostname -I` on machine 0)")]
    problems = [p for p in check_node(profile, machine_rank) if p.severity == "error"]
    if problems:
        return [Check(p.field, False, p.message, p.fix) for p in problems]
    folder = Path(output_dir or profile.output.output_dir or "")
    if not str(folder) or not folder.is_absolute():
        return [Check("output folder", False, "no absolute output folder to check (the profile's output_dir is "
                      "empty: each machine's run folder would hold its own output)",
                      "set [output] output_dir to a folder every machine mounts at the same path, or pass "
                      "--output-dir")]
    result = _rendezvous(profile, machine_rank, folder, timeout)
    if "error" in result:
        return [_rendezvous_failure(profile, machine_rank, result)]
    facts = {int(k): v for k, v in result["facts"].items()}
    return [_ranks(profile, facts), _address(profile, facts), *_versions(facts), _shared(folder, facts, result),
            _all_reduce(result)]


def _rendezvous(profile: LaunchProfile, rank: int, folder: Path, timeout: float) -> dict[str, Any]:
    d = profile.distribution
    ask = {"rank": rank, "machines": d.num_machines, "nproc_per_node": d.nproc_per_node, "address": d.main_process_ip,
           "port": d.main_process_port, "output_dir": str(folder), "timeout": timeout,
           "backend": "gloo" if d.device == "cpu" else "nccl"}
    try:
        done = subprocess.run([sys.executable, "-m", "backend.preflight.node_child", json.dumps(ask)],
                              capture_output=True, text=True, timeout=timeout * 2 + 60, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"error": f"no answer within {timeout * 2 + 60:.0f} s", "stage": "rendezvous"}
    lines = done.stdout.strip().splitlines()
    try:
        return dict(json.loads(lines[-1]))
    except (IndexError, ValueError):
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"error": f"the preflight child failed: {tail[0]}", "stage": "child"}


def _rendezvous_failure(profile: LaunchProfile, rank: int, result: dict[str, Any]) -> Check:
    d = profile.distribution
    where = f"{d.main_process_ip}:{d.main_process_port}"
    if result.get("stage") == "ranks":
        return Check("ranks", False, result["error"], "give every machine its own --node K, 0 to "
                                                      f"{d.num_machines - 1}")
    if rank == 0:
        fix = (f"start `workbench preflight PROFILE --node K` on machines 1 to {d.num_machines - 1} within the "
               f"timeout; they must reach {where}")
    else:
        fix = (f"start machine 0's preflight first; check that {d.main_process_ip} is machine 0's address as seen "
               f"from here and that port {d.main_process_port} is open in its firewall (`nc -zv {d.main_process_ip} "
               f"{d.main_process_port}` while machine 0's preflight waits)")
    return Check("rendezvous", False, f"{result['error']} (main {where})", fix)


def _ranks(profile: LaunchProfile, facts: dict[int, dict[str, Any]]) -> Check:
    d = profile.distribution
    shapes = {k: (f["machines"], f["nproc_per_node"]) for k, f in facts.items()}
    differ = {k: s for k, s in shapes.items() if s != (d.num_machines, d.nproc_per_node)}
    if differ:
        said = "; ".join(f"machine {k}: {m} machine(s) x {n}" for k, (m, n) in sorted(differ.items()))
        return Check("ranks and world", False, f"the machines' profiles disagree with this one "
                     f"({d.num_machines} x {d.nproc_per_node}): {said}", "copy the same profile to every machine")
    return Check("ranks and world", True, f"machines {sorted(facts)} of {d.num_machines}, {d.nproc_per_node} "
                 f"process(es) each: world size {d.world_size}")


def _address(profile: LaunchProfile, facts: dict[int, dict[str, Any]]) -> Check:
    address = profile.distribution.main_process_ip
    hosts = sorted({f["host"] for f in facts.values()})
    try:
        loopback = all(ipaddress.ip_address(a).is_loopback for a in resolve(address))
    except (OSError, ValueError):
        loopback = False
    if loopback and len(hosts) > 1:
        return Check("address", False, f"main_process_ip {address} is a loopback address, but the machines are "
                     f"different hosts ({', '.join(hosts)}): each would reach itself, not machine 0",
                     "set distribution.main_process_ip to machine 0's network address (`hostname -I` on machine "
                     f"0, {facts[0]['host']}) in every machine's profile")
    said = "loopback, every machine on this one host (a trial)" if loopback else "reached by every machine"
    return Check("address", True, f"{address}: {said}")


def _versions(facts: dict[int, dict[str, Any]]) -> list[Check]:
    checks = []
    for name in COMPARED:
        values = {k: str(f.get(name)) for k, f in sorted(facts.items())}
        if len(set(values.values())) > 1:
            said = ", ".join(f"machine {k} {v}" for k, v in values.items())
            want = values[0]
            checks.append(Check(f"{name} version", False, f"differs: {said}",
                                f"install {name} {want} (machine 0's) on every machine"))
    if not checks:
        same = ", ".join(f"{n} {facts[0].get(n)}" for n in COMPARED)
        checks.append(Check("versions", True, f"the same on every machine: {same}"))
    return checks


def _shared(folder: Path, facts: dict[int, dict[str, Any]], result: dict[str, Any]) -> Check:
    if result.get("token_error"):
        return Check("output folder", False, f"cannot write into {folder}: {result['token_error']}",
                     "make the output folder writable on every machine")
    missing = sorted(set(facts) - set(result["tokens_seen"]))
    if missing:
        return Check("output folder", False, f"{folder} is not shared: this machine does not see the token files "
                     f"machines {missing} wrote into theirs", "put output_dir on a filesystem every machine mounts "
                     "at the same path, or have each machine keep its own files: swift's --save_on_each_node true "
                     "(extra_swift_args)")
    return Check("output folder", True, f"{folder} is shared: every machine's token file is seen here")


def _all_reduce(result: dict[str, Any]) -> Check:
    backend = result.get("backend", "?")
    if "all_reduce_error" in result:
        return Check(f"all-reduce ({backend})", False, result["all_reduce_error"],
                     "the machines reach the rendezvous but not each other: check the network interface "
                     "(GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME) and the firewall between them")
    right = "" if result.get("all_reduce_right") else " (WRONG sum)"
    return Check(f"all-reduce ({backend})", bool(result.get("all_reduce_right")),
                 f"4 MiB in {result['all_reduce_ms']} ms{right}")
