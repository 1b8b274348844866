"""Report tables from a folder of runs: utility, attacks and leakage per round."""

import math

import pytest
from synthetic_runs import _synthetic_run

import fedsim
from fedsim.judge.scoring import PSNR_CAP_DB
from fedsim.reporting.run_summary import round_table
from fedsim.reporting.tables import attack_results, leakage_rounds, utility_rounds
from fedsim.rundir.writer import RunStore


def test_the_strongest_attack_is_picked_per_target_per_round_and_per_run(tmp_path):
    run_dir = _synthetic_run(tmp_path, "none")
    store = RunStore(run_dir)
    for attack, target, server_round, ssim in (
        ("ig", "client:0", 1, 0.95),
        ("ig-prune", "client:1", 2, 0.99),
        ("ig", "client:1", 1, 0.5),
    ):
        store.append(
            {
                "round": server_round,
                "event": "attack",
                "target": target,
                "attack": attack,
                "status": "ok",
                "ssim_mean": ssim,
                "psnr_mean": 20.0,
            }
        )
    run = fedsim.load_run(run_dir)
    per_target = run.strongest().set_index("target")
    assert per_target.loc["client:0", "attack"] == "ig" and per_target.loc["client:0", "ssim_mean"] == 0.95
    assert per_target.loc["client:1", ["attack", "round"]].tolist() == ["ig-prune", 2]
    assert per_target.loc["aggregate", "attack"] == "dlg"
    per_round = run.strongest(per="round").set_index(["round", "target"])
    assert per_round.loc[(1, "client:1"), "attack"] == "dlg"  # dlg's 0.9 beats ig's 0.5 in round 1
    assert run.strongest(per="run")[["attack", "target"]].values.tolist() == [["ig-prune", "client:1"]]
    assert run.strongest("lpips_mean").empty  # no LPIPS recorded: nothing to rank
    with pytest.raises(ValueError, match="per = 'client'"):
        run.strongest(per="client")


def test_tables_from_a_folder_of_runs(tmp_path):
    _synthetic_run(tmp_path, "none")
    _synthetic_run(tmp_path, "dp", defenses=[{"name": "dpsgd", "noise_multiplier": 1.0}], epsilons=[0.5, 0.7], ssim=0.1)
    sweep = fedsim.load_sweep(tmp_path)
    rounds = utility_rounds(sweep).set_index(["run", "round"])
    assert rounds.loc[("dp", 2), "epsilon_example"] == pytest.approx(1.4)
    assert math.isnan(rounds.loc[("dp", 0), "epsilon_example"]) and rounds["epsilon_client"].isna().all()
    assert "epsilon" not in rounds  # example-level and client-level are never merged into one column
    single = {row["round"]: row["epsilon_example"] for row in round_table(sweep.runs["dp"])}  # the single-run report's
    assert [rounds.loc[("dp", r), "epsilon_example"] for r in (1, 2)] == [single[r] for r in (1, 2)]
    assert rounds.loc[("none", 2), "train_loss"] == pytest.approx(0.5)
    attacks = attack_results(sweep)
    assert len(attacks) == 6  # the failed attack is left out
    assert (
        attacks.set_index(["run", "target"]).loc[("none", "client:0"), "psnr"] == PSNR_CAP_DB
    )  # every pair exact (an older row without psnr_mean): the cap
    leakage = leakage_rounds(sweep).set_index(["run", "kind"])
    assert leakage.loc[("none", "per-client"), "targets"] == 2 and leakage.loc[("none", "aggregate"), "ssim"] == 0.45
    per_client = leakage.loc[("none", "per-client")]  # an exact pair (at the cap) and 20 dB, one attack each
    assert (per_client["psnr"], per_client["psnr_at_40db"], per_client["attacks"]) == (60.0, 0.5, 1)
    assert 0.0 <= per_client["ssim_low"] <= per_client["ssim"] <= per_client["ssim_high"] <= 1.0


def test_image_scores_read_each_results_images_or_its_mean():
    import pandas as pd

    from fedsim.reporting.tables import image_scores

    rows = pd.DataFrame(
        [
            {"psnr": [None, 20.0], "ssim": [1.0, 0.4], "psnr_mean": 60.0, "ssim_mean": 0.7},  # per image: None is exact
            {"psnr": None, "ssim": None, "psnr_mean": 15.0, "ssim_mean": 0.2},  # an older row: its mean, one image
            {"psnr": None, "ssim": None, "psnr_mean": None, "psnr_exact": 2, "ssim_mean": 1.0},  # older, all exact
        ]
    )
    assert image_scores(rows, "psnr") == [None, 20.0, 15.0, None]
    assert image_scores(rows, "ssim") == [1.0, 0.4, 0.2, 1.0]


def _attack(target, ssim, **floor):
    return {"round": 1, "event": "attack", "target": target, "attack": "ig", "status": "ok", "ssim_mean": ssim} | floor


def test_attack_results_carry_the_floor_and_each_round_counts_the_targets_that_leak(tmp_path):
    run_dir = _synthetic_run(tmp_path, "none")  # its attack rows carry no floor, as an older fedsim wrote them
    store = RunStore(run_dir)
    tested = {"gradient_match": 0.1, "floor_level": 0.05}
    store.append(
        _attack("client:0", 0.9, floor_ssim=0.3, floor_source="random-public", verdict="leaks", p_value=0.01, **tested)
    )
    store.append(
        _attack("client:1", 0.2, floor_ssim=0.3, floor_source="public-mean", verdict="at floor", p_value=0.6, **tested)
    )
    attacks = attack_results(fedsim.load_sweep(tmp_path))
    floors = attacks[attacks["floor_ssim"].notna()].set_index("target")
    assert floors.loc["client:0", ["floor_source", "verdict"]].tolist() == ["random-public", "leaks"]
    assert set(attacks[attacks["floor_ssim"].isna()]["verdict"]) == {"unknown"}
    leakage = leakage_rounds(fedsim.load_sweep(tmp_path), attacks)
    per_client = leakage.set_index(["round", "kind"]).loc[(1, "per-client")]
    # each target's verdict is its attacker's pick: ig, the one result with a gradient match (dlg's older rows have
    # none): client:0 leaks, client:1 is at floor; one leaking target of two is no evidence at 5 % for the cell
    assert per_client[["targets", "leaking", "at_floor", "no_floor"]].tolist() == [2, 1, 1, 0]
    assert per_client["verdict"] == "at floor" and per_client["cell_p_value"] == pytest.approx(1 - 0.95**2)


def test_load_run_shows_each_results_floor_and_reads_older_rows_as_unknown(tmp_path):
    run_dir = _synthetic_run(tmp_path, "none")
    RunStore(run_dir).append(
        _attack("client:0", 0.2, floor_ssim=0.3, floor_source="public-mean", verdict="at floor", p_value=0.4)
        | {"round": 2}
    )
    verdicts = fedsim.load_run(run_dir).verdicts().set_index(["round", "target"])
    assert verdicts.loc[(2, "client:0"), ["attack", "floor_ssim", "floor_source", "p_value", "verdict"]].tolist() == [
        "ig",
        0.3,
        "public-mean",
        0.4,
        "at floor",
    ]
    assert set(verdicts.loc[1, "verdict"]) == {"unknown"}  # the older rows: no test recorded
    older = verdicts.iloc[:-1]
    assert len(older) and set(older["verdict"]) == {"unknown"} and older["floor_ssim"].isna().all()


def test_the_accuracy_table_has_one_column_per_run_and_no_empty_one(tmp_path):
    from fedsim.reporting.render import Table, _html_table
    from fedsim.reporting.tables import accuracy_by_round

    _synthetic_run(tmp_path, "a")
    _synthetic_run(tmp_path, "b", accuracy=0.6)
    sweep = fedsim.load_sweep(tmp_path)
    wide, step = accuracy_by_round(utility_rounds(sweep), {"a": "run a", "b": "run b"})
    assert list(wide.columns) == ["round", "run a", "run b"] and step == 1
    html = _html_table(Table(wide))
    assert html.count("<th>") == 3 and "<th></th>" not in html


def test_each_attack_result_says_how_many_image_pairs_it_scored(tmp_path):
    run_dir = _synthetic_run(tmp_path, "run")
    RunStore(run_dir).append(
        {
            "round": 2,
            "event": "attack",
            "target": "client:1",
            "attack": "ig",
            "status": "ok",
            "ssim": [0.5, 0.7, 0.9],
            "psnr": [10.0, 20.0, None],
            "ssim_mean": 0.7,
        }
    )
    attacks = attack_results(fedsim.load_sweep(tmp_path)).set_index(["round", "target"])
    assert attacks.loc[(2, "client:1"), "images"] == 3 and attacks.loc[(2, "client:1"), "psnr"] == 20.0
    assert math.isnan(attacks.loc[(1, "client:0"), "images"])  # an older row without per-image scores
