"""What the lifecycle floor lends the floors below, registered once at start-up.

Imports run one way (ground -> knowledge -> launch -> lifecycle -> faces). Where a lower room
needs an answer only a higher one has, the higher one registers a function with it here:
the resolver's `run:` references (backend.refs), the validation rules of the [watch]/[notify]
keys and of output_dir (backend.validate). The CLI and the TUI call `install()` as they start.
"""

from __future__ import annotations

from pathlib import Path

_installed = False


def merged_model_of_run(run_id: str) -> Path:
    """The merged model folder of run `run_id`; LookupError saying why there is none."""
    from backend.jobs.targets import TargetError, target_of_run
    from backend.runs.lookup import find_run

    try:
        return Path(target_of_run(find_run(run_id).path, merged=True).model)
    except TargetError as err:
        raise LookupError(str(err)) from None


def install() -> None:
    """Register the lifecycle floor's answers with the floors below (once per process)."""
    global _installed
    if _installed:
        return
    from backend.refs import register_run_lookup
    from backend.runs.rules import RUN_PATH_RULES
    from backend.validate import register_rules
    from backend.watch.rules import WATCH_RULES

    register_run_lookup(merged_model_of_run)
    register_rules(WATCH_RULES, RUN_PATH_RULES)
    _installed = True
