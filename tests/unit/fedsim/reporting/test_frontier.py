"""The privacy-utility frontier: Pareto fronts, the undefended baseline of each run, the strongest attack."""

import math

import numpy as np
import pandas as pd
import pytest

from fedsim.config import parse_config
from fedsim.reporting.frontier import baselines, frontier_table, pareto_front


def test_the_pareto_front_keeps_exactly_the_undominated_points():
    table = pd.DataFrame(
        {
            "run": ["none", "weak", "good", "strong", "bad", "twin", "unattacked"],
            "leak": [1.00, 0.80, 0.10, 0.01, 0.50, 0.10, math.nan],
            "drop": [0.00, 0.00, 0.01, 0.20, 0.30, 0.01, 0.00],
        }
    )
    front = pareto_front(table, {"leak": "min", "drop": "min"})
    # none is dominated by weak (same drop, less leakage); bad by good; the twins tie and both stay;
    # a run without a leakage value is never on the front
    assert table["run"][front].tolist() == ["weak", "good", "strong", "twin"]


def test_the_pareto_front_respects_the_sense_of_each_objective():
    table = pd.DataFrame({"lpips": [0.1, 0.6, 0.5], "drop": [0.0, 0.1, 0.2]})
    assert pareto_front(table, {"lpips": "max", "drop": "min"}).tolist() == [True, True, False]


def _config(**client):
    return parse_config({"client": client})


def test_every_run_is_measured_against_the_undefended_run_with_otherwise_equal_settings():
    configs = {
        "none": _config(),
        "noise": _config(defenses=[{"name": "noise", "sigma": 0.1}]),
        "none-lr": _config(lr=0.5),
        "noise-lr": _config(lr=0.5, defenses=[{"name": "noise", "sigma": 0.1}]),
        "prune-momentum": _config(momentum=0.9, defenses=[{"name": "prune", "ratio": 0.5}]),
    }
    assert baselines(configs) == {
        "none": "none",
        "noise": "none",
        "none-lr": "none-lr",
        "noise-lr": "none-lr",
        "prune-momentum": None,
    }


def test_the_frontier_table_picks_the_strongest_attack_and_the_utility_loss():
    utility = pd.DataFrame(
        {
            "run": ["none", "noise", "prune", "dp"],
            "final_accuracy": [0.90, 0.89, 0.60, 0.70],
            "final_train_loss": [0.30, 0.32, 0.90, 0.80],
        }
    )
    attacks = pd.DataFrame(
        {
            "run": ["none", "none", "noise", "noise", "prune", "dp"],
            "psnr": [30.0, math.inf, 12.0, 15.0, 20.0, 9.0],
            "ssim": [0.95, 0.99, 0.20, 0.10, 0.60, 0.05],
            "lpips": [0.10, 0.02, 0.50, 0.40, 0.30, math.nan],
        }
    )
    reference = {"none": "none", "noise": "none", "prune": "none", "dp": "none"}
    table = frontier_table(utility, attacks, reference).set_index("run")
    assert table.loc["none", "best_psnr"] == math.inf and table.loc["none", "best_ssim"] == 0.99
    assert table.loc["noise", "best_ssim"] == 0.20 and table.loc["noise", "best_lpips"] == 0.40  # strongest = lowest
    assert table.loc["prune", "accuracy_drop"] == pytest.approx(0.30)
    assert table.loc["noise", "train_loss_increase"] == pytest.approx(0.02)
    # SSIM: noise (0.20 at 0.01) and dp (0.05 at 0.20) and none (0.99 at 0) are undominated; prune is not
    assert table.index[table["pareto_ssim"]].tolist() == ["none", "noise", "dp"]
    # LPIPS: dp has none, so it is off that front
    assert not table.loc["dp", "pareto_lpips"] and table.loc["noise", "pareto_lpips"]


def test_without_an_undefended_run_there_is_no_utility_loss():
    utility = pd.DataFrame({"run": ["a"], "final_accuracy": [0.5], "final_train_loss": [1.0]})
    attacks = pd.DataFrame({"run": ["a"], "psnr": [10.0], "ssim": [0.3], "lpips": [0.4]})
    table = frontier_table(utility, attacks, {"a": None})
    assert math.isnan(table.loc[0, "accuracy_drop"]) and not table.loc[0, "pareto_ssim"]


def test_a_run_whose_model_never_learned_is_flagged_and_kept_off_every_front():
    from fedsim.reporting.chance import chance_from_labels

    utility = pd.DataFrame(
        {"run": ["none", "dp", "noise"], "final_accuracy": [0.70, 0.11, 0.68], "final_train_loss": [0.3, 2.3, 0.4]}
    )
    # the DP-SGD model at chance accuracy would lead every front: least leakage at a negative accuracy drop
    attacks = pd.DataFrame(
        {
            "run": ["none", "dp", "noise"],
            "psnr": [40.0, 8.0, 20.0],
            "ssim": [0.99, 0.02, 0.60],
            "lpips": [0.02, 0.70, 0.30],
        }
    )
    reference = {"none": "none", "dp": "none", "noise": "none"}
    chance = chance_from_labels(np.repeat(np.arange(10), 36))  # 360 balanced test images: 0.1, interval to ~0.14
    table = frontier_table(utility, attacks, reference, dict.fromkeys(reference, chance)).set_index("run")
    assert table["never_learned"].tolist() == [False, True, False]
    assert table.loc["dp", "chance_accuracy"] == pytest.approx(0.1)
    for metric in ("psnr", "ssim", "lpips"):
        assert table.index[table[f"pareto_{metric}"]].tolist() == ["none", "noise"], metric
    # without a chance level nothing is flagged, and the same run leads the front
    unknown = frontier_table(utility, attacks, reference).set_index("run")
    assert not unknown["never_learned"].any() and unknown.loc["dp", "pareto_ssim"]
