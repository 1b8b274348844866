"""Run.strongest says that its pick is a ground-truth selection, and over how many attacks."""

from synthetic_runs import _synthetic_run

import fedsim
from fedsim.reporting.leakage_table import selection_lines
from fedsim.rundir.reader import SELECTED_OVER, SELECTION
from fedsim.rundir.writer import RunStore


def _attacked(tmp_path):
    run_dir = _synthetic_run(tmp_path, "none")  # dlg on client:0, client:1 and the aggregate in round 1
    store = RunStore(run_dir)
    for attack, target, server_round, ssim in (
        ("ig", "client:0", 1, 0.95),
        ("ig-prune", "client:1", 2, 0.99),
        ("ig", "client:1", 1, 0.5),
    ):
        row = {"round": server_round, "event": "attack", "target": target, "attack": attack, "status": "ok"}
        store.append({**row, "ssim_mean": ssim, "psnr_mean": 20.0})
    return run_dir


def test_every_pick_is_labelled_with_the_attacks_it_compared(tmp_path):
    run = fedsim.load_run(_attacked(tmp_path))
    per_target = run.strongest().set_index("target")
    # client:0: dlg and ig; client:1: dlg, ig (round 1) and ig-prune (round 2); the aggregate: dlg alone
    assert per_target[SELECTED_OVER].to_dict() == {"client:0": 2, "client:1": 3, "aggregate": 1}
    assert per_target.loc["client:1", SELECTION] == "ground-truth selection over 3 attacks"
    assert per_target.loc["aggregate", SELECTION] == "ground-truth selection over 1 attack"
    per_round = run.strongest(per="round").set_index(["round", "target"])
    assert per_round.loc[(1, "client:1"), SELECTED_OVER] == 2 and per_round.loc[(2, "client:1"), SELECTED_OVER] == 1
    assert run.strongest(per="run")[SELECTED_OVER].tolist() == [3]
    assert {SELECTION, SELECTED_OVER} <= set(run.strongest("lpips_mean").columns)  # labelled even when empty


def test_the_console_table_names_the_selection_and_each_attack_alone(tmp_path):
    title, alone = selection_lines(_attacked(tmp_path))
    # the targets of rounds 1 and 2 compared 1 to 2 attacks
    assert (
        title == "leakage per target: PSNR (dB)/SSIM of the attacker's pick over 1-2 attacks "
        "(defense-aware attacks first, then lowest gradient match)"
    )
    assert alone.startswith("each attack alone, mean SSIM over its targets: dlg 0.75, ig 0.72, ig-prune 0.99. oracle:")


def test_the_console_table_of_one_attack_names_it_and_no_selection(tmp_path):
    title, alone = selection_lines(_synthetic_run(tmp_path, "none"))
    assert (title, alone) == ("leakage per target: PSNR (dB)/SSIM of dlg", "")


def test_the_attackers_own_pick_is_the_lowest_gradient_match_whatever_the_ground_truth_says(tmp_path):
    run_dir = _synthetic_run(tmp_path, "none")  # its dlg rows carry no gradient match: they do not compete
    store = RunStore(run_dir)
    for attack, server_round, match, ssim, saturation in (
        ("dlg@paper-003", 1, 1e-6, 0.90, "saturated"),  # matches the update best, scores worse
        ("ig", 1, 1e-2, 0.95, "capped"),
        ("ig", 2, 1e-7, 0.40, "saturated"),
    ):
        row = {"round": server_round, "event": "attack", "target": "client:0", "attack": attack, "status": "ok"}
        store.append({**row, "gradient_match": match, "ssim_mean": ssim, "saturation": saturation})
    run = fedsim.load_run(run_dir)
    per_target = run.attacker_pick()
    assert per_target[["round", "target", "attack", "ssim_mean"]].values.tolist() == [[2, "client:0", "ig", 0.40]]
    per_round = run.attacker_pick(per="round").set_index("round")
    assert per_round.loc[1, ["attack", "saturation"]].tolist() == ["dlg@paper-003", "saturated"]
    assert run.strongest().set_index("target").loc["client:0", "attack"] == "ig"  # the oracle picks otherwise
