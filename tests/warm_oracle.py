"""One warm oracle child per test process, lent to every test (tests/conftest.py `warm_oracle_lent`).

The app keeps one warm child while it runs (backend/oracle/runner.py `start_warm`); elsewhere each library
question starts a child that imports swift again (~6 s). Across the suite that was ~80 children: one per module
that kept one of its own, one per question elsewhere. Here one child is kept for the whole test process and lent
to each test, so that a question whose answer is not cached yet costs its answer, not an import. The answers are
the same: the same question code runs in the same kind of child, and a changed environment or question code
still gets a fresh child (`WarmChild`). A test whose subject is the children themselves (how many run, which one
a cancel kills) is marked `one_shot_oracle`: nothing is lent to it and no idle child is left beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from backend.oracle import runner, service
from backend.oracle.service import WarmChild

_kept: WarmChild | None = None


def _warm() -> WarmChild:
    global _kept
    if _kept is None or _kept.stopped:  # a test that calls stop_warm() while it is lent stops it
        _kept = WarmChild()
    return _kept


@contextmanager
def lent() -> Iterator[None]:
    """The kept warm child answers this block's questions (unless one is in use already: an outer block's)."""
    outer = runner.use_warm(None)
    if outer is not None:
        runner.use_warm(outer)
        yield
        return
    kept = _warm()
    runner.use_warm(kept)
    try:
        yield
    finally:
        left = runner.use_warm(None)
        if left is not None and left is not kept:  # an app of the test started a warm child of its own: stop it
            left.stop()


def stop_kept() -> None:
    """No idle warm child from now on (the next `lent` starts a new one)."""
    global _kept
    kept, _kept = _kept, None
    if kept is not None:
        kept.stop()


def without_test_name(extra: dict[str, str] | None = None, *,
                      _child_env: Callable[[dict[str, str] | None], dict[str, str]] = service.child_env,
                      ) -> dict[str, str]:
    """The children's environment without PYTEST_CURRENT_TEST: pytest renames it every test, which would
    restart the warm child at each one."""
    env = _child_env(extra)
    env.pop("PYTEST_CURRENT_TEST", None)
    return env
