"""`workbench export-model --out` is checked before any job starts (#34 item 14): a folder inside the run's
checkpoint folder (the scoreboard would list it as a checkpoint) and a place where no folder can be made
(/proc) are refused with nothing started. Hand-made run folder: nothing is trained or merged."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from backend.cli.app import full_app
from tests.scoreboard.scoreboard_helpers import fake_run, log, saved


def test_out_inside_the_checkpoints_or_unmakeable_is_refused_before_the_merge(tmp_path: Path,
                                                                              isolated_runs: Path) -> None:
    run = fake_run(isolated_runs, [log(2, 1.0), saved(2)], {2: True})
    inside = run.output_dir / "my-export"
    result = CliRunner().invoke(full_app(), ["export-model", str(run.path), "--to", "merged", "--out", str(inside)])
    assert result.exit_code != 0
    said = " ".join(result.output.split())
    assert (f"--out {inside} is inside the run's checkpoint folder {run.output_dir} (the scoreboard would take it "
            "for a checkpoint); nothing was started") in said
    result = CliRunner().invoke(full_app(), ["export-model", str(run.path), "--to", "merged", "--out", "/proc/x"])
    assert result.exit_code != 0
    assert "--out /proc/x: no folder can be made in /proc" in " ".join(result.output.split())
    assert not run.jobs_dir.exists()  # no merge was started
    assert [p.name for p in run.output_dir.iterdir()] == ["checkpoint-2"]
