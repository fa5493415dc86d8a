"""backend/core/collector.py: while the libraries load the collector is paused, then what loaded is frozen and
the collector runs again; one turned off by someone else stays off; the oracle's children answer with it paused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from backend.core.paths import REPO_DIR
from backend.oracle import OracleCache, ask

# in a process of its own: freezing is for the whole process, and pytest's own collector is left alone
SCRIPT = """
import gc, json, weakref
from backend.core.collector import paused_while_loading
class Node:
    pass
seen = {}
frozen = gc.get_freeze_count()
with paused_while_loading():
    seen["inside"] = gc.isenabled()
    loaded = [[index] for index in range(1000)]  # tracked objects that live on, as an import leaves them
    garbage = Node()
    garbage.itself = garbage  # a cycle the block leaves behind (a tensor could hang on one)
    cycle = weakref.ref(garbage)
    del garbage
    with paused_while_loading():
        pass
    seen["after the inner block"] = gc.isenabled()
seen["after"] = gc.isenabled()
seen["frozen"] = gc.get_freeze_count() - frozen
seen["the block's garbage cycle freed"] = cycle() is None
gc.disable()
frozen = gc.get_freeze_count()
with paused_while_loading():
    pass
seen["turned off before"] = gc.isenabled()
seen["frozen when it was off"] = gc.get_freeze_count() - frozen
print(json.dumps(seen))
"""


def test_paused_while_loading_then_frozen_and_on_again() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO_DIR, capture_output=True, text=True, check=True)
    seen = json.loads(done.stdout)
    assert (seen["inside"], seen["after the inner block"], seen["after"]) == (False, False, True)
    assert seen["frozen"] >= 1000  # the block's lists, out of every later pass
    assert seen["the block's garbage cycle freed"]  # not frozen with the rest, never to be freed
    assert (seen["turned off before"], seen["frozen when it was off"]) == (False, 0)


def test_the_oracle_child_answers_with_the_collector_paused(tmp_path: Path) -> None:
    assert ask("echo", {"collector": True}, cache=OracleCache(tmp_path), timeout=60) == {"collecting": False}
