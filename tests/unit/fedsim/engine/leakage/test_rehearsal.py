"""The attacker's rehearsal: public images trained the way the run's clients train, shaped like the target."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from adversary.taps import AGGREGATE
from adversary.view import AttackerView, LocalTraining
from fedsim.config import AttackOptions, parse_config
from fedsim.engine.assembly import client_spec_of, federation_of, rehearsal_of, run_model_of
from fedsim.engine.leakage.rehearsal import tuned_attacks

LR = 0.5


def setting(defenses: list, tuning: dict, tmp_path, attacks: list) -> tuple:
    config = parse_config(
        {
            "device": "cpu",
            "data": {"dataset": "digits", "max_train_samples": 40, "max_test_samples": 40, "image_size": 16},
            "model": {"name": "lenet"},
            "federation": {"num_clients": 2, "rounds": 1},
            "client": {"batch_size": 1, "local_steps": 1, "lr": LR, "defenses": defenses},
            "adversary": {"attacks": attacks, "tuning": {"cache": str(tmp_path / "cache"), **tuning}},
        }
    )
    federation = federation_of(config)
    data = federation.dataset
    spec = client_spec_of(
        config,
        tmp_path / "run",
        partitions=federation.partitions,
        stats=federation.client_stats,
        num_classes=data.num_classes,
        channels=data.channels,
        image_size=data.image_size,
    )
    return config, federation, spec


def target_view(config, federation, target: str = "client:0") -> AttackerView:
    model = run_model_of(config, federation.dataset, seed=3, with_weights=True)
    state = {key: value.detach().clone() for key, value in model.state_dict().items()}
    return AttackerView(
        round=2,
        tap="mitm",
        target=target,
        model=model,
        global_state=state,
        observed_state=state,
        input_shape=(1, 16, 16),
        num_classes=10,
        num_samples=1,
        local_training=LocalTraining(lr=LR, local_steps=1, batch_size=1),
    )


def test_a_rehearsed_update_is_one_client_step_on_a_public_image_from_the_rounds_model(tmp_path):
    config, federation, spec = setting([], {"select": "all", "problems": 2}, tmp_path, [{"name": "ig"}])
    view = target_view(config, federation)
    task = rehearsal_of(config, spec, federation).task(config.adversary.attacks[0], [view])
    assert task is not None and task.tuned_round == 2 and task.setting["num_samples"] == 1
    problems = task.problems
    assert [v.target for v in problems.views] == ["public:0", "public:1"]
    model = view.model
    for public, image, label in zip(problems.views, problems.images, problems.labels, strict=True):
        assert public.round == view.round and public.num_samples == 1 and public.labels is None  # labels not granted
        assert any(torch.equal(image[0], torch.from_numpy(row)) for row in federation.dataset.x_test)  # public split
        model.load_state_dict(view.global_state)
        x = federation.test_stats.normalize(image)
        loss = torch.nn.functional.cross_entropy(model(x), label)
        gradients = torch.autograd.grad(loss, list(model.parameters()))
        for (name, _), gradient in zip(model.named_parameters(), gradients, strict=True):
            sent = public.observed_state[name]
            assert torch.allclose(view.global_state[name] - sent, LR * gradient, atol=1e-5), name


def test_only_the_selected_attacks_on_per_client_targets_are_rehearsed(tmp_path):
    attacks = [{"name": "ig"}, {"name": "ig-noise"}]
    config, federation, spec = setting([{"name": "noise", "sigma": 0.01}], {}, tmp_path, attacks)
    ig, ig_noise = (AttackOptions(**attack) for attack in attacks)
    # by default: the attacks adapted to a defense in force
    assert tuned_attacks(config.adversary, config.client.defenses) == {"ig-noise"}
    rehearsal = rehearsal_of(config, spec, federation)
    view = target_view(config, federation)
    assert rehearsal.task(ig, [view]) is None
    assert rehearsal.task(ig_noise, [view]) is not None
    assert rehearsal.task(ig_noise, [target_view(config, federation, AGGREGATE)]) is None  # no public twin
    none, *_ = setting([{"name": "noise", "sigma": 0.01}], {"select": "none"}, tmp_path, attacks)
    assert tuned_attacks(none.adversary, none.client.defenses) == set()


def test_a_rehearsal_applies_the_clients_defenses(tmp_path):
    defended = [{"name": "prune", "ratio": 0.9}]
    config, federation, spec = setting(defended, {"select": "all", "problems": 1}, tmp_path, [{"name": "ig"}])
    view = target_view(config, federation)
    (public,) = rehearsal_of(config, spec, federation).task(config.adversary.attacks[0], [view]).problems.views
    changed = [int((view.global_state[n] != public.observed_state[n]).sum()) for n, _ in view.model.named_parameters()]
    total = sum(p.numel() for p in view.model.parameters())
    assert 0 < sum(changed) <= 0.1 * total + len(changed)  # prune 0.9 keeps about a tenth of the entries


def test_tuning_settings_are_checked_by_name():
    with pytest.raises(Exception, match="trials"):
        parse_config({"adversary": {"tuning": {"trials": 0}}})


def test_the_public_problems_do_not_depend_on_the_runs_seed_which_the_cache_key_leaves_out(tmp_path):
    config, federation, spec = setting([{"name": "noise", "sigma": 0.01}], {}, tmp_path, [{"name": "ig-noise"}])
    other = config.model_copy(update={"seed": config.seed + 1})
    view = target_view(config, federation)
    tasks = [
        rehearsal_of(c, s, federation).task(c.adversary.attacks[0], [view])
        for c, s in ((config, spec), (other, replace(spec, seed=other.seed)))
    ]
    assert tasks[0].setting == tasks[1].setting and tasks[0].seed == tasks[1].seed
    for mine, theirs in zip(tasks[0].problems.views, tasks[1].problems.views, strict=True):
        assert all(torch.equal(mine.observed_state[k], theirs.observed_state[k]) for k in mine.observed_state)
