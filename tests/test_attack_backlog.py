"""Attacks a killed run left unfinished are not lost: the round's tapped updates wait on disk until every
attack on them has reported, and --resume re-attacks what is still waiting."""

import json

import pytest
import torch

from adversary.adversary import recorded_attacks
from adversary.taps import TappedUpdate
from fedsim.rundir.backlog import AttackBacklog
from fedsim.config import AttackOptions
from fedsim.rundir.writer import RunStore
from fedsim.engine.lifecycle.runner import run_experiment
from tiny_configs import tiny_config


def test_a_backlog_round_trips_tapped_updates_and_lists_its_rounds(tmp_path):
    backlog = AttackBacklog(tmp_path)
    update = TappedUpdate(round=3, tap="mitm", source="client:1", global_state={"w": torch.ones(2)},
                          observed_state={"w": torch.zeros(2)}, num_examples=4, local_steps=1, contributors=(1,))  # fmt: skip
    backlog.save(3, [update])
    backlog.save(12, [update])
    assert backlog.rounds() == [3, 12]
    (loaded,) = backlog.load(3)
    assert loaded.source == "client:1" and loaded.contributors == (1,) and loaded.local_steps == 1
    assert torch.equal(loaded.observed_state["w"], torch.zeros(2))
    backlog.discard(3)
    assert backlog.rounds() == [12]


def test_attacks_of_the_same_name_count_as_done_one_row_each():
    attacks = [AttackOptions(name="dlg"), AttackOptions(name="ig"), AttackOptions(name="dlg")]
    rows = [
        {"event": "attack", "round": 2, "attack": "dlg", "target": "client:0"},
        {"event": "attack", "round": 2, "attack": "dlg", "target": "client:0"},
        {"event": "attack", "round": 2, "attack": "dlg", "target": "client:1"},
        {"event": "attack", "round": 1, "attack": "ig", "target": "client:0"},
        {"event": "eval", "round": 2},
    ]
    assert recorded_attacks(rows, 2, attacks) == {(0, "client:0"), (2, "client:0"), (0, "client:1")}


@pytest.mark.simulation
def test_resume_reattacks_the_rounds_whose_attacks_were_lost(tmp_path, monkeypatch):
    config = tiny_config(
        name="lost-attacks",
        seed=4,
        data={"max_train_samples": 4},
        federation={"rounds": 2},
        adversary={"tap": "mitm", "rounds": "all", "attacks": [{"name": "dlg", "iterations": 20}]},
        output={"dir": str(tmp_path), "run_name": "run"},
    )
    keep = AttackBacklog.discard
    monkeypatch.setattr(AttackBacklog, "discard", lambda self, server_round: None)  # as if killed before scoring
    run_dir = run_experiment(config, quiet=True)
    assert AttackBacklog(run_dir).rounds() == [1, 2]
    rows = RunStore(run_dir).rows()
    first_round = [row for row in rows if row["event"] == "attack" and row["round"] == 1]
    assert len(first_round) == 2
    # the kill lost round 1's attack rows; round 2's had been written
    (run_dir / "metrics.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in rows if not (row["event"] == "attack" and row["round"] == 1))
    )

    monkeypatch.setattr(AttackBacklog, "discard", keep)
    run_experiment(resume=run_dir, quiet=True)
    attacks = [row for row in RunStore(run_dir).rows() if row["event"] == "attack"]
    assert sorted((row["round"], row["target"]) for row in attacks) == [
        (1, "client:0"), (1, "client:1"), (2, "client:0"), (2, "client:1")
    ]  # round 1 again, round 2 not twice
    redone = {row["target"]: row for row in attacks if row["round"] == 1}
    for before in first_round:  # same seeds, same reconstructions
        assert redone[before["target"]]["mse_mean"] == pytest.approx(before["mse_mean"], rel=1e-5)
    assert AttackBacklog(run_dir).rounds() == []
