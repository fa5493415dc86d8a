"""Answers from the libraries themselves (ms-swift, transformers, the hub libraries).

One mechanism for every question that needs a heavy import: the question runs in a child Python
(the same interpreter, never the TUI process; backend/oracle/service.py), answers JSON, and the
answer is cached on disk under the one key rule of backend/oracle/cache.py.

A question is a module `backend/oracle/<name>.py` (or a dotted `backend.` module, such as the
tiny-model builder) with a function `answer(payload: dict, progress: Callable[[str], None]) -> dict`,
run in the child only, and usually a parent-side helper that calls `ask()` with the right payload,
libraries and input files.
"""

from backend.oracle.cache import OracleCache, cache_key, code_digest, file_fingerprint, file_lock, library_versions
from backend.oracle.errors import OracleCancelled, OracleError
from backend.oracle.runner import ask, ask_or_cached, cached, run_child, start_warm, stop_warm

__all__ = [
    "OracleCache",
    "OracleCancelled",
    "OracleError",
    "ask",
    "ask_or_cached",
    "cache_key",
    "cached",
    "code_digest",
    "file_fingerprint",
    "file_lock",
    "library_versions",
    "run_child",
    "start_warm",
    "stop_warm",
]
