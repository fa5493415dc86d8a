"""The rule that asks transformers whether it takes the model's config.json before validate says yes (#35).

transformers builds the config object (and the model, on the meta device) in the model-shape child
(backend/oracle/model_shape.py, cached): a config its class raises on, or one whose model cannot run (no
positions, query heads not a multiple of the key/value heads, a width the heads do not divide), is an error
in transformers' words. Nothing is sized from it either: `workbench estimate` refuses it the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from backend.launch.validate.core import Problem
from backend.models.resolved import ResolvedProfile
from backend.profile import LaunchProfile


def config_refused(profile: LaunchProfile, resolved: ResolvedProfile, *, ask: bool,
                   progress: Callable[[str], object] | None = None) -> Iterator[Problem]:
    """transformers' refusal of the profile's model config (`ask`: a child when not cached, else the cache only)."""
    from backend.models.shape_exact import ConfigRefused, cached_shape, exact_shape
    from backend.models.shape_formula import ConfigError
    from backend.oracle import OracleError

    def say(text: str) -> None:
        if progress is not None:
            progress(text)

    targets = tuple(profile.tuner.target_modules) or ("all-linear",)
    try:
        folder = resolved.config_dir()
        if ask:
            exact_shape(folder, targets, progress=say)
        else:
            cached_shape(folder, targets)
    except ConfigRefused as err:
        yield Problem("model.source", "error", f"transformers refuses this model's config.json: {err.words}.",
                      f"Correct {folder / 'config.json'} (or pick another model): swift would fail on it at "
                      "launch, and the memory forecast cannot size it.")
    except (LookupError, ConfigError, OracleError, OSError, ValueError, RecursionError):  # other rules say why
        return
