"""An old-layout run resumes and finishes as an uninterrupted one (a real simulation; see
``tests/unit/fedsim/config/test_migrate.py`` for reading old runs and configs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from old_runs import RUNNABLE_OLD_CONFIG, write_old_run

from fedsim.config import load_config
from fedsim.rundir.writer import RunStore


@pytest.mark.simulation
def test_an_old_run_resumes_and_finishes_as_an_uninterrupted_one(tmp_path):
    """A real run, rewritten into the old layout after round 1, resumes to the same round-2 metrics."""
    from fedsim.engine.run import run_experiment

    config = load_config(write_old_run(tmp_path / "template", RUNNABLE_OLD_CONFIG) / "config.yaml")
    config.output.dir, config.output.run_name = tmp_path, "run"
    run_dir = Path(run_experiment(config, quiet=True))
    finished = [row for row in RunStore(run_dir).rows() if row["event"] == "eval"]

    (run_dir / "config.yaml").write_text(RUNNABLE_OLD_CONFIG)  # the old layout, as an older fedsim wrote it
    (run_dir / "fingerprint.json").unlink()  # older runs kept none
    (run_dir / "commits.jsonl").unlink()  # nor a commit record (their rows, rewritten here, would not match it)
    rows = [{k: v for k, v in row.items() if k != "schema"} for row in RunStore(run_dir).rows()]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (run_dir / "checkpoints" / "round_0002.pt").unlink()  # killed before round 2 committed
    (run_dir / "summary.json").unlink(missing_ok=True)

    run_experiment(resume=run_dir, quiet=True)
    resumed = [row for row in RunStore(run_dir).rows() if row["event"] == "eval"]
    assert [(row["round"], row["accuracy"], row["loss"]) for row in resumed] == [
        (row["round"], row["accuracy"], row["loss"]) for row in finished
    ]
