"""`workbench preflight PROFILE --node K` on two "machines" on loopback (two real processes each joining the
rendezvous on the profile's address and port): the good setup passes; a loopback address across two hosts, a
version that differs on one machine, an output folder that is not shared: each fails with its fix. Another host
and another version are faked on machine 1 with WORKBENCH_FAKE_NODE_FACTS (its facts as if from elsewhere)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backend.launch.nodes import free_port
from tests.nodes.nodes_helpers import kill_group, two_machine_profile
from tests.timing import scaled

pytestmark = pytest.mark.slow


def _both(profile: Path, outputs: tuple[Path, Path], fake: dict[str, str] | None = None) -> list[tuple[int, str]]:
    """Both machines' preflights at once: [(exit code, output)] for machine 0 and 1."""
    processes = []
    try:
        for rank in (0, 1):
            env = {**os.environ, "WORKBENCH_FAKE_NODE_FACTS": json.dumps(fake) if fake and rank == 1 else ""}
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "backend.cli", "preflight", str(profile), "--node", str(rank),
                 "--output-dir", str(outputs[rank]), "--timeout", "60"], env=env, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL, start_new_session=True))
        return [(p.wait(timeout=scaled(240)), p.stdout.read() if p.stdout else "") for p in processes]
    finally:
        for process in processes:
            kill_group(process)


def test_two_machines_on_loopback_pass(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    results = _both(two_machine_profile(tmp_path, port=free_port()), (shared, shared))
    for rank, (code, out) in enumerate(results):
        assert code == 0, out
        assert "ok    address: 127.0.0.1: loopback, every machine on this one host (a trial)" in out
        assert "ok    ranks and world: machines [0, 1] of 2, 1 process(es) each: world size 2" in out
        assert f"ok    output folder: {shared} is shared: every machine's token file is seen here" in out
        assert "ok    all-reduce (gloo): 4 MiB in " in out
        assert out.rstrip().endswith(f"machine {rank}: ready")
    assert not (shared / ".workbench-preflight").exists()  # the token files are gone


def test_a_loopback_address_across_two_hosts_fails_with_the_fix(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    results = _both(two_machine_profile(tmp_path, port=free_port()), (shared, shared), {"host": "node-b"})
    for code, out in results:
        assert code == 1, out
        assert ("FAIL  address: main_process_ip 127.0.0.1 is a loopback address, but the machines are different "
                "hosts (") in out and "node-b" in out
        assert "fix: set distribution.main_process_ip to machine 0's network address (`hostname -I` on machine 0" in out


def test_a_version_that_differs_on_one_machine_fails_with_the_fix(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    import torch

    results = _both(two_machine_profile(tmp_path, port=free_port()), (shared, shared), {"torch": "2.0.0"})
    for code, out in results:
        assert code == 1, out
        assert f"FAIL  torch version: differs: machine 0 {torch.__version__}, machine 1 2.0.0" in out
        assert f"fix: install torch {torch.__version__} (machine 0's) on every machine" in out


def test_an_output_folder_that_is_not_shared_fails_with_the_fix(tmp_path: Path) -> None:
    results = _both(two_machine_profile(tmp_path, port=free_port()), (tmp_path / "out0", tmp_path / "out1"))
    for rank, (code, out) in enumerate(results):
        assert code == 1, out
        other = 1 - rank
        assert (f"FAIL  output folder: {tmp_path / f'out{rank}'} is not shared: this machine does not see the token "
                f"files machines [{other}] wrote into theirs") in out
        assert "swift's --save_on_each_node true (extra_swift_args)" in out
