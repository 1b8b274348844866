"""`model: python`: the user's own nn.Module class, named `module:Class`, and the one-line refusals."""

from __future__ import annotations

import pytest
from torch import nn

from fedsim.models import ModelError, build_model
from fedsim.models.architectures.python_class import PythonClassConfig


def build(**fields: object) -> nn.Module:
    return build_model(PythonClassConfig(name="python", **fields), 3, 10, 32, seed=0)


def test_a_class_of_the_users_folder_is_built_with_its_arguments(tmp_path):
    (tmp_path / "usermodels.py").write_text(
        "from torch import nn\nclass Tiny(nn.Module):\n"
        "    def __init__(self, width=2):\n        super().__init__()\n        self.fc = nn.Linear(4, width)\n"
    )
    model = build(target="usermodels:Tiny", path=tmp_path, arguments={"width": 5})
    assert type(model).__name__ == "Tiny" and model.fc.out_features == 5


def test_the_same_seed_builds_the_same_weights():
    first, second = (
        build(target="torch.nn:Linear", arguments={"in_features": 3, "out_features": 2}),
        build(target="torch.nn:Linear", arguments={"in_features": 3, "out_features": 2}),
    )
    assert (first.weight == second.weight).all()


@pytest.mark.parametrize(
    "fields, message",
    [
        (
            {"target": "no_such_module_x:Net"},
            r"^model.target = 'no_such_module_x:Net': cannot import 'no_such_module_x'",
        ),
        (
            {"target": "torch.nn:NoSuchNet"},
            r"^model.target = 'torch.nn:NoSuchNet': module 'torch.nn' has no 'NoSuchNet'",
        ),
        ({"target": "math:pi"}, r"^model.target = 'math:pi': is float .*, not a PyTorch nn.Module class"),
        ({"target": "torch.nn:Linear", "arguments": {"size": 3}}, r"^model.arguments = \{'size': 3\}: torch.nn:Linear"),
    ],
)
def test_what_cannot_be_built_is_one_line_naming_the_field(fields, message):
    with pytest.raises(ModelError, match=message):
        build(**fields)


def test_a_target_without_a_class_is_refused_with_the_config():
    with pytest.raises(ValueError, match=r"'torch.nn' is not `module:Class`"):
        PythonClassConfig(name="python", target="torch.nn")
