"""The leakage table a run prints: each target's strongest attack next to the accuracy of the round."""

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
    assert table[1] == {"round": 2, "accuracy": 0.3, "client:1": "20.0/0.60", "aggregate": "exact/1.00"}
