"""Attacks a killed run left unfinished are not lost: the round's tapped updates wait on disk until every
attack on them has reported, and --resume re-attacks what is still waiting."""

import torch

from adversary.taps import TappedUpdate
from fedsim.rundir.backlog import AttackBacklog


def test_a_backlog_round_trips_tapped_updates_and_lists_its_rounds(tmp_path):
    backlog = AttackBacklog(tmp_path)
    update = TappedUpdate(
        round=3,
        tap="mitm",
        source="client:1",
        global_state={"w": torch.ones(2)},
        observed_state={"w": torch.zeros(2)},
        num_examples=4,
        local_steps=1,
        contributors=(1,),
    )
    backlog.save(3, [update])
    backlog.save(12, [update])
    assert backlog.rounds() == [3, 12]
    (loaded,) = backlog.load(3)
    assert loaded.source == "client:1" and loaded.contributors == (1,) and loaded.local_steps == 1
    assert torch.equal(loaded.observed_state["w"], torch.zeros(2))
    backlog.discard(3)
    assert backlog.rounds() == [12]
