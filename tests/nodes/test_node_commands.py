"""Per-machine commands, rendezvous flags, and the checks a machine can make on its own."""

from __future__ import annotations

import shlex
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from backend.cli import full_app
from backend.launch.nodes import check_node, free_port, node_commands, port_free, render_node_commands
from backend.profile import LaunchProfile, load_profile
from tests.fakes import CPU_BOX
from tests.nodes.nodes_helpers import two_machine_profile

app = full_app()


def _flags(argv: list[str]) -> dict[str, str]:
    launcher = argv[: argv.index("swift.cli.sft")]
    return {flag: launcher[i + 1] for i, flag in enumerate(launcher[:-1]) if flag.startswith("--")}


def _profile(tmp_path: Path, **distribution: object) -> LaunchProfile:
    profile = load_profile(two_machine_profile(tmp_path, port=29555))
    for key, value in distribution.items():
        setattr(profile.distribution, key, value)
    return profile


def test_each_machine_gets_its_rank_and_the_same_rendezvous(tmp_path: Path) -> None:
    commands = node_commands(_profile(tmp_path, rdzv_backend="c10d"), tmp_path / "run", CPU_BOX)
    assert [c.machine_rank for c in commands] == [0, 1]
    flags = [_flags(c.plan.argv) for c in commands]
    assert [f["--machine_rank"] for f in flags] == ["0", "1"]
    for f in flags:
        assert (f["--main_process_ip"], f["--main_process_port"], f["--rdzv_backend"]) == ("127.0.0.1", "29555", "c10d")
    # apart from the rank the machines run the very same launch, config file included
    without_rank = []
    for command in commands:
        argv = list(command.plan.argv)
        del argv[argv.index("--machine_rank") + 1]
        without_rank.append(argv)
    assert without_rank[0] == without_rank[1]
    assert commands[0].plan.accelerate_config["num_processes"] == 2
    assert commands[0].plan.accelerate_config["num_machines"] == 2
    text = render_node_commands(commands)
    assert "# machine 0 of 2 (machine_rank 0): run it on the machine at 127.0.0.1" in text
    assert shlex.split(text.splitlines()[3])[-1] == "workbench_events"


def test_one_machine_has_no_rendezvous_flags(tmp_path: Path) -> None:
    profile = _profile(tmp_path, num_machines=1)
    (command,) = node_commands(profile, tmp_path / "run", CPU_BOX)
    assert "--machine_rank" not in command.plan.argv and command.title() == "# command:"


def test_unknown_rank_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="machine rank 2 does not exist: the profile has 2 machine"):
        node_commands(_profile(tmp_path), tmp_path / "run", CPU_BOX, ranks=[2])


def test_busy_port_is_an_error_on_machine_zero(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert not port_free(port)
        problems = check_node(_profile(tmp_path, main_process_port=port), machine_rank=0)
    assert [(p.field, p.severity) for p in problems] == [("distribution.main_process_port", "error")]
    assert f"port {port} is in use" in problems[0].message and "free port" in problems[0].fix
    assert port_free(port)  # and free again once the listener is gone


def test_free_port_and_loopback_are_fine_on_machine_zero(tmp_path: Path) -> None:
    assert check_node(_profile(tmp_path, main_process_port=free_port()), machine_rank=0) == []


def test_other_machines_are_warned_about_loopback(tmp_path: Path) -> None:
    (problem,) = check_node(_profile(tmp_path), machine_rank=1)
    assert problem.severity == "warning" and "loopback" in problem.message


def test_unresolvable_main_address(tmp_path: Path) -> None:
    (problem,) = check_node(_profile(tmp_path, main_process_ip="no-such-host.invalid"), machine_rank=1)
    assert (problem.field, problem.severity) == ("distribution.main_process_ip", "error")
    assert "does not resolve on this machine" in problem.message


def test_machine_zero_must_own_the_main_address(tmp_path: Path) -> None:
    # 192.0.2.0/24 is reserved for documentation: never an address of this machine
    (problem,) = check_node(_profile(tmp_path, main_process_ip="192.0.2.10"), machine_rank=0)
    assert (problem.field, problem.severity) == ("distribution.machine_rank", "warning")
    assert "not an address of this machine" in problem.message


def test_show_all_nodes_and_one_node(tmp_path: Path) -> None:
    profile = two_machine_profile(tmp_path, port=free_port())
    runner = CliRunner()
    every = runner.invoke(app, ["show", str(profile), "--all-nodes", "--run-dir", str(tmp_path / "run")])
    assert every.exit_code == 0, every.output
    assert "--machine_rank 0" in every.output and "--machine_rank 1" in every.output
    assert (tmp_path / "run" / "accelerate_config.yaml").is_file()  # the printed lines run as printed
    one = runner.invoke(app, ["show", str(profile), "--node", "1", "--run-dir", str(tmp_path / "run")])
    assert one.exit_code == 0 and "--machine_rank 0" not in one.output
    assert one.output.strip().splitlines()[-2].startswith("# machine 1 of 2")
    bad = runner.invoke(app, ["show", str(profile), "--node", "2"])
    assert bad.exit_code == 2 and "--node: machine rank 2 does not exist" in bad.output
