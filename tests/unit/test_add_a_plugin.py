"""Every worked example of docs/how-to/add-a-plugin.md is a file that works: dropped into its package, it registers."""

import importlib
import re
from pathlib import Path

import pytest

from tests.helpers.discovery import package_with_new_module

PAGE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "add-a-plugin.md"
# a paragraph opening with the example's path, then its Python block
EXAMPLE = re.compile(r"^`([\w/]+)/(\w+)\.py`:.*?```python\n(.*?)```", re.MULTILINE | re.DOTALL)
REGISTERED = re.compile(r"""\b([A-Z_]+)\.register\(\s*"([\w+-]+)"|\b(TAPS)\.register\(POSITION\.name""")
REGISTRIES = {
    "DEFENSES": "clients.defenses.registry",
    "ATTACKS": "adversary.registry",
    "REGULARIZERS": "adversary.inversion.regularizers.registry",
    "MODIFICATIONS": "adversary.modifications.registry",
    "PRIORS": "adversary.priors.registry",
    "DATASETS": "fedsim.data.registry",
    "PARTITIONS": "fedsim.data.registry",
    "MODELS": "fedsim.models.registry",
    "STRATEGIES": "strategies.registry",
    "TAPS": "adversary.tap_positions.registry",
}


def examples() -> list[tuple[str, str, str]]:
    return [(folder.replace("/", "."), module, source) for folder, module, source in EXAMPLE.findall(PAGE.read_text())]


def registered(source: str) -> tuple[str, str]:
    """The registry an example registers in, and the name it registers."""
    found = REGISTERED.search(source)
    name = found.group(2) or re.search(r'name="([\w-]+)"', source).group(1)
    return found.group(1) or found.group(3), name


def test_the_page_has_an_example_for_every_extension_point():
    assert sorted(registered(source)[0] for _, _, source in examples()) == sorted(REGISTRIES)


@pytest.mark.parametrize(("package", "module", "source"), examples(), ids=[module for _, module, _ in examples()])
def test_the_example_registers_when_its_file_is_added(tmp_path, package, module, source):
    registry_name, name = registered(source)
    registry = getattr(importlib.import_module(REGISTRIES[registry_name]), registry_name)
    assert name not in registry
    with package_with_new_module(package, module, source, tmp_path / module, registry, name):
        assert name in registry and registry.describe()[name]
    assert name not in registry
