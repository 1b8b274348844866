"""The scoring side writes every attack row with its floor and verdict, from the truth the attacker never saw."""

import json
from types import SimpleNamespace

import numpy as np
import torch

from adversary.view import Reconstruction
from fedsim.engine.leakage.scoring import LeakageScorer
from fedsim.judge.floor import AT_FLOOR, FAMILIES, FLOOR_DRAWS, LEAKS, UNKNOWN
from fedsim.judge.metrics import Lpips
from fedsim.rundir.ground_truth import GroundTruthStore

SAMPLES = [3, 7, 11, 20]


class Rows:
    """A run store that keeps the rows it is handed."""

    def __init__(self, run_dir):
        self.run_dir, self.rows = run_dir, []

    def append(self, row):
        json.dumps(row, allow_nan=False)  # what the real store demands of a row
        self.rows.append(row)


def _scorer(tmp_path, x_test):
    generator = np.random.default_rng(0)
    images = generator.random((24, 1, 8, 8)).astype(np.float32)
    identity = SimpleNamespace(denormalize=lambda x: x)
    dataset = SimpleNamespace(
        x_train=images, y_train=np.arange(24) % 3, x_test=x_test, y_test=np.zeros(len(x_test), dtype=np.int64)
    )
    federation = SimpleNamespace(dataset=dataset, test_stats=identity, client_stats=[identity])
    GroundTruthStore(tmp_path).write(1, 0, [SAMPLES], [[int(i % 3) for i in SAMPLES]])
    return LeakageScorer(Rows(tmp_path), federation, save_images=False, lpips=Lpips("off"), seed=5), images


def _result(scorer, name, images, adapts_to=()):
    view = SimpleNamespace(round=1, target="client:0", tap="mitm", contributors=())
    labels = torch.zeros(len(images), dtype=torch.long)
    scorer.on_result(
        view,
        SimpleNamespace(name=name, label=name, preset=None, adapts_to=adapts_to),
        Reconstruction(images, labels, 0.0, (0.0,), 10, 0.1),
    )
    return scorer.store.rows[-1]


def test_every_attack_row_carries_its_floor_and_verdict(tmp_path):
    x_test = np.random.default_rng(1).random((40, 1, 8, 8)).astype(np.float32)
    scorer, images = _scorer(tmp_path, x_test)
    perfect = _result(scorer, "ig", torch.from_numpy(images[SAMPLES]))
    black = _result(scorer, "dlg", torch.zeros(4, 1, 8, 8))
    assert perfect["verdict"] == LEAKS and black["verdict"] == AT_FLOOR
    assert perfect["floor_draws"] == FLOOR_DRAWS and perfect["floor_source"] in FAMILIES
    floor_fields = {key: value for key, value in perfect.items() if key.startswith("floor_")}
    assert floor_fields == {key: value for key, value in black.items() if key.startswith("floor_")}  # one floor
    assert black["ssim_mean"] <= black["floor_ssim"] < perfect["ssim_mean"]


def test_an_attack_row_records_the_defenses_its_attack_is_built_for(tmp_path):
    """What the attacker's ranking reads (adversary.ranking): an adaptive attack's results rank first."""
    x_test = np.random.default_rng(1).random((40, 1, 8, 8)).astype(np.float32)
    scorer, images = _scorer(tmp_path, x_test)
    assert _result(scorer, "ig-prune", torch.from_numpy(images[SAMPLES]), adapts_to=("prune",))["adapts_to"] == [
        "prune"
    ]
    assert _result(scorer, "ig", torch.from_numpy(images[SAMPLES]))["adapts_to"] == []


def test_without_a_public_split_the_verdict_is_unknown(tmp_path):
    scorer, images = _scorer(tmp_path, np.zeros((0, 1, 8, 8), dtype=np.float32))
    row = _result(scorer, "ig", torch.from_numpy(images[SAMPLES]))
    assert row["verdict"] == UNKNOWN and "floor_ssim" not in row


def test_an_attack_cut_before_its_first_iteration_gets_its_own_status_and_no_score_or_verdict(tmp_path):
    scorer, images = _scorer(tmp_path, np.random.default_rng(1).random((40, 1, 8, 8)).astype(np.float32))
    view = SimpleNamespace(round=1, target="client:0", tap="mitm", contributors=())
    options = SimpleNamespace(name="ig", label="ig", preset=None, time_limit=2.0, adapts_to=())
    start = torch.from_numpy(images[SAMPLES])  # even a starting guess that happens to match is not scored
    labels = torch.zeros(4, dtype=torch.long)
    scorer.on_result(view, options, Reconstruction(start, labels, 0.0, (0.0,), 0, 2.0, cut=True))
    scorer.on_result(view, options, Reconstruction(start, labels, 0.0, (0.0,), 3, 2.0, cut=True))
    unrun, cut = scorer.store.rows
    assert unrun["status"] == "no-iterations" and unrun["cut"] is True and unrun["iterations"] == 0
    assert "time_limit = 2 s ran out before ig's first iteration finished" in unrun["error"]
    assert not {"verdict", "ssim_mean", "psnr_mean", "floor_ssim", "batch_size"} & unrun.keys()
    assert cut["status"] == "ok" and cut["cut"] is True and cut["iterations"] == 3 and cut["verdict"] == LEAKS
