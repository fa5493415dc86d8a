"""What the run verbs refuse, with the reason: a launch with errors, an unknown run reference,
an action not done (not that run's state, not a run folder, busy...)."""

from __future__ import annotations

from backend.launch.validate import Problem


class LaunchRefused(Exception):
    """The profile has errors; nothing was started and nothing was written."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class RunNotFound(LookupError):
    pass


class RunRefused(ValueError):
    """The action was not done, with the reason (not that run's state, not a run folder, busy...)."""
