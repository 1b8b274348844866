"""`fedsim.run` from Python: the quickstart's config, made tiny, runs as `fedsim run` runs it and comes back as a
`Run` whose images carry integer client ids."""

import logging
from pathlib import Path

import fedsim

QUICKSTART = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"


def test_the_quickstart_runs_from_python_and_returns_its_run(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(logging.getLogger("fedsim"), "propagate", True)  # the CLI turns it off for its handler
    caplog.set_level(logging.INFO, logger="fedsim")
    run = fedsim.run(
        QUICKSTART,
        overrides=[
            "device=cpu",
            "federation.rounds=1",
            "data.max_train_samples=48",
            "data.max_test_samples=60",
            f"output.dir={tmp_path}",
            "adversary.attacks=[{name: dlg, iterations: 5, restarts: 1}]",
            "adversary.targets=both",
            "adversary.lpips='off'",
        ],
        quiet=True,
    )
    assert isinstance(run, fedsim.Run) and run.path.parent == tmp_path and run.config.name == "quickstart"
    assert run.events("eval")["round"].tolist() == [0, 1] and run.summary["rounds_completed"] == 1
    assert run.summary["epsilon_example"] is None and run.summary["epsilon_client"] is None  # no DP here
    images = run.images()
    assert str(images["client"].dtype) == "Int64"
    assert set(images["client"].dropna()) == {0, 1, 2, 3} and images["client"].isna().any()  # and the aggregate
    per_result = run.events("attack")["ssim"]  # each result's per-image list
    assert len(images) == sum(len(scores) for scores in per_result) > len(per_result)  # one row per image
    assert images["ssim"].between(-1, 1).all()
    # what takes seconds before round 1 is said as it starts, in order
    said = [record.getMessage() for record in caplog.records]
    steps = (
        "starting attack workers",
        "starting Ray",
        "starting the federation",
        "round 1/1",
    )
    first = [next((i for i, line in enumerate(said) if line.startswith(step)), None) for step in steps]
    assert None not in first, said
    assert first == sorted(first), said
