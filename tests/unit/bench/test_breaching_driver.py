"""bench.breaching_driver: fedsim's ig and breaching's Inverting Gradients on one problem, and the throughput bench
without breaching. The tests that drive breaching skip where it is not installed (it is not a fedsim dependency)."""

from __future__ import annotations

import pytest
import torch

from bench import breaching_driver, throughput
from bench.strongest import paper003_views
from fedsim.config import AttackOptions


def images(count: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.rand(count, 3, 32, 32, generator=generator), torch.arange(count) % 10


@pytest.mark.parametrize(
    ("options", "field"),
    [
        (dict(name="dlg"), "name"),
        (dict(name="ig", restarts=2), "restarts"),
        (dict(name="ig", loss="l2"), "loss"),
        (
            dict(name="ig", regularizers=[{"name": "tv", "weight": 1e-4}, {"name": "gradient_l2", "weight": 1.0}]),
            "regularizers",
        ),
    ],
)
def test_only_fedsims_ig_with_one_restart_is_compared(options, field):
    with pytest.raises(ValueError, match=f"^{field} = "):
        breaching_driver.comparable(AttackOptions(**options))


def test_without_breaching_the_bench_times_fedsim_and_says_the_ratio_was_not_measured(monkeypatch, capsys):
    monkeypatch.setattr(breaching_driver, "available", lambda: False)
    x, y = images(8)
    rows = throughput.per_iteration_rows(x, y, AttackOptions(name="ig", iterations=3), pairs=1)
    out = capsys.readouterr().out
    assert sorted(rows) == [1, 8] and all(row["fedsim_ms"] > 0 for row in rows.values())
    assert "breaching is not installed here: the per-iteration ratio against it was not measured" in out


def test_both_attacks_start_at_the_same_objective_and_follow_the_same_path():
    pytest.importorskip("breaching")
    x, y = images(1)
    (view,) = paper003_views(x, y)
    options = AttackOptions(name="ig", iterations=20)
    row = breaching_driver.compare(view, x, options, pairs=1)
    assert breaching_driver.same_start(row)
    # the same steps from the same start: the reconstructions score alike
    assert row["fedsim_psnr"] == pytest.approx(row["breaching_psnr"], abs=0.1)
    assert row["fedsim_ms"] > 0 and row["breaching_ms"] > 0


def test_breaching_is_given_the_views_box_and_the_update_in_gradient_units():
    pytest.importorskip("breaching")
    x, y = images(1)
    (view,) = paper003_views(x, y)
    view = view.__class__(**{**view.__dict__, "input_bounds": (torch.full((3,), -1.0), torch.full((3,), 2.0))})
    problem = breaching_driver.shared_problem(view, AttackOptions(name="ig", iterations=2))
    payload, shared = breaching_driver.breaching_inputs(problem)
    metadata = payload[0]["metadata"]
    mean, std = torch.tensor(metadata.mean, dtype=torch.float64), torch.tensor(metadata.std, dtype=torch.float64)
    assert torch.allclose((0 - mean) / std, torch.full((3,), -1.0, dtype=torch.float64))
    assert torch.allclose((1 - mean) / std, torch.full((3,), 2.0, dtype=torch.float64))
    delta = view.parameter_delta()
    first = next(name for name, _ in view.model.named_parameters())
    assert torch.allclose(shared[0]["gradients"][0], delta[first] / view.local_training.lr)
