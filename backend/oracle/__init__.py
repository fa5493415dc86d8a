"""Answers from the libraries themselves (ms-swift, transformers, the hub libraries).

One mechanism for every question that needs a heavy import: the question runs in a child Python
(the same interpreter, never the TUI process), answers JSON, and the answer is cached on disk keyed
by the question, the versions of the libraries it depends on and the content of its input.

A question is a module `backend/oracle/<name>.py` with a function
`answer(payload: dict, progress: Callable[[str], None]) -> dict`, run in the child only, and
usually a parent-side helper that calls `ask()` with the right payload and versions.
"""

from backend.oracle.cache import OracleCache, cache_key, file_fingerprint, library_versions
from backend.oracle.runner import OracleCancelled, OracleError, ask, cached

__all__ = [
    "OracleCache",
    "OracleCancelled",
    "OracleError",
    "ask",
    "cache_key",
    "cached",
    "file_fingerprint",
    "library_versions",
]
