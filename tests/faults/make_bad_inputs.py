"""Write the bad-input corpus into a folder: hostile and corrupt files as a user, a crash, a full disk
or a bad copy leaves them (`python tests/faults/make_bad_inputs.py FOLDER`; the tests write it into a
temporary folder, so no megabytes of junk live in git).

A file's name says where the corpus test plants it: `*.toml` a profile (and a run's profile.toml),
`*.state.json`, `*.events.jsonl`, `*.command.json`, `*.forecast.json` into a run folder, `*.index.jsonl`
as the user's runs.jsonl.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

QUICKSTART = (Path(__file__).resolve().parents[2] / "profiles" / "quickstart.toml").read_text(encoding="utf-8")
STATE = {"run_id": "20260101-130000-bad-0002", "profile_name": "bad", "status": "finished", "host": socket.gethostname(),
         "created_at": 1767268800.0}


def profile(**replace: str) -> str:
    text = QUICKSTART
    for old, new in replace.items():
        assert old in text or old == "APPEND", old
        text = text + new if old == "APPEND" else text.replace(old, new, 1)
    return text


def with_key(section: str, line: str) -> str:
    return profile(**{f"[{section}]\n": f"[{section}]\n{line}\n"})


def state(**fields: object) -> str:
    return json.dumps({**STATE, **fields})


def event(**fields: object) -> str:
    return json.dumps({"v": 1, "time": 1767268800.0, "rank": 0, **fields})


def write_corpus(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    files: dict[str, str | bytes] = {
        # profiles
        "empty.toml": "",
        "binary.toml": bytes(range(256)) * 4,
        "latin1.toml": profile(**{'name = "quickstart"': 'name = "caf\xe9"'}).encode("latin-1"),
        "not-toml.toml": "this is [ not toml = \n",
        "long-name.toml": profile(**{'name = "quickstart"': f'name = "{"n" * 300}"'}),
        "deep-array.toml": profile(**{"[model]\n": "x = " + "[" * 5000 + "]" * 5000 + "\n[model]\n"}),
        "deep-table.toml": profile(APPEND="\n[extra_swift_args]\ny = " + "{a = " * 400 + "1" + "}" * 400 + "\n"),
        "escape-name.toml": profile(**{'name = "quickstart"': r'name = "x\u001b]0;pwned\u0007\u001b[2J\u202eevil"'}),
        "newline-name.toml": profile(**{'name = "quickstart"': r'name = "two\nlines\rback"'}),
        "markup-name.toml": profile(**{'name = "quickstart"': 'name = "[bold red]x[/] [link=file:///etc]y"'}),
        "nul-name.toml": profile(**{'name = "quickstart"': r'name = "a\u0000b"'}),
        "inf-learning-rate.toml": profile(**{"learning_rate = 0.003": "learning_rate = inf"}),
        "nan-learning-rate.toml": profile(**{"learning_rate = 0.003": "learning_rate = nan"}),
        "inf-epochs.toml": profile(**{"num_train_epochs = 6.0": "num_train_epochs = inf"}),
        "huge-seed.toml": with_key("training", "seed = 1099511627776"),
        "zero-max-steps.toml": with_key("training", "max_steps = 0"),
        "negative-batch.toml": with_key("training", "per_device_train_batch_size = -1"),
        "huge-lora-rank.toml": profile(**{"lora_rank = 16": "lora_rank = 1000000000000000000000000000000"}),
        "nproc-1024.toml": profile(APPEND="\n[distribution]\nnproc_per_node = 1024\n"),
        "dataset-with-spaces.toml": profile(**{'"builtin:self-cognition",': '"my data set",'}),
        "help-as-model.toml": profile(**{'source = "builtin:tiny-qwen2"': 'source = "--help"'}),
        "wrong-type.toml": profile(**{"learning_rate = 0.003": 'learning_rate = "fast"'}),
        "unknown-section.toml": profile(APPEND="\n[nonsense]\na = 1\n"),
        "output-dir-not-empty.toml": profile(APPEND='\n[output]\noutput_dir = "/"\n'),
        "long-line.toml": profile(**{"[model]\n": '# ' + "x" * 2_000_000 + "\n[model]\n"}),
        # state.json of a run
        "empty.state.json": "",
        "binary.state.json": bytes(range(256)),
        "not-json.state.json": '{"run_id": "x", "status": ',
        "list.state.json": "[1, 2, 3]",
        "wrong-types.state.json": state(status=5, supervisor_pid="abc", created_at="yesterday"),
        "unknown-status.state.json": state(status="exploded"),
        "nul.state.json": b"\0\0" + state().encode() + b"\0",
        "latin1.state.json": state(profile_name="caf\xe9").encode("latin-1").replace(b"\\u00e9", b"\xe9"),
        "huge-pid.state.json": state(status="running", supervisor_pid=2**70, trainer_pid=2**63),
        "negative-pid.state.json": state(status="running", supervisor_pid=-1, trainer_pid=0, pgid=-5),
        "init-pid.state.json": state(status="running", supervisor_pid=1, trainer_pid=1, pgid=1,
                                     supervisor_started=0.0),
        "escape-profile-name.state.json": state(profile_name="x\x1b]0;pwned\x07\x1b[2J\u202eevil\nrow"),
        "markup-profile-name.state.json": state(profile_name="[bold red]x[/][/]"),
        "nan-times.state.json": '{"run_id": "r", "profile_name": "p", "status": "finished", "created_at": NaN, '
                                '"started_at": Infinity, "ended_at": -Infinity}',
        "huge.state.json": state(profile_name="p" * 2_000_000),
        # events.jsonl of a run
        "binary.events.jsonl": bytes(range(256)) * 8,
        "latin1.events.jsonl": (event(type="log", step=1, loss=1.0) + "\n").encode() + b'{"type": "log", "x": "\xe9"}\n',
        "nul.events.jsonl": b"\0" * 100 + b"\n" + (event(type="log", step=2, loss=0.5) + "\n\0\n").encode(),
        "wrong-types.events.jsonl": "\n".join([
            event(type="log", step="ten", loss="low", max_steps=[1]), event(type="run_begin", max_steps="many"),
            event(type="log", step=3, loss={"a": 1}, loss_scale="big", steps_per_second="fast"),
            event(type="run_end", step=None), event(type=5), event(type="log", step=True, rank="zero")]) + "\n",
        "not-objects.events.jsonl": "[1, 2, 3]\n5\n\"text\"\nnull\n{}\n",
        "nan.events.jsonl": '{"v": 1, "type": "log", "rank": 0, "step": 4, "max_steps": 8, "loss": NaN, '
                            '"steps_per_second": Infinity}\n',
        "huge-line.events.jsonl": event(type="log", step=1, loss=1.0, junk="x" * 3_000_000) + "\n",
        # command.json and forecast.json of a run
        "empty.command.json": "",
        "wrong-types.command.json": json.dumps({"argv": "not a list", "output_dir": 5, "env": []}),
        "wrong-types.forecast.json": json.dumps({"per_device_total_bytes": "lots", "breakdown": [1, 2]}),
        "binary.forecast.json": bytes(range(256)),
        # the user's index of runs
        "binary.index.jsonl": bytes(range(256)) * 4,
        "bad-lines.index.jsonl": "not json\n{\"path\": 5}\n{\"path\": null}\n{\"nopath\": 1}\n[1]\n"
                                 "{\"path\": \"\"}\n{\"path\": \"/no/such/folder\"}\n",
        "nul-path.index.jsonl": json.dumps({"path": "/tmp/a\u0000b"}) + "\n",
        "latin1.index.jsonl": b'{"path": "/tmp/caf\xe9"}\n',
        "long-path.index.jsonl": json.dumps({"path": "/" + "d" * 5000}) + "\n",
    }
    paths = []
    for name, content in files.items():
        path = folder / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        paths.append(path)
    return paths


if __name__ == "__main__":
    import sys

    written = write_corpus(Path(sys.argv[1]))
    print(f"{len(written)} files in {sys.argv[1]}")
