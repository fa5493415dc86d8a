"""`workbench checkpoints RUN`: the checkpoint scoreboard of a run (which one is best, and why), and pins."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from backend.cli.common import console, err_console, fail, find_run_or_exit
from backend.core.fs import LockTimeout


def checkpoints(
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id (or a unique part of it) or folder.")],
    as_json: Annotated[bool, typer.Option("--json", help="The scoreboard as JSON.")] = False,
    pin_step: Annotated[int | None, typer.Option("--pin", metavar="N", help="Pin checkpoint-N: a hard-linked copy "
                                                 "in <run>/pinned/ that save_total_limit's rotation cannot delete.")] = None,
    unpin_step: Annotated[int | None, typer.Option("--unpin", metavar="N", help="Unpin checkpoint-N (its pinned "
                                                   "copy goes; the original, if still there, stays).")] = None,
    golden: Annotated[bool, typer.Option("--golden", help="The golden prompts' answers per prompt: the base "
                                         "model's, each checkpoint's (changed or not), the reference, exact match "
                                         "and similarity.")] = False,
    prompt: Annotated[int | None, typer.Option("--prompt", metavar="K", min=1, help="With --golden: prompt K "
                                               "alone (counted from 1).")] = None,
) -> None:
    """Each checkpoint of a run: train loss at the save and its EMA, eval loss, size, complete or not,
    pinned or not; the best by the profile's metric (training.metric_for_best_model, default eval loss)."""
    from backend.checkpoints.board_text import text_lines
    from backend.checkpoints.pins import PinRefused, pin, unpin
    from backend.checkpoints.scoreboard import scoreboard

    run = find_run_or_exit(run_ref)
    for step, act in ((pin_step, pin), (unpin_step, unpin)):
        if step is None:
            continue
        try:
            said = act(run, step)
        except PinRefused as err:
            fail(str(err))
        except LockTimeout:
            fail(f"another workbench command is changing the pins of {run.run_id}; try again")
        except OSError as err:
            fail(f"cannot change the pins of {run.run_id}: {err.strerror or err}", code=1)
        (err_console if as_json else console).print(said, highlight=False, markup=False, soft_wrap=True)
    if golden or prompt is not None:
        from backend.cli.golden import golden_view

        golden_view(run, prompt, as_json)
        return
    board = scoreboard(run)
    if as_json:
        print(json.dumps(board.to_dict(), indent=2))
        return
    if pin_step is not None or unpin_step is not None:
        console.print()
    for line in text_lines(board):
        console.print(line, highlight=False, markup=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command()(checkpoints)
