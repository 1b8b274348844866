"""The Python API reference shows a parameter table for every parameter of what it renders.

docs/reference/api.md renders objects with mkdocstrings (``::: dotted.path``, optionally ``members: [...]``), whose
numpydoc ``Parameters`` section becomes the table. This reads the page's entries and the docstrings the way
mkdocstrings does (griffe, numpy style, from the source), and fails for any rendered function or method whose
docstring leaves out one of its parameters, or any rendered class whose docstring leaves out one of its
constructor's (in ``Parameters`` or, for a dataclass's fields, ``Attributes``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

griffe = pytest.importorskip("griffe", reason="griffe comes with the docs extra (mkdocstrings-python)")

ROOT = Path(__file__).resolve().parents[2]
API_PAGE = ROOT / "docs" / "reference" / "api.md"


def rendered_entries(page: str) -> list[tuple[str, list[str] | None]]:
    """Each ``::: path`` of the page with its ``members`` option (None: every public member; []: none)."""
    entries = []
    for block in re.split(r"(?m)^::: ", page)[1:]:
        lines = block.splitlines()
        members: list[str] | None = None
        for line in lines[1:]:
            if line and not line.startswith(" "):
                break
            option = re.match(r"\s+members:\s*(.+)", line)
            if option:
                value = option.group(1).strip()
                members = [] if value == "false" else [name.strip() for name in value.strip("[]").split(",")]
        entries.append((lines[0].strip(), members))
    return entries


def load(path: str, loader: griffe.GriffeLoader) -> griffe.Object:
    package, *parts = path.split(".")
    found = loader.load(package)
    for part in parts:
        found = found.members[part]
    return found.final_target if found.is_alias else found


def rendered_callables(entries: list[tuple[str, list[str] | None]]) -> list[griffe.Object]:
    """The functions and methods the page renders, and its classes (whose docstrings document construction)."""
    loader = griffe.GriffeLoader(search_paths=[str(ROOT)], docstring_parser=griffe.Parser.numpy, allow_inspection=False)
    found: list[griffe.Object] = []

    def visit(item: griffe.Object, members: list[str] | None) -> None:
        if item.is_function:
            found.append(item)
            return
        if item.is_class:
            found.append(item)
        names = members if members is not None else [name for name in item.members if not name.startswith("_")]
        for name in names:
            member = item.members[name]
            if member.is_alias and members is None:
                continue  # a module's re-export renders only when listed by name
            member = member.final_target if member.is_alias else member
            if member.is_function or member.is_class:
                visit(member, None)

    for path, members in entries:
        visit(load(path, loader), members)
    return found


def documented(docstring: griffe.Docstring | None, kinds: tuple[str, ...]) -> set[str]:
    names: set[str] = set()
    for section in docstring.parse(griffe.Parser.numpy) if docstring is not None else ():
        if section.kind.value in kinds:
            for item in section.value:  # "*args, **kwargs" may stand on one line
                names.update(name.strip().lstrip("*") for name in item.name.split(","))
    return names


def undocumented_parameters(item: griffe.Object) -> list[str]:
    if item.is_class:
        init = item.all_members.get("__init__")
        if init is None or not init.is_function:
            return []
        parameters, allowed = init.parameters, documented(item.docstring, ("parameters", "attributes"))
    else:
        parameters, allowed = item.parameters, documented(item.docstring, ("parameters",))
    return [p.name for p in parameters if p.name not in ("self", "cls") and p.name not in allowed]


def test_every_parameter_the_api_reference_renders_has_its_table_row() -> None:
    rendered = rendered_callables(rendered_entries(API_PAGE.read_text()))
    paths = {item.path for item in rendered}
    # the page's entry points are among what was read (a parser that read nothing would pass)
    assert {"fedsim.run", "fedsim.audit", "fedsim.core.registry.Registry.register"} <= paths
    assert "fedsim.rundir.reader.Run.strongest" in paths
    missing = {item.path: names for item in rendered if (names := undocumented_parameters(item))}
    assert not missing, f"add these to the docstrings' numpydoc Parameters sections: {missing}"


def test_a_parameter_left_out_of_the_docstring_is_found(tmp_path: Path) -> None:
    module = tmp_path / "probe.py"
    module.write_text(
        'def f(a: int, b: int) -> int:\n    """Add.\n\n    Parameters\n    ----------\n    a\n        One.\n    """\n'
    )
    loader = griffe.GriffeLoader(search_paths=[str(tmp_path)], docstring_parser=griffe.Parser.numpy)
    assert undocumented_parameters(loader.load("probe").members["f"]) == ["b"]
