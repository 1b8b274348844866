"""Update-level defenses: each mechanism checked on small tensors, then their composition in order."""

import math

import pytest
import torch
from torch import nn

from clients.defenses import DEFENSES, DefenseContext
from clients.defenses.base import flatten, global_norm
from clients.defenses.pipeline import apply_update_defenses, pseudo_gradient, record_keys, weights_to_send
from clients.defenses.soteria import unit_scores
from fedsim.config import ConfigError, parse_config


def defenses(*entries):
    return parse_config({"client": {"defenses": list(entries)}}).client.defenses


def context(seed=0, model=None, x=None):
    model = model if model is not None else nn.Linear(2, 2)
    x = x if x is not None else torch.zeros(1, 2)
    return DefenseContext(model=model, x=x, y=torch.zeros(len(x), dtype=torch.long), lr=0.1,
                          generator=torch.Generator().manual_seed(seed))  # fmt: skip


def apply(entry, update, ctx=None):
    (config,) = defenses(entry)
    return DEFENSES.get(config.name).apply(update, config, ctx or context())


def random_update(seed=0, shapes=((40, 50), (50,), (10, 40))):
    generator = torch.Generator().manual_seed(seed)
    return {f"layer{i}": torch.randn(shape, generator=generator, dtype=torch.float64) for i, shape in enumerate(shapes)}


# ------------------------------------------------------------------------------------ gradient dropout


def test_gradient_dropout_keeps_about_p_of_the_entries_scaled_by_one_over_p():
    update = {"w": torch.linspace(1, 2, 20_000, dtype=torch.float64)}  # no entry is near a noise value
    outcome = apply({"name": "gradient_dropout", "p": 0.6, "sigma": 5e-3}, update)
    kept = torch.isclose(outcome.update["w"], update["w"] / 0.6)
    n = update["w"].numel()
    assert abs(kept.float().mean().item() - 0.6) < 4 * math.sqrt(0.6 * 0.4 / n)
    assert outcome.record["fraction_kept"] == pytest.approx(kept.float().mean().item())
    replaced = outcome.update["w"][~kept]
    assert replaced.std().item() == pytest.approx(5e-3, rel=0.05)  # N(0, sigma^2) in place of the rest
    assert abs(replaced.mean().item()) < 4 * 5e-3 / math.sqrt(len(replaced))


def test_gradient_dropout_is_unbiased_in_expectation():
    update = random_update(shapes=((30,),))
    draws = torch.stack(
        [apply({"name": "gradient_dropout", "p": 0.3, "sigma": 0.1}, update, context(seed)).update["layer0"]
         for seed in range(4000)]
    )  # fmt: skip
    # E[out] = p * g / p + (1 - p) * 0 = g; the per-entry standard error of a 4000-draw mean is < 0.05 here
    assert torch.allclose(draws.mean(0), update["layer0"], atol=0.1)
    assert not torch.allclose(draws[0], draws[1])  # a fresh mask every draw (every round, every client)


def test_gradient_dropout_with_p_one_sends_the_gradient_unchanged():
    update = random_update()
    outcome = apply({"name": "gradient_dropout", "p": 1.0, "sigma": 1.0}, update)
    assert all(torch.equal(outcome.update[k], update[k]) for k in update)
    assert outcome.record["fraction_changed"] == 0.0


# ---------------------------------------------------------------------------------------------- prune


@pytest.mark.parametrize("ratio", [0.1, 0.5, 0.9])
def test_prune_zeroes_exactly_the_requested_fraction_of_smallest_entries(ratio):
    update = random_update()
    outcome = apply({"name": "prune", "ratio": ratio}, update)
    before, after = flatten(update), flatten(outcome.update)
    n = before.numel()
    assert int((after == 0).sum()) == round(ratio * n)
    zeroed = after == 0
    assert before[zeroed].abs().max() <= before[~zeroed].abs().min()  # the smallest magnitudes, globally
    assert torch.equal(after[~zeroed], before[~zeroed])
    assert outcome.record["fraction_zero"] == pytest.approx(round(ratio * n) / n)


def test_prune_per_tensor_counts_each_tensor_and_breaks_ties_exactly():
    update = {"a": torch.zeros(10), "b": torch.tensor([1.0, 1.0, 1.0, 1.0, 2.0, 3.0, 4.0, 5.0])}
    outcome = apply({"name": "prune", "ratio": 0.25, "scope": "per-tensor"}, update)
    assert int((outcome.update["b"] == 0).sum()) == 2  # two of the four tied ones, not all four
    assert torch.equal(outcome.update["b"][4:], update["b"][4:])
    assert int((outcome.update["a"] == 0).sum()) == 10


# ----------------------------------------------------------------------------------------------- clip


def test_clip_bounds_the_global_norm_and_keeps_the_direction():
    update = random_update()
    outcome = apply({"name": "clip", "max_norm": 1.0}, update)
    assert global_norm(outcome.update) == pytest.approx(1.0)
    cosine = torch.nn.functional.cosine_similarity(flatten(update), flatten(outcome.update), dim=0)
    assert cosine.item() == pytest.approx(1.0)
    assert outcome.record["norm_before"] == pytest.approx(global_norm(update))


def test_clip_leaves_a_small_update_alone_and_clips_per_tensor():
    update = {"small": torch.tensor([0.3, 0.4]), "large": torch.tensor([3.0, 4.0])}
    outcome = apply({"name": "clip", "max_norm": 1.0, "scope": "per-tensor"}, update)
    assert torch.equal(outcome.update["small"], update["small"])
    assert outcome.update["large"].norm().item() == pytest.approx(1.0)
    assert outcome.record["tensors_clipped"] == 1.0


# ---------------------------------------------------------------------------------------------- noise


@pytest.mark.parametrize(("distribution", "spread"), [("gaussian", lambda d: d.std()), ("laplace", lambda d: d.abs().mean())])
def test_noise_has_the_configured_scale_and_is_seeded(distribution, spread):
    update = {"w": torch.zeros(50_000, dtype=torch.float64)}
    entry = {"name": "noise", "sigma": 0.01, "distribution": distribution}
    noisy = apply(entry, update).update["w"]
    assert spread(noisy).item() == pytest.approx(0.01, rel=0.03)  # std for gaussian, mean |x| = b for laplace
    assert torch.equal(noisy, apply(entry, update).update["w"])  # same generator seed, same noise
    assert not torch.equal(noisy, apply(entry, update, context(seed=1)).update["w"])


# -------------------------------------------------------------------------------------------- soteria


def test_soteria_zeroes_the_columns_of_the_most_revealing_representation_units():
    torch.manual_seed(0)
    body = nn.Linear(6, 8, bias=False)  # r = A x: dr_i/dx = A_i, so the scores have a closed form
    model = nn.Sequential(body, nn.Linear(8, 3)).double()
    x = torch.randn(4, 6, dtype=torch.float64)
    r = x @ body.weight.T
    expected_scores = (body.weight.norm(dim=1, keepdim=True).T / r.abs()).sum(0)  # sum_b ||dr_bi/dx_b|| / |r_bi|
    assert torch.allclose(unit_scores(model, model[1], x), expected_scores)

    update = {"0.weight": torch.randn(8, 6, dtype=torch.float64), "1.weight": torch.randn(3, 8, dtype=torch.float64),
              "1.bias": torch.randn(3, dtype=torch.float64)}  # fmt: skip
    outcome = apply({"name": "soteria", "ratio": 0.25, "layer": "1"}, update, context(model=model, x=x))
    pruned = set(torch.argsort(expected_scores)[:2].tolist())  # 25 % of 8 units, the smallest scores
    zero_columns = {i for i in range(8) if torch.all(outcome.update["1.weight"][:, i] == 0)}
    assert zero_columns == pruned
    kept = [i for i in range(8) if i not in pruned]
    assert torch.equal(outcome.update["1.weight"][:, kept], update["1.weight"][:, kept])
    assert torch.equal(outcome.update["0.weight"], update["0.weight"])
    assert torch.equal(outcome.update["1.bias"], update["1.bias"])
    assert model.training  # the client's reference model is left as it was


def test_soteria_defaults_to_the_first_linear_and_rejects_other_layers():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(8, 3))
    x = torch.randn(2, 1, 4, 4)
    update = {name: torch.ones_like(p) for name, p in model.named_parameters()}
    outcome = apply({"name": "soteria", "ratio": 0.5}, update, context(model=model, x=x))
    assert int((outcome.update["2.weight"] == 0).all(dim=0).sum()) == 4
    with pytest.raises(ValueError, match="soteria.layer = '0': not a Linear layer; allowed: 2"):
        apply({"name": "soteria", "ratio": 0.5, "layer": "0"}, update, context(model=model, x=x))


# ------------------------------------------------------------------------------------------ pipeline


def test_defenses_compose_in_the_order_given():
    update = random_update()
    chain = defenses({"name": "clip", "max_norm": 1.0}, {"name": "prune", "ratio": 0.5})

    def context_for(position):
        return context(seed=position)

    defended, records = apply_update_defenses(chain, update, context_for)
    assert global_norm(defended) <= 1.0 + 1e-9
    assert records["defense.clip.norm_after"] == pytest.approx(1.0)
    assert records["defense.prune.norm_before"] == pytest.approx(1.0)  # prune saw the clipped update
    assert records["defense.prune.fraction_zero"] == pytest.approx(0.5, abs=1e-3)


def test_repeated_defenses_get_numbered_record_keys():
    chain = defenses({"name": "noise", "sigma": 0.1}, {"name": "clip", "max_norm": 1}, {"name": "noise", "sigma": 0.2})
    assert record_keys(chain) == ["defense.noise#1", "defense.clip", "defense.noise#2"]


def test_the_sent_weights_are_global_minus_lr_times_the_defended_pseudo_gradient():
    global_params = {"w": torch.tensor([1.0, 2.0])}
    local = {"w": torch.tensor([0.9, 2.2])}
    gradient = pseudo_gradient(global_params, local, lr=0.1)
    assert torch.allclose(gradient["w"], torch.tensor([1.0, -2.0]))  # one SGD step: exactly the gradient
    assert torch.allclose(weights_to_send(global_params, gradient, lr=0.1)["w"], local["w"])


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"name": "gradient_dropout", "p": 1.5, "sigma": 0.1}, "client.defenses[0].p = 1.5"),
        ({"name": "gradient_dropout", "p": 0.0, "sigma": 0.1}, "client.defenses[0].p = 0.0"),
        ({"name": "prune", "ratio": 1.0}, "client.defenses[0].ratio = 1.0"),
        ({"name": "noise", "sigma": -1}, "client.defenses[0].sigma = -1"),
        ({"name": "clip", "max_norm": 0}, "client.defenses[0].max_norm = 0"),
        ({"name": "soteria", "ratio": 0}, "client.defenses[0].ratio = 0"),
        ({"name": "noise", "sigma": 0.1, "distribution": "cauchy"}, "client.defenses[0].distribution = 'cauchy'"),
        ({"name": "gradient_dropot"}, "unknown defense 'gradient_dropot' (did you mean 'gradient_dropout'?); allowed: clip, dpsgd"),
    ],
)
def test_bad_defense_parameters_are_one_line_errors_naming_the_field(entry, field):
    with pytest.raises(ConfigError) as caught:
        defenses(entry)
    message = str(caught.value)
    assert field in message and "\n" not in message
