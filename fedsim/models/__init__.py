"""The federated models: the attacked networks of the papers, plus any torchvision classifier as `tv:<name>`.

Built-in models register themselves in ``MODELS`` when their module is imported below;
``build_model`` is the one entry point the rest of fedsim uses.
"""

from fedsim.models import cnn, convnet, lenet, mlp, resnet  # noqa: F401  (imported to register the models)
from fedsim.models.build import build_model, check_model_name, count_parameters, uniform_init_
from fedsim.models.layers import ACTIVATIONS
from fedsim.models.registry import MODELS, ModelBuilder, ModelError

__all__ = [
    "ACTIVATIONS",
    "MODELS",
    "ModelBuilder",
    "ModelError",
    "build_model",
    "check_model_name",
    "count_parameters",
    "uniform_init_",
]
