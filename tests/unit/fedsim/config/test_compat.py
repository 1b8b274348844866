"""Runs and configs written before the schema version (and before per-attack options) still open.

A run directory of the old layout: a config.yaml without ``schema_version`` that dumps every attack with
the one flat option model of that time (unset options as null, ``tv_weight`` / ``bn_weight`` keys), and
metrics rows without ``schema``. It must open in ``fedsim.load_run``, ``fedsim report`` and ``--resume``,
with the same attack settings it ran with.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
import yaml

import fedsim
from fedsim.cli import main
from fedsim.config import SCHEMA_VERSION, dump_config, load_config, parse_config
from fedsim.rundir.writer import RunStore

OLD_ATTACKS = """\
  attacks:
  - name: dlg
    iterations: 10
    restarts: 1
    init: null
    init_scale: 0.05
    tv_weight: 0.03
    loss: null
    optimizer: null
    lr: null
    bn_weight: null
    precision: float32
    deterministic: false
    log_every: 0
    inverts: aggregate
  - name: gradinversion
    iterations: 2
    restarts: 1
    init: null
    init_scale: null
    tv_weight: null
    loss: null
    optimizer: null
    lr: null
    bn_weight: 0.5
    precision: float32
    deterministic: false
    log_every: 0
    inverts: per-client
"""

OLD_CONFIG = f"""\
name: old
seed: 1
device: cpu
data:
  dataset: digits
  path: null
  root: ~/.cache/fedsim/data
  download: true
  max_train_samples: 40
  max_test_samples: 60
  normalize: none
  partition:
    name: iid
model:
  name: lenet
  activation: null
  norm: batch
  width: null
  dropout: 0.0
  init: uniform
  checkpoint: null
  pretrained: false
federation:
  num_clients: 2
  rounds: 2
client:
  lr: 0.1
  batch_size: 1
  local_steps: 1
  defenses:
  - name: noise
    sigma: 0.1
    distribution: gaussian
adversary:
  targets: both
  knows:
    bn_statistics: true
{OLD_ATTACKS}output:
  dir: runs
  run_name: null
  save_checkpoints: true
  ground_truth: true
"""


# What an old run may still run: gradinversion's BatchNorm prior is now refused on a model without BatchNorm
# (an attack named explicitly that cannot apply), so the run that resumes attacks with plain ig instead.
RUNNABLE_OLD_CONFIG = OLD_CONFIG.replace("- name: gradinversion", "- name: ig").replace(
    "bn_weight: 0.5", "bn_weight: null"
)


def write_old_run(run_dir: Path, config_text: str = OLD_CONFIG) -> Path:
    """An old-layout run killed after round 1: config, rows of rounds 0-2 (2 uncommitted), checkpoint of round 1."""
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(config_text)
    (run_dir / "environment.json").write_text(json.dumps({"python": "3.11", "device": "cpu"}))
    rows = [
        {"round": 0, "event": "eval", "loss": 2.3, "accuracy": 0.1, "time": 1.0},
        {"round": 1, "event": "fit", "client": 0, "train_loss": 2.2, "time": 2.0},
        {"round": 1, "event": "attack", "attack": "dlg", "target": "aggregate", "psnr": 12.5, "time": 3.0},
        {"round": 1, "event": "eval", "loss": 2.1, "accuracy": 0.3, "time": 4.0},
        {"round": 2, "event": "eval", "loss": 2.0, "accuracy": 0.4, "time": 5.0},
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (run_dir / "checkpoints").mkdir()
    torch.save({"w": torch.zeros(2)}, run_dir / "checkpoints" / "round_0001.pt")
    return run_dir


def assert_old_model_and_data(config) -> None:
    # keys every model and data set had then, at their unset value, mean nothing for lenet and digits: dropped
    assert config.model.model_dump() == {
        "name": "lenet",
        "init": "uniform",
        "checkpoint": None,
        "activation": None,
        "width": None,
        "dropout": 0.0,
    }
    assert config.data.dataset == "digits" and "root" not in config.data.model_dump()


def assert_old_attack_settings(config) -> None:
    dlg, gradinversion = config.adversary.attacks
    assert (dlg.name, dlg.iterations, dlg.init_scale, dlg.inverts) == ("dlg", 10, 0.05, "aggregate")
    assert [(r.name, r.weight) for r in dlg.regularizers] == [("tv", 0.03)]
    assert (dlg.init, dlg.loss, dlg.optimizer, dlg.lr) == ("randn", "l2", "lbfgs", 1.0)  # nulls: DLG's defaults
    assert [(r.name, r.weight) for r in gradinversion.regularizers] == [("tv", 1e-4), ("bn_statistics", 0.5)]


def test_an_old_run_opens_in_load_run_with_the_attack_settings_it_ran_with(tmp_path):
    run = fedsim.load_run(write_old_run(tmp_path / "old"))
    assert_old_attack_settings(run.config)
    assert_old_model_and_data(run.config)
    assert list(run.metrics.query("event == 'eval'")["accuracy"]) == [0.1, 0.3, 0.4]


def test_an_old_run_gets_a_report(capsys, tmp_path):
    run_dir = write_old_run(tmp_path / "old")
    assert main(["report", str(run_dir)]) == 0
    assert "| 1 | 2.1000 | 0.3000 |" in (run_dir / "report" / "summary.md").read_text()
    assert "- `noise`: sigma=0.1, distribution=gaussian" in (run_dir / "report" / "summary.md").read_text()


def test_an_old_run_reopens_for_resume_and_new_rows_carry_the_schema(tmp_path):
    run_dir = write_old_run(tmp_path / "old")
    store, config, last = RunStore.open_for_resume(run_dir)
    assert last == 1 and [row["round"] for row in store.rows()] == [0, 1, 1, 1]  # round 2 was not committed
    assert_old_attack_settings(config)
    assert_old_model_and_data(config)
    store.append({"round": 2, "event": "eval", "loss": 2.0, "accuracy": 0.4})
    assert [row.get("schema") for row in store.rows()] == [None, None, None, None, SCHEMA_VERSION]


def test_old_keys_say_once_which_key_replaced_them(tmp_path, caplog, monkeypatch):
    import fedsim.core.sections

    monkeypatch.setattr(fedsim.core.sections, "_said", set())  # what earlier tests of this process were told
    logger = logging.getLogger("fedsim")
    logger.addHandler(caplog.handler)
    try:
        write_old_run(tmp_path / "old")
        load_config(tmp_path / "old" / "config.yaml")
        load_config(tmp_path / "old" / "config.yaml")  # a sweep reads its config once per point
    finally:
        logger.removeHandler(caplog.handler)
    lines = [record.getMessage() for record in caplog.records if "deprecated" in record.getMessage()]
    assert lines == [
        "adversary.attacks[0].tv_weight is deprecated; use regularizers: [{name: tv, weight: 0.03}]",
        "adversary.attacks[1].bn_weight is deprecated; use regularizers: [{name: tv, weight: 0.0001}, "
        "{name: bn_statistics, weight: 0.5}]",
    ]  # unset (null) old keys are silent: they only meant "the attack's default"


def test_a_written_config_carries_its_schema_version_and_reads_back_identically(tmp_path):
    config = load_config(write_old_run(tmp_path / "old") / "config.yaml")
    text = dump_config(config)
    assert yaml.safe_load(text)["schema_version"] == SCHEMA_VERSION
    assert "tv_weight" not in text and "bn_weight" not in text
    assert parse_config(yaml.safe_load(text)) == config


@pytest.mark.parametrize(
    "section, key, value",
    [
        ("model", "norm", "group"),
        ("model", "pretrained", True),
        ("data", "root", "/elsewhere"),
        ("data", "download", False),
    ],
)
def test_an_old_flat_key_that_was_set_is_still_an_error_naming_the_plugin(section, key, value):
    """Only the old unset value is dropped: a value someone chose, for a model or data set that ignores it, is said."""
    from fedsim.config import ConfigError

    raw = {"model": {"name": "lenet"}, "data": {"dataset": "digits"}}
    raw[section][key] = value
    owner = "model 'lenet'" if section == "model" else "data set 'digits'"
    with pytest.raises(ConfigError, match=f"^unknown key '{section}.{key}' for {owner}; allowed here: "):
        parse_config(raw)


def test_a_file_of_the_current_schema_gets_no_leniency_for_old_flat_keys():
    from fedsim.config import ConfigError

    parse_config({"schema_version": 2, "model": {"name": "tv:resnet18", "norm": "batch", "dropout": 0}})
    with pytest.raises(ConfigError, match="^unknown key 'model.norm' for model 'tv:resnet18'"):
        parse_config({"schema_version": SCHEMA_VERSION, "model": {"name": "tv:resnet18", "norm": "batch"}})


def test_a_config_from_a_newer_fedsim_is_refused_in_one_line():
    from fedsim.config import ConfigError

    with pytest.raises(ConfigError, match=f"schema_version = 99: this fedsim reads versions up to {SCHEMA_VERSION}"):
        parse_config({"schema_version": 99})


@pytest.mark.simulation
def test_an_old_run_resumes_and_finishes_as_an_uninterrupted_one(tmp_path):
    """A real run, rewritten into the old layout after round 1, resumes to the same round-2 metrics."""
    from fedsim.engine.lifecycle.runner import run_experiment

    config = load_config(write_old_run(tmp_path / "template", RUNNABLE_OLD_CONFIG) / "config.yaml")
    config.output.dir, config.output.run_name = tmp_path, "run"
    run_dir = Path(run_experiment(config, quiet=True))
    finished = [row for row in RunStore(run_dir).rows() if row["event"] == "eval"]

    (run_dir / "config.yaml").write_text(RUNNABLE_OLD_CONFIG)  # the old layout, as an older fedsim wrote it
    (run_dir / "fingerprint.json").unlink()  # older runs kept none
    rows = [{k: v for k, v in row.items() if k != "schema"} for row in RunStore(run_dir).rows()]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (run_dir / "checkpoints" / "round_0002.pt").unlink()  # killed before round 2 committed
    (run_dir / "summary.json").unlink(missing_ok=True)

    run_experiment(resume=run_dir, quiet=True)
    resumed = [row for row in RunStore(run_dir).rows() if row["event"] == "eval"]
    assert [(row["round"], row["accuracy"], row["loss"]) for row in resumed] == [
        (row["round"], row["accuracy"], row["loss"]) for row in finished
    ]
