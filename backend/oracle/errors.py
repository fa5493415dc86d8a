"""What an oracle question can fail with (shared by the cache's lock and the child service)."""

from __future__ import annotations


class OracleError(RuntimeError):
    """The child could not answer (crash, kill, timeout, exception): `detail` holds the evidence."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


class OracleCancelled(OracleError):
    """The caller stopped waiting (`cancelled()` became true): its child was killed, nothing cached."""
