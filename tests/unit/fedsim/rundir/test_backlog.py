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


def test_a_malicious_pickle_in_the_backlog_is_one_line_and_runs_nothing(tmp_path):
    import pytest
    from malicious_pickles import assert_really_malicious, save_malicious

    from fedsim.models import ModelError

    assert_really_malicious(tmp_path)
    backlog, sentinel = AttackBacklog(tmp_path / "run"), tmp_path / "code-ran"
    backlog.dir.mkdir(parents=True)
    save_malicious(backlog.path(3), sentinel)
    with pytest.raises(ModelError, match="holds objects other than tensors") as error:
        backlog.load(3)
    assert str(backlog.path(3)) in str(error.value) and "\n" not in str(error.value)
    assert not sentinel.exists()
