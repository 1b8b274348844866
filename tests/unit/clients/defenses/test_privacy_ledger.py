"""The client's privacy ledger: epsilon as Opacus counts it, once per round across resumes and processes."""

import math

import pytest
from dp_training import N, client, dpsgd, rounds, toy
from opacus.accountants import create_accountant

from clients.defenses.privacy_ledger import ClientPrivacyLedger, LedgerEntry, epsilon

# Opacus' hook on the first layer, whose input needs no gradient; clients.defenses.dpsgd silences it too
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing")


@pytest.mark.parametrize("accountant", ["rdp", "prv"])
def test_epsilon_grows_every_round_exactly_as_opacus_own_accountant_counts(tmp_path, accountant):
    model, x, y = toy()
    cfg = client(dpsgd(noise_multiplier=1.1, accountant=accountant), batch_size=4, local_steps=5)
    reference = create_accountant(accountant)  # stepped as Opacus' PrivacyEngine would, step by step
    epsilons = []
    for record in rounds(model, x, y, cfg, tmp_path, planned=3):
        for _ in range(5):
            reference.step(noise_multiplier=1.1, sample_rate=4 / N)
        assert record["defense.dpsgd.epsilon"] == pytest.approx(reference.get_epsilon(delta=1e-5), rel=1e-9)
        epsilons.append(record["defense.dpsgd.epsilon"])
    assert epsilons[0] < epsilons[1] < epsilons[2]
    assert record == pytest.approx(
        {
            "defense.dpsgd.epsilon": epsilons[2],
            "defense.dpsgd.accountant_covers": 1.0,
            "defense.dpsgd.delta": 1e-5,
            "defense.dpsgd.noise_multiplier": 1.1,
            "defense.dpsgd.sample_rate": 0.1,
            "defense.dpsgd.steps": 5.0,
            "defense.dpsgd.total_steps": 15.0,
        }
    )
    assert all(type(value) is float for value in record.values())  # reply metrics must be plain floats


def test_a_round_run_again_after_resume_is_counted_once(tmp_path):
    model, x, y = toy()
    cfg = client(dpsgd(noise_multiplier=1.0), batch_size=4, local_steps=5)
    uninterrupted = rounds(model, x, y, cfg, tmp_path / "a", planned=3)
    # Killed during round 3 after its ledger entry (and round 2's) were written; --resume reruns 2 and 3.
    rounds(model, x, y, cfg, tmp_path / "b", planned=3)
    resumed = rounds(model, x, y, cfg, tmp_path / "b", planned=3, run=[2, 3])
    assert [r["defense.dpsgd.epsilon"] for r in resumed] == [r["defense.dpsgd.epsilon"] for r in uninterrupted[1:]]
    assert [entry.round for entry in ClientPrivacyLedger(tmp_path / "b").entries] == [1, 2, 3]


def test_the_ledger_survives_a_new_process_and_rewriting_a_round_replaces_only_that_round(tmp_path):
    for server_round in (1, 2, 3):
        ClientPrivacyLedger(tmp_path).record(LedgerEntry(server_round, 1.0, 0.1, 5))  # a new actor every round
    history = ClientPrivacyLedger(tmp_path).record(LedgerEntry(2, 2.0, 0.1, 5))
    assert history == [LedgerEntry(1, 1.0, 0.1, 5), LedgerEntry(2, 2.0, 0.1, 5), LedgerEntry(3, 1.0, 0.1, 5)]
    assert ClientPrivacyLedger(tmp_path).entries == history
    reference = create_accountant("rdp")
    reference.history = [(1.0, 0.1, 5), (2.0, 0.1, 5), (1.0, 0.1, 5)]
    assert epsilon(history, 1e-3, "rdp") == pytest.approx(reference.get_epsilon(delta=1e-3), rel=1e-12)


def test_a_late_round_written_after_the_next_one_neither_erases_nor_doubles_it(tmp_path):
    # Two actors opened the ledger after round 1; round 3 is recorded first, the late round 2 after it.
    ClientPrivacyLedger(tmp_path).record(LedgerEntry(1, 1.0, 0.1, 5))
    late, next_round = ClientPrivacyLedger(tmp_path), ClientPrivacyLedger(tmp_path)
    next_round.record(LedgerEntry(3, 1.0, 0.1, 5))
    history = late.record(LedgerEntry(2, 1.0, 0.1, 5))
    assert [entry.round for entry in history] == [1, 2, 3]
    assert ClientPrivacyLedger(tmp_path).record(LedgerEntry(2, 1.0, 0.1, 5)) == history  # written again: once


def test_shuffled_fixed_size_batches_report_no_epsilon_as_a_guarantee(tmp_path):
    model, x, y = toy()
    cfg = client(dpsgd(noise_multiplier=1.1, poisson_sampling=False), batch_size=4, local_steps=5)
    (record,) = rounds(model, x, y, cfg, tmp_path, planned=1)
    assert "defense.dpsgd.epsilon" not in record
    assert record["defense.dpsgd.accountant_covers"] == 0.0
    assert record["defense.dpsgd.epsilon_if_poisson"] > 0


def test_without_noise_there_is_no_guarantee():
    assert epsilon([LedgerEntry(1, 0.0, 0.1, 5)], 1e-3, "rdp") == math.inf


def test_target_epsilon_is_spent_by_the_last_planned_round_and_not_exceeded(tmp_path):
    model, x, y = toy()
    cfg = client(dpsgd(target_epsilon=2.0), batch_size=4, local_steps=5)
    records = rounds(model, x, y, cfg, tmp_path, planned=4)
    spent = [record["defense.dpsgd.epsilon"] for record in records]
    assert spent[0] < spent[1] < spent[2] < spent[3]
    assert 2.0 - 0.05 <= spent[-1] <= 2.0  # Opacus' binary search stops within 0.01 below the target
    assert records[0]["defense.dpsgd.noise_multiplier"] == records[-1]["defense.dpsgd.noise_multiplier"] > 0


@pytest.mark.parametrize("symlinked", ["privacy.json", "clients"])
def test_a_ledger_symlinked_outside_the_run_is_refused_in_one_line_and_nothing_is_written_there(tmp_path, symlinked):
    from fedsim.core.atomic import OutsideDirectory

    run_dir, outside = tmp_path / "run", tmp_path / "outside"
    outside.mkdir()
    run_dir.mkdir()
    if symlinked == "clients":  # the folder of every client's state
        (run_dir / "clients").symlink_to(outside, target_is_directory=True)
    else:
        (run_dir / "clients" / "0").mkdir(parents=True)
        (run_dir / "clients" / "0" / "privacy.json").symlink_to(outside / "privacy.json")
    with pytest.raises(OutsideDirectory, match=rf"^refusing to write '.*{symlinked}.*' is a symlink to ") as refused:
        ClientPrivacyLedger(run_dir / "clients" / "0").record(LedgerEntry(1, 1.0, 0.1, 5))
    assert "\n" not in str(refused.value)
    assert list(outside.iterdir()) == []
