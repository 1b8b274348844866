"""Soteria zeroes the columns of the most revealing representation units."""

import pytest
import torch
from defense_updates import apply, context
from torch import nn

from clients.defenses.soteria import unit_scores
from fedsim.models import build_model
from fedsim.models.architectures.lenet_fc import CLASSIFIER_LAYER, REPRESENTATION_LAYER, LeNetFcConfig


def test_soteria_zeroes_the_columns_of_the_most_revealing_representation_units():
    torch.manual_seed(0)
    body = nn.Linear(6, 8, bias=False)  # r = A x: dr_i/dx = A_i, so the scores have a closed form
    model = nn.Sequential(body, nn.Linear(8, 3)).double()
    x = torch.randn(4, 6, dtype=torch.float64)
    r = x @ body.weight.T
    expected_scores = (body.weight.norm(dim=1, keepdim=True).T / r.abs()).sum(0)  # sum_b ||dr_bi/dx_b|| / |r_bi|
    assert torch.allclose(unit_scores(model, model[1], x), expected_scores)

    update = {
        "0.weight": torch.randn(8, 6, dtype=torch.float64),
        "1.weight": torch.randn(3, 8, dtype=torch.float64),
        "1.bias": torch.randn(3, dtype=torch.float64),
    }
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
    with pytest.raises(ValueError, match=r"soteria.layer = '0': not a Linear layer; allowed: 2"):
        apply({"name": "soteria", "ratio": 0.5, "layer": "0"}, update, context(model=model, x=x))


def test_on_a_model_with_a_representation_layer_soteria_defends_it_and_leaves_the_classifier_alone():
    model = build_model(LeNetFcConfig(hidden=16), in_channels=1, num_classes=10, image_size=28, seed=0)
    x = torch.rand(3, 1, 28, 28)
    update = {name: torch.ones_like(p) for name, p in model.named_parameters()}
    outcome = apply({"name": "soteria", "ratio": 0.5}, update, context(model=model, x=x))  # the default layer
    defended = f"{REPRESENTATION_LAYER}.weight"
    assert int((outcome.update[defended] == 0).all(dim=0).sum()) == model.representation.in_features // 2
    assert REPRESENTATION_LAYER != CLASSIFIER_LAYER
    for name, value in update.items():
        if name != defended:
            assert torch.equal(outcome.update[name], value), name  # the classifier's update goes out as it was
