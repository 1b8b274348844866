"""The federated models: the attacked networks of the papers, plus any torchvision classifier as `tv:<name>`.

Built-in models register themselves in ``MODELS`` when their module is imported below;
``build_run_model`` builds a run's model from its ``model`` section, with or without its weights (the one
way the server, the clients and the adversary rebuild it); ``build_model`` builds one from a ``model``
section and a data shape.
"""

from fedsim.models import (  # noqa: F401  (they register)
    cnn,
    convnet,
    lenet,
    lenet_fc,
    mlp,
    python_class,
    resnet,
    text,
    torchvision_adapter,
)
from fedsim.models.build import (
    DataShape,
    build_model,
    build_run_model,
    check_model_name,
    count_parameters,
    uniform_init_,
)
from fedsim.models.layers import ACTIVATIONS
from fedsim.models.registry import MODELS, ModelBuilder, ModelConfig, ModelError

__all__ = [
    "ACTIVATIONS",
    "MODELS",
    "DataShape",
    "ModelBuilder",
    "ModelConfig",
    "ModelError",
    "build_model",
    "build_run_model",
    "check_model_name",
    "count_parameters",
    "uniform_init_",
]
