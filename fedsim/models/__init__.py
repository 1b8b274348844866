"""The federated models: the attacked networks of the papers, plus any torchvision classifier as `tv:<name>`.

Each architecture is one module of ``fedsim.models.architectures``, registering itself in ``MODELS`` when that
package imports it (a new model is one new file);
``build_run_model`` builds a run's model from its ``model`` section, with or without its weights (the one
way the server, the clients and the adversary rebuild it); ``build_model`` builds one from a ``model``
section and a data shape.
"""

from fedsim.models import architectures  # noqa: F401  (imports every architecture: each registers its model)
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
