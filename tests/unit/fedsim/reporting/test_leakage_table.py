"""The leakage table a run prints: each target's strongest attack and verdict next to the accuracy of the round."""

from tiny_configs import tiny_config

from fedsim.reporting.leakage_table import leakage_rows
from fedsim.rundir.writer import RunStore


def test_the_table_shows_each_targets_strongest_attack_next_to_accuracy(tmp_path):
    store = RunStore.create(tiny_config(output={"dir": str(tmp_path), "run_name": "r"}), "cpu")
    for server_round, accuracy in ((0, 0.1), (1, 0.2), (2, 0.3), (3, 0.4)):
        store.append({"round": server_round, "event": "eval", "accuracy": accuracy})
    attack = {"event": "attack", "status": "ok", "round": 2}
    store.append({**attack, "target": "client:1", "attack": "dlg", "psnr_mean": 12.0, "ssim_mean": 0.3})
    store.append({**attack, "target": "client:1", "attack": "ig", "psnr_mean": 20.0, "ssim_mean": 0.6})
    store.append({**attack, "target": "aggregate", "attack": "dlg", "psnr_mean": None, "ssim_mean": 1.0})
    store.append({**attack, "target": "client:0", "attack": "dlg", "status": "failed"})
    targets, table = leakage_rows(store.run_dir)
    assert targets == ["client:1", "aggregate"]
    assert [line["round"] for line in table] == [0, 2, 3]  # the start, the attacked rounds, the last
    # rows without floor fields (an older fedsim): no verdict
    assert table[1] == {"round": 2, "accuracy": 0.3, "client:1": "20.0/0.60 —", "aggregate": "exact/1.00 —"}


def test_each_target_shows_its_floor_and_leaks_when_any_attack_scored_above_it(tmp_path):
    store = RunStore.create(tiny_config(output={"dir": str(tmp_path), "run_name": "r"}), "cpu")
    store.append({"round": 1, "event": "eval", "accuracy": 0.2})
    attack = {"event": "attack", "status": "ok", "round": 1}
    at_floor = {**attack, "verdict": "at floor", "floor_ssim": 0.31}
    store.append({**at_floor, "target": "client:0", "attack": "dlg", "psnr_mean": 9.0, "ssim_mean": 0.2})
    store.append({**at_floor, "target": "client:0", "attack": "ig", "psnr_mean": 10.0, "ssim_mean": 0.3})
    # guesses as large as rtf's candidates set another floor: below ig's SSIM, rtf may still leak, and is shown
    store.append(
        {**at_floor, "target": "client:1", "attack": "ig", "psnr_mean": 9.5, "ssim_mean": 0.5, "floor_ssim": 0.55}
    )
    store.append(
        {
            **attack,
            "target": "client:1",
            "attack": "rtf",
            "psnr_mean": 9.0,
            "ssim_mean": 0.45,
            "verdict": "leaks",
            "floor_ssim": 0.4,
        }
    )
    _, table = leakage_rows(store.run_dir)
    assert table[0]["client:0"] == "10.0/0.30 at floor (0.31)"
    assert table[0]["client:1"] == "9.0/0.45 leaks (floor 0.40)"
