"""The first run: `make run` runs configs/demo.yaml with `--report`, which shows what fedsim is for."""

from pathlib import Path

import pytest
import yaml

from fedsim.config import load_config
from fedsim.reporting.leakage_table import leakage_rows
from fedsim.rundir.writer import RunStore
from tiny_configs import tiny_config, tiny_raw

ROOT = Path(__file__).resolve().parents[1]


def test_make_run_runs_the_demo_with_its_report():
    makefile = (ROOT / "Makefile").read_text()
    assert "CONFIG ?= configs/demo.yaml" in makefile and "fedsim run $(CONFIG) --report" in makefile


def test_the_demo_attacks_every_client_and_the_aggregate_on_bundled_data():
    config = load_config(ROOT / "configs" / "demo.yaml")
    assert config.data.dataset == "digits" and config.adversary.targets == "both" and config.adversary.attacks
    assert config.adversary.clients == "all"


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


@pytest.mark.simulation
def test_run_with_report_prints_the_table_writes_the_report_and_ends_with_the_run_directory(tmp_path, capsys):
    from fedsim.cli import main

    raw = tiny_raw(
        data={"max_train_samples": 2},
        adversary={"targets": "both", "attacks": [{"name": "dlg", "iterations": 20}]},
        output={"dir": str(tmp_path), "run_name": "first"},
    )
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(raw))
    assert main(["run", str(config), "--quiet", "--report"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == str(tmp_path / "first")
    assert any("client:0" in line and "aggregate" in line for line in out)
    report = tmp_path / "first" / "report" / "report.html"
    assert report.is_file() and "reconstruction" in report.read_text().lower()
