"""The model architectures, one module each (or one family: ``tv:<name>``, any torchvision classifier), each
registering its builder and its config model in ``MODELS`` (``fedsim.models.registry``): every module here is
imported, so a new model is one new file. Layers they share are in ``fedsim.models.layers``."""

from fedsim.core.registry import import_submodules

import_submodules(__name__, __path__)
