"""How an adversary's attacks become jobs: which targets each attack runs on, and which are already done."""

import pytest

from adversary.adversary import recorded_attacks
from fedsim.config import AttackOptions, ConfigError, parse_config


def test_an_attack_runs_on_the_kind_of_target_it_names():
    per_client, aggregate, both = (
        AttackOptions(name="dlg", inverts=kind) for kind in ("per-client", "aggregate", "both")
    )
    assert per_client.applies_to("client:3") and not per_client.applies_to("aggregate")
    assert aggregate.applies_to("aggregate") and not aggregate.applies_to("client:0")
    assert both.applies_to("aggregate") and both.applies_to("client:0")


def test_attacks_limited_to_a_target_kind_count_as_done_only_for_their_targets():
    attacks = [
        AttackOptions(name="dlg", inverts="per-client"),
        AttackOptions(name="dlg", tv_weight=0.03, inverts="aggregate"),
    ]
    rows = [
        {"event": "attack", "round": 1, "attack": "dlg", "target": "client:0"},
        {"event": "attack", "round": 1, "attack": "dlg", "target": "aggregate"},
    ]
    assert recorded_attacks(rows, 1, attacks) == {(0, "client:0"), (1, "aggregate")}


def test_an_attack_on_targets_the_adversary_never_attacks_is_a_one_line_error():
    raw = {"adversary": {"targets": "per-client", "attacks": [{"name": "dlg", "inverts": "aggregate"}]}}
    with pytest.raises(ConfigError) as error:
        parse_config(raw)
    message = str(error.value)
    assert "adversary.attacks.0.inverts = aggregate" in message and "allowed: both or per-client" in message
    assert "\n" not in message


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


def test_a_stopped_run_abandons_its_attacks_at_once_records_none_and_keeps_them_for_resume(tmp_path):
    """A stop ends the attack workers mid-attack; the killed job is no failed attack, and the round stays in
    the backlog so that `--resume` attacks it again."""
    import os
    import time

    import torch

    from adversary.taps import TappedUpdate
    from fedsim.core.seeding import derive_seed
    from fedsim.engine.assembly import adversary_of as attach_adversary
    from fedsim.engine.assembly import federation_of
    from fedsim.engine.lifecycle.federation import partition_record
    from fedsim.rundir.backlog import AttackBacklog
    from fedsim.rundir.layout import PARTITIONS_FILE
    from fedsim.rundir.writer import RunStore

    config = parse_config(
        {
            "device": "cpu",
            "data": {"dataset": "digits", "max_train_samples": 20, "max_test_samples": 20, "normalize": "none"},
            "model": {"name": "lenet"},
            "federation": {"num_clients": 2, "rounds": 1},
            "client": {"batch_size": 1, "local_steps": 1},
            "adversary": {"targets": "per-client", "workers": 1, "attacks": [{"name": "ig", "iterations": 10**7}]},
        }
    )
    federation = federation_of(config)
    store = RunStore.create(config, "cpu", tmp_path / "run")
    store.write_json(PARTITIONS_FILE, partition_record(federation))
    adversary = attach_adversary(config, federation, store, derive_seed(config.seed, "model")).adversary
    worker = adversary.workers.call(os.getpid).result(timeout=120)
    state = {key: value.detach().clone() for key, value in adversary.architecture.model.state_dict().items()}
    sent = {key: value + 0.01 * torch.randn_like(value) for key, value in state.items()}
    adversary.observe(TappedUpdate(1, "mitm", "client:0", state, sent, 1, 1, (0,)))
    assert adversary.round_finished(1) == 1

    adversary.abandon()
    deadline = time.monotonic() + 120  # a bound on liveness only: the killed job fails within milliseconds
    while adversary.pending():  # until its failure is delivered: the callbacks that must record nothing have run
        assert time.monotonic() < deadline, "the killed attack job never failed"
        time.sleep(0.05)
    with pytest.raises(ProcessLookupError):
        os.kill(worker, 0)
    assert [row for row in store.rows() if row["event"] == "attack"] == []
    assert AttackBacklog(store.run_dir).rounds() == [1]
    store.close()


def test_split_targets_gives_every_worker_a_share_of_consecutive_targets():
    from adversary.adversary import split_targets

    assert split_targets(list(range(5)), 2) == [[0, 1, 2], [3, 4]]
    assert split_targets(list(range(2)), 4) == [[0], [1]]
    assert split_targets(list(range(3)), 1) == [[0, 1, 2]]


def test_a_strongest_portfolio_of_one_group_runs_on_every_worker():
    from concurrent.futures import Future
    from types import SimpleNamespace

    from adversary.adversary import Adversary
    from adversary.inversion.saturation import SaturationBudget

    submitted = []

    class Recorder:
        def submit(self, job):
            submitted.append(job)
            return Future()  # never finishes: only the jobs sent out are looked at

    config = SimpleNamespace(workers=2, resources=SimpleNamespace(cpus=1.0))
    adversary = Adversary(config, None, None, 0, "cpu", None, None, workers=Recorder())
    views = [SimpleNamespace(target=f"client:{i}") for i in range(3)]
    attacks = [(0, AttackOptions(name="dlg"), views), (1, AttackOptions(name="ig"), views)]
    assert adversary._submit_portfolios(1, attacks, SaturationBudget()) == 2
    assert [[view.target for view in job.views] for job in submitted] == [["client:0", "client:1"], ["client:2"]]
    assert all([options.name for options, _ in job.attacks] == ["dlg", "ig"] for job in submitted)


def test_a_listed_attack_alone_in_its_round_splits_its_restarts_over_the_workers(monkeypatch):
    from concurrent.futures import Future
    from types import SimpleNamespace

    from adversary import adversary as module
    from adversary.adversary import Adversary

    submitted = []

    class Recorder:
        def submit(self, job):
            submitted.append(job)
            return Future()

    views = [SimpleNamespace(target="client:0")]
    monkeypatch.setattr(module, "build_views", lambda *args: views)
    monkeypatch.setattr(module, "group_views", lambda todo: [[0]])
    config = SimpleNamespace(
        workers=2,
        resources=SimpleNamespace(cpus=1.0),
        attacks=[AttackOptions(name="ig", restarts=4)],
        portfolio="listed",
    )
    adversary = Adversary(config, None, None, 0, "cpu", None, None, workers=Recorder())
    assert adversary._submit(1, ["an update"], done=set()) == 1  # one attack job, in two parts
    assert [(job.options.first_restart, job.options.restarts) for job in submitted] == [(0, 2), (2, 2)]
