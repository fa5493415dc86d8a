"""Pinned checkpoints: a pin is a hard-linked copy of checkpoint-N in <run>/pinned/ (no extra disk; copied
across filesystems), out of reach of save_total_limit's rotation, which deletes only output/checkpoint-*,
and its step in <run>/pins.json (written atomically under the run's pins lock). The scoreboard lists pins;
merge and chat find a pinned copy when rotation deleted the original.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path

from backend.core.fs import file_lock, write_text_atomic
from backend.rundir.layout import RunFolder

PINS_FILE = "pins.json"
PINNED_DIR = "pinned"


class PinRefused(ValueError):
    """A pin or unpin that was not done: the message says why and what to do."""


def read_pins(run: RunFolder) -> list[int]:
    """The pinned steps (pins.json); [] when there is none or it is damaged (pins_problem says so)."""
    try:
        data = json.loads((run.path / PINS_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return []
    steps = data.get("pinned") if isinstance(data, dict) else None
    return sorted({s for s in steps if isinstance(s, int) and not isinstance(s, bool)}) if isinstance(steps, list) else []


def pins_problem(run: RunFolder) -> str | None:
    path = run.path / PINS_FILE
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        return f"{PINS_FILE} is damaged ({err}); no checkpoint counts as pinned until it is rewritten"
    if not isinstance(data, dict) or not isinstance(data.get("pinned"), list):
        return f"{PINS_FILE} is damaged (no \"pinned\" list); no checkpoint counts as pinned until it is rewritten"
    return None


def pinned_dir(run: RunFolder) -> Path:
    return run.path / PINNED_DIR


def pins_lost_on_delete(run: RunFolder) -> str | None:
    """What deleting the run takes with it that someone pinned to keep: 'its pinned checkpoints go too:
    checkpoint-15, checkpoint-40', or None when nothing is pinned."""
    steps = sorted({*read_pins(run), *_pinned_copies(run)})
    if not steps:
        return None
    return f"its pinned checkpoint{'s' if len(steps) > 1 else ''} go{'' if len(steps) > 1 else 'es'} too: " + \
        ", ".join(f"checkpoint-{step}" for step in steps)


def _pinned_copies(run: RunFolder) -> list[int]:
    folder = pinned_dir(run)
    if folder.is_symlink() or not folder.is_dir():
        return []
    try:
        names = [entry.name for entry in folder.iterdir()]
    except OSError:
        return []
    return [int(name.removeprefix("checkpoint-")) for name in names
            if name.startswith("checkpoint-") and name.removeprefix("checkpoint-").isdigit()]


def pin(run: RunFolder, step: int) -> str:
    """Pin checkpoint-<step>: a hard-linked copy in <run>/pinned/ that rotation cannot reach, and its step
    in pins.json. Returns what was done; PinRefused when it cannot be."""
    folder = run.output_dir / f"checkpoint-{step}"
    with file_lock(run.path / ".pins.lock", wait=10.0):
        copy = _own_pinned_dir(run) / f"checkpoint-{step}"
        pins = read_pins(run)
        if step in pins and copy.is_dir():
            return f"checkpoint-{step} is already pinned ({copy})"
        if not copy.is_dir():
            if not folder.is_dir():
                have = ", ".join(c.name.removeprefix("checkpoint-") for c in run.checkpoints()) or "none"
                raise PinRefused(f"run {run.run_id} has no checkpoint-{step} (checkpoints: {have})")
            problem = run.judge(folder).problem
            if problem:
                raise PinRefused(f"cannot pin an incomplete checkpoint: {problem}")
            how = _link_tree(folder, copy)
        else:
            how = "the pinned copy was already there"
        write_text_atomic(run.path / PINS_FILE, json.dumps({"pinned": sorted({*pins, step})}, indent=2) + "\n")
    return f"pinned checkpoint-{step}: {copy} ({how}); save_total_limit's rotation cannot delete it"


def unpin(run: RunFolder, step: int) -> str:
    """Unpin checkpoint-<step>: its step leaves pins.json and the pinned copy goes, unless that copy is the
    only one left (rotation deleted the original): then PinRefused, nothing changed."""
    folder = run.output_dir / f"checkpoint-{step}"
    with file_lock(run.path / ".pins.lock", wait=10.0):
        copy = _own_pinned_dir(run) / f"checkpoint-{step}"
        pins = read_pins(run)
        there = copy.exists() or copy.is_symlink()
        if step not in pins and not there:
            raise PinRefused(f"checkpoint-{step} of run {run.run_id} is not pinned "
                                  f"(pinned: {', '.join(map(str, pins)) or 'none'})")
        if copy.is_symlink() or (there and not copy.is_dir()):
            raise PinRefused(f"{copy} is not a folder the workbench made (a symlink or a file); nothing was "
                             "changed. Look at it and remove it yourself")
        if there and not folder.is_dir():
            raise PinRefused(f"the pinned copy {copy} is the only copy of checkpoint-{step} left (the "
                                  "original was deleted, e.g. by save_total_limit); nothing was changed. Delete "
                                  f"that folder yourself if you no longer need it: rm -r {copy}")
        # the copy leaves by a rename first: pins.json is rewritten only once the copy is out of the way, and a
        # removal cut short leaves a hidden leftover, never a half copy that still looks pinned
        doomed = copy.with_name(f".{copy.name}.unpinned-{secrets.token_hex(3)}")
        if there:
            try:
                os.rename(copy, doomed)
            except OSError as err:
                raise PinRefused(f"cannot remove the pinned copy {copy} ({err.strerror or err}); nothing was "
                                 "changed") from None
        write_text_atomic(run.path / PINS_FILE, json.dumps({"pinned": [s for s in pins if s != step]}, indent=2) + "\n")
        if there:
            shutil.rmtree(doomed, ignore_errors=True)
    return f"unpinned checkpoint-{step} (the original {folder} stays; rotation may delete it later)"


def _own_pinned_dir(run: RunFolder) -> Path:
    """<run>/pinned when it is the run's own folder (or absent): PinRefused when it is a symlink or leads
    out of the run folder, where a pin would write and an unpin would delete what is not the run's."""
    path = pinned_dir(run)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise PinRefused(f"{path} is {'a symlink' if path.is_symlink() else 'not a folder'}: the workbench pins and "
                         "unpins only inside the run's own folder, never through a link; nothing was changed. "
                         f"Make {path} a plain folder (move what it points to back into it) and try again")
    if path.exists() and path.resolve().parent != run.path.resolve():
        raise PinRefused(f"{path} leads out of the run folder {run.path}; nothing was changed")
    return path


def _link_tree(source: Path, target: Path) -> str:
    """A copy of `source` at `target` made of hard links (no extra disk) or, across filesystems, of copies;
    built in a hidden folder beside it and renamed into place, so `target` is whole or absent."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.partial-{secrets.token_hex(3)}")
    linked = [True]

    def link_or_copy(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            linked[0] = False
            shutil.copy2(src, dst)

    try:
        shutil.copytree(source, temp, copy_function=link_or_copy, symlinks=True)
        os.rename(temp, target)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return "hard links, no extra disk space" if linked[0] else "copied: another filesystem"


link_tree = _link_tree  # the eval job (backend/evaluation/job.py) links the model it evaluates the same way
