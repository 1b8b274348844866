"""Flower's and Ray's private names are used in one module only, ``fedsim.core.flower_private``, whose contract test
checks them against the installed versions; everywhere else speaks to Flower and Ray through their public APIs."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("fedsim", "clients", "strategies", "adversary", "bench", "tests", "configs")
ADAPTER = ROOT / "fedsim" / "core" / "flower_private.py"
CONTRACT = ROOT / "tests" / "contract" / "test_flower_private.py"
#: Flower's modules that are not its public API (the rest of a private name is a leading underscore)
PRIVATE_MODULES = (
    "flwr.server.superlink",
    "flwr.simulation.run_simulation",
    "flwr.simulation.ray_transport",
    "flwr.server.compat",
    "flwr.compat",
    "flwr.server.workflow.secure_aggregation",
    "flwr.supercore",
    "flwr.common.serde",
    "flwr.common.constant",
    "flwr.proto",
)


def _in_private_module(module: str) -> bool:
    return any(module == private or module.startswith(private + ".") for private in PRIVATE_MODULES)


def private_imports(tree: ast.AST) -> list[str]:
    """The private Flower or Ray names a module imports (``from x import y`` read as ``x.y``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported = [(alias.name, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            imported = [(node.module, f"{node.module}.{alias.name}") for alias in node.names]
        else:
            continue
        for module, name in imported:
            if name.split(".")[0] not in ("flwr", "ray"):
                continue
            if any(part.startswith("_") for part in name.split(".")) or _in_private_module(module):
                found.append(name)
    return found


def test_a_private_flower_or_ray_name_is_recognised_as_one():
    source = "from ray._private import utils\nfrom flwr.simulation.run_simulation import _run_simulation\n"
    source += "import flwr.compat.common\nfrom flwr.serverapp import Grid\nfrom flwr.simulation import run_simulation\n"
    assert private_imports(ast.parse(source)) == [
        "ray._private.utils",
        "flwr.simulation.run_simulation._run_simulation",
        "flwr.compat.common",
    ]


def test_no_module_but_the_adapter_imports_a_private_flower_or_ray_name():
    offenders = {}
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path in (ADAPTER, CONTRACT):
                continue
            names = private_imports(ast.parse(path.read_text(), filename=str(path)))
            if names:
                offenders[str(path.relative_to(ROOT))] = names
    assert offenders == {}
