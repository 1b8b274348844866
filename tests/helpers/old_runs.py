"""A run directory as older fedsim versions wrote it: the config (every attack with the one flat option model
of that time, unset options as null), rows without ``schema``, a checkpoint; and what it must read back as."""

from __future__ import annotations

import json
from pathlib import Path

import torch

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
