"""Model modifications a malicious server sends instead of the agreed model (``adversary.modification``).

Each module registers one modification and its config model in ``MODIFICATIONS``; a modification turns the
agreed architecture into the module the clients receive in the attacked rounds (architecture and weights
travel in the message).
"""

from adversary.modifications.base import Modification, ModificationConfig
from adversary.modifications.registry import MODIFICATIONS
from fedsim.core.registry import import_submodules

import_submodules(__name__, __path__)

__all__ = ["MODIFICATIONS", "Modification", "ModificationConfig"]
