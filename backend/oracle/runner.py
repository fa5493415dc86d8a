"""Ask a named question of the libraries: from the cache, else from a child (backend/oracle/service.py).

`ask` is the cached path: the key (backend/oracle/cache.py) holds the library versions, the payload,
the content of the input files and the digest of the question's code; askers of one key wait for each
other and the loser takes the winner's answer. `run_child` is the uncached path (the tiny-model build).

Within one run of the app (`start_warm` .. `stop_warm`), questions go to one warm child that keeps its
imports; elsewhere (the CLI, tests) each question has a one-shot child.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from backend.oracle.cache import (
    OracleCache,
    cache_key,
    code_digest,
    file_fingerprint,
    library_versions,
    question_module,
)
from backend.oracle.errors import OracleCancelled, OracleError
from backend.oracle.service import Cancelled, Child, Progress, WarmChild

DEFAULT_TIMEOUT = 600.0
_WARM: WarmChild | None = None

__all__ = ["OracleCancelled", "OracleError", "ask", "ask_or_cached", "cached", "run_child", "start_warm",
           "stop_warm", "use_warm"]


def start_warm() -> bool:
    """From now on, questions of this process go to one long-lived child (the app calls this once its first
    frame is drawn). True when this call started it: a caller stops only the warm child it started."""
    global _WARM
    if _WARM is not None:
        return False
    _WARM = WarmChild()
    return True


def stop_warm() -> None:
    """Kill the warm child (the app calls this on unmount); questions go to one-shot children again."""
    global _WARM
    warm, _WARM = _WARM, None
    if warm is not None:
        warm.stop()


def use_warm(warm: WarmChild | None) -> WarmChild | None:
    """Questions go to `warm` from now on (None: to one-shot children), and the service they went to is
    returned, neither stopped: for a process that keeps one warm child across several apps (the tests)."""
    global _WARM
    previous, _WARM = _WARM, warm
    return previous


def warm_pid() -> int | None:
    """The warm child's pid while one runs (for tests and diagnostics)."""
    return _WARM.pid if _WARM is not None else None


def _key_for(question: str, payload: dict[str, Any], libraries: Iterable[str],
             inputs: Iterable[Path]) -> tuple[str, dict[str, str]]:
    versions = library_versions(libraries)
    fingerprints = {str(path): file_fingerprint(path) for path in inputs if Path(path).exists()}
    return cache_key(question, payload, versions, fingerprints, code_digest(question)), versions


def cached(question: str, payload: dict[str, Any], *, libraries: Iterable[str] = (),
           inputs: Iterable[Path] = (), cache: OracleCache | None = None) -> dict[str, Any] | None:
    """The cached answer, or None: never starts a child (safe on the UI thread for small inputs)."""
    key, _ = _key_for(question, payload, libraries, inputs)
    return (cache or OracleCache.default()).get(question, key)


def ask(question: str, payload: dict[str, Any], *, libraries: Iterable[str] = (),
        inputs: Iterable[Path] = (), timeout: float = DEFAULT_TIMEOUT, progress: Progress | None = None,
        refresh: bool = False, cache: OracleCache | None = None, env: dict[str, str] | None = None,
        cancelled: Cancelled | None = None) -> dict[str, Any]:
    """The answer to `question` for `payload`: from the cache, else from a child process.

    `libraries` are the distributions whose versions key the cache; `inputs` are files or folders
    whose content keys it. Raises OracleError when the child fails; failures are not cached.
    `cancelled` (polled while waiting, e.g. a worker's `is_cancelled`): once true, the child's process
    group is killed and OracleCancelled raised, so an answer nobody waits for stops costing CPU.
    """
    if question_module(question) is None:
        raise OracleError(f"unknown oracle question {question!r}")
    cache = cache or OracleCache.default()
    key, versions = _key_for(question, payload, tuple(libraries), inputs)
    if not refresh and (hit := cache.get(question, key)) is not None:
        return hit
    with cache.lock(question, key, cancelled):
        if not refresh and (hit := cache.get(question, key)) is not None:
            return hit  # another asker of the same key answered while this one waited
        if progress:
            progress(f"asking {', '.join(f'{n} {v}' for n, v in versions.items()) or 'the libraries'} "
                     f"({question}; first time for this input, cached afterwards)")
        answer = run_child(question, payload, timeout=timeout, progress=progress, env=env, cancelled=cancelled)
        cache.put(question, key, answer, {"question": question, "versions": versions, "payload": payload})
    return answer


def ask_or_cached(question: str, payload: dict[str, Any], *, libraries: Iterable[str] = (),
                  inputs: Iterable[Path] = (), ask_child: bool, asking: str, what: str,
                  timeout: float = DEFAULT_TIMEOUT, progress: Progress | None = None) -> dict[str, Any] | None:
    """The cached answer; else, when `ask_child`, the child's, said as it goes (`asking`: the line said before
    the child starts; `what`: what was asked, for a failure) — None when not cached and not asked, or when the
    child failed (said why)."""
    inputs = tuple(inputs)
    hit = cached(question, payload, libraries=libraries, inputs=inputs)
    if hit is not None or not ask_child:
        return hit
    say = progress or (lambda text: None)
    say(asking)
    started = time.monotonic()
    try:
        answer = ask(question, payload, libraries=libraries, inputs=inputs, timeout=timeout)
    except OracleError as err:
        say(f"swift could not be asked {what}: {err}")
        return None
    say(f"swift answered in {time.monotonic() - started:.0f} s (cached: the next time is instant)")
    return answer


def run_child(question: str, payload: dict[str, Any], *, timeout: float = DEFAULT_TIMEOUT,
              progress: Progress | None = None, env: dict[str, str] | None = None,
              cancelled: Cancelled | None = None) -> dict[str, Any]:
    """The answer of a child, no cache: the warm child when the app keeps one (and no `env` of its
    own is asked for), else a one-shot child."""
    if question_module(question) is None:
        raise OracleError(f"unknown oracle question {question!r}")
    if cancelled is not None and cancelled():
        raise OracleCancelled(f"oracle {question!r} cancelled before it started")
    warm = _WARM
    if warm is not None and env is None:
        return warm.ask(question, payload, code=code_digest(question), timeout=timeout, progress=progress,
                        cancelled=cancelled)
    with Child(env) as child:
        return child.ask(question, payload, timeout=timeout, progress=progress, cancelled=cancelled)
