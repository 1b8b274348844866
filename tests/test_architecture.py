"""Imports run one way: no import cycle among the modules of fedsim/, clients/, strategies/ and adversary/.

The graph counts every import statement, at module level and inside functions (a deferred import is still
a dependency), but not the implicit import of parent packages, and not imports under
``if TYPE_CHECKING:`` (they exist only for type checkers) unless asked to (``typing_imports=True``: what a
module names in its types is a dependency of its interface too). A cycle is a strongly connected component
of more than one module.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("fedsim", "clients", "strategies", "adversary")


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the packages (a package is its ``__init__``)."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    return modules


def _typing_only(tree: ast.AST) -> set[int]:
    """Ids of the nodes under ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``)."""
    nodes: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            nodes.update(id(inner) for branch in node.body for inner in ast.walk(branch))
    return nodes


def _imported(module: str, path: Path, node: ast.Import | ast.ImportFrom, modules: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: from the module's package, up level - 1 more
        parts = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        parts = parts[: len(parts) - node.level + 1]
        base = ".".join([*parts, base] if base else parts)
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]


def import_graph(root: Path = ROOT, *, typing_imports: bool = False) -> dict[str, set[str]]:
    """module -> the project modules it imports (with ``typing_imports``, those under ``if TYPE_CHECKING:`` too)."""
    modules = project_modules(root)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        skipped = set() if typing_imports else _typing_only(tree)
        targets = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in skipped:
                for target in _imported(module, path, node, modules):
                    while target and target not in modules:  # `import a.b.c` where only a.b is ours
                        target = target.rpartition(".")[0]
                    if target and target != module:
                        targets.add(target)
        graph[module] = targets
    return graph


def strongly_connected_components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iteratively (the graph is a few hundred modules deep at most)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def describe_cycle(component: list[str], graph: dict[str, set[str]]) -> str:
    """One loop through the component, e.g. ``fedsim.config -> strategies.dp -> fedsim.config``."""
    members = set(component)
    path = [component[0]]
    while True:
        step = sorted(graph[path[-1]] & members)
        nxt = next((m for m in step if m in path), None) or step[0]
        if nxt in path:
            return " -> ".join([*path[path.index(nxt) :], nxt])
        path.append(nxt)


def test_the_graph_sees_imports_inside_functions_and_skips_type_checking_ones(tmp_path):
    package = tmp_path / "fedsim"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from fedsim import b\n")
    (package / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fedsim.a import f\n")
    (package / "c.py").write_text("from . import a\nimport fedsim.b.missing\n")
    graph = import_graph(tmp_path)
    assert graph["fedsim.a"] == {"fedsim.b"} and graph["fedsim.b"] == set()
    assert graph["fedsim.c"] == {"fedsim.a", "fedsim.b"}
    assert import_graph(tmp_path, typing_imports=True)["fedsim.b"] == {"fedsim.a"}
    (package / "b.py").write_text("import fedsim.a\n")
    cycles = [c for c in strongly_connected_components(import_graph(tmp_path)) if len(c) > 1]
    assert cycles == [["fedsim.a", "fedsim.b"]]
    assert describe_cycle(cycles[0], import_graph(tmp_path)) == "fedsim.a -> fedsim.b -> fedsim.a"


def test_no_import_cycle_among_the_packages():
    graph = import_graph()
    assert graph.get("fedsim.config")  # the walk found the project
    cycles = [component for component in strongly_connected_components(graph) if len(component) > 1]
    assert not cycles, "import cycles: " + "; ".join(
        f"{len(component)} modules: {describe_cycle(component, graph)}" for component in cycles
    )


PLUGIN_PACKAGES = ("clients", "strategies", "adversary", "fedsim.data", "fedsim.models")


def in_packages(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == package or module.startswith(package + ".") for package in packages)


def test_plugins_never_import_the_config():
    """Plugins import fedsim.core and take the sections they read (typed with their own models or Protocols);
    fedsim.config imports them and composes them. Imports for type hints only count too."""
    graph = import_graph(typing_imports=True)
    offenders = sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        if in_packages(module, PLUGIN_PACKAGES)
        for target in targets
        if in_packages(target, ("fedsim.config",))
    )
    assert not offenders, "plugins importing the config:\n" + "\n".join(offenders)
    assert graph["fedsim.core"] == set(), "fedsim.core imports nothing of the project"


def test_the_attacker_and_the_clients_never_import_the_judge():
    """What an attack computes cannot depend on the ground truth: adversary/ and clients/ hold no import of
    fedsim.judge, not even one for type hints (breaching's split between attacks/ and analysis/)."""
    graph = import_graph(typing_imports=True)
    offenders = sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        if in_packages(module, ("adversary", "clients", "strategies"))
        for target in targets
        if in_packages(target, ("fedsim.judge",))
    )
    assert not offenders, "the attacker's side importing the judge:\n" + "\n".join(offenders)


# Layers, lowest first. A module belongs to the layer of its longest matching prefix and may import its
# own layer or the layers below it, never one above.
LAYERS: dict[str, tuple[str, ...]] = {
    # what every layer builds on; imports nothing of the project (but Flower's types, in wire/messaging)
    "base": ("fedsim.core",),
    # data sets, models, the run directory's layout and the ground-truth files: the floor the plugins stand on
    "floor": ("fedsim.data", "fedsim.models", "fedsim.rundir.layout", "fedsim.rundir.ground_truth"),
    # defenses and client apps, strategies, taps and attacks: each registers itself and its config model
    "plugins": ("clients", "strategies", "adversary"),
    # the judge: scoring against the ground truth, the floor and the verdict; above every plugin, so that nothing
    # the attacker or a client runs can import it
    "judge": ("fedsim.judge",),
    # the config composed from the plugins' registries, and the run directory that records it
    "config": ("fedsim.config", "fedsim.rundir"),
    # the engine's components: run lifecycle (round driver, protocols, simulation engine, summary), leakage
    # scheduling and scoring, the privacy audit's wiring; each takes the pieces of the config it reads
    "engine": ("fedsim.engine",),
    # the composition roots, where a run's config is taken apart (engine.assembly) and its pieces put together:
    # ``fedsim run`` (engine.run), ``fedsim audit`` (engine.app_audit), a deployed ServerApp (engine.deployment),
    # on the one run skeleton they share (engine.session); no engine component imports them
    "composition": (
        "fedsim.engine.run",
        "fedsim.engine.session",
        "fedsim.engine.assembly",
        "fedsim.engine.app_audit",
        "fedsim.engine.deployment",
    ),
    # what users call: command line, sweeps, reports, the notebook API
    "interface": (
        "fedsim.cli",
        "fedsim.sweep",
        "fedsim.reporting",
        "fedsim.rundir.reader",
        "fedsim.rundir.sweep_reader",
        "fedsim",
    ),
}


def layer_of(module: str) -> int:
    """Index of ``module``'s layer in LAYERS (longest prefix wins; ``fedsim`` alone is the package)."""
    best, best_length = None, -1
    for index, prefixes in enumerate(LAYERS.values()):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_length:
                best, best_length = index, len(prefix)
    assert best is not None, f"{module} belongs to no layer; add it to LAYERS"
    return best


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    names = list(LAYERS)
    return sorted(
        f"{module} ({names[layer_of(module)]}) imports {target} ({names[layer_of(target)]})"
        for module, targets in graph.items()
        for target in targets
        if layer_of(target) > layer_of(module)
    )


def test_a_lower_layer_importing_a_higher_one_is_caught(tmp_path):
    package = tmp_path / "fedsim"
    (package / "engine").mkdir(parents=True)
    for name in ("__init__.py", "core.py", "engine/__init__.py", "engine/runner.py"):
        (package / name).write_text("")
    assert upward_imports(import_graph(tmp_path)) == []
    (package / "core.py").write_text("def later():\n    from fedsim.engine import runner\n")
    assert upward_imports(import_graph(tmp_path)) == ["fedsim.core (base) imports fedsim.engine.runner (engine)"]


def test_imports_run_one_way_down_the_layers():
    graph = import_graph()
    assert {layer_of(module) for module in graph} == set(range(len(LAYERS))), "every layer holds modules"
    offenders = upward_imports(graph)
    assert not offenders, "imports against the layers:\n" + "\n".join(offenders)


# Where a whole ExperimentConfig may be handed in (a parameter, or a field of a class): the modules that load a
# config, build one, or take one apart. Every other component receives the sections and values it reads (as the
# RunStore, which takes the config only to record it, and the plugins, which never see it).
WHOLE_CONFIG_ALLOWED = {
    "fedsim.config": "the config package itself: it validates, migrates, composes and writes whole configs",
    "fedsim.engine.run": "the composition root of `fedsim run`: it takes the config apart",
    "fedsim.engine.assembly": "the taking apart itself: the pieces each plugin and component reads",
    "fedsim.engine.app_audit.config": "the app audit's config, built from the audit file and the app",
    "fedsim.engine.app_audit.runner": "the composition root of `fedsim audit`",
    "fedsim.engine.app_audit.dp_watch": "adds the DP mods found in the app to the config the run records",
    "fedsim.engine.app_audit.workdir": "resolves the config's paths before the app changes directory",
    "fedsim.engine.deployment": "a deployed run's composition root: it reads the config out of Flower's run config",
    "fedsim.rundir": "the run store records the config (writer) and reads it back (reader)",
    "fedsim.cli": "interface: loads the config a command names",
    "fedsim.sweep": "interface: a sweep's grid of configs",
    "fedsim.reporting": "interface: reports read each run's recorded config",
    "fedsim": "interface: the package's notebook API (fedsim.run) takes a config",
}


def whole_config_parameters(root: Path = ROOT) -> list[str]:
    """``module:line name`` of every function parameter (or class field) annotated with ``ExperimentConfig``
    outside WHOLE_CONFIG_ALLOWED (a module is allowed by its own name or a package above it; ``fedsim`` alone
    is the package's ``__init__``)."""
    found = []
    for module, path in project_modules(root).items():
        allowed = any(
            module == name or (name != "fedsim" and module.startswith(name + ".")) for name in WHOLE_CONFIG_ALLOWED
        )
        if allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            annotated: list[tuple[str, ast.expr | None]] = []
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                arguments = node.args
                every = [
                    *arguments.posonlyargs,
                    *arguments.args,
                    *arguments.kwonlyargs,
                    arguments.vararg,
                    arguments.kwarg,
                ]
                annotated = [(f"{node.name}({arg.arg})", arg.annotation) for arg in every if arg is not None]
            elif isinstance(node, ast.ClassDef):
                annotated = [
                    (f"{node.name}.{ast.unparse(field.target)}", field.annotation)
                    for field in node.body
                    if isinstance(field, ast.AnnAssign)
                ]
            for name, annotation in annotated:
                if annotation is not None and "ExperimentConfig" in ast.unparse(annotation):
                    found.append(f"{module}:{annotation.lineno} {name}")
    return found


def test_a_whole_config_parameter_below_the_composition_roots_is_caught(tmp_path):
    package = tmp_path / "fedsim"
    (package / "engine").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "engine" / "__init__.py").write_text("")
    (package / "engine" / "part.py").write_text(
        "def ok(federation: FederationConfig) -> None: ...\n"
        "def wide(config: ExperimentConfig | None, *, seed: int) -> None: ...\n"
        "class Spec:\n    config: 'ExperimentConfig'\n"
    )
    assert whole_config_parameters(tmp_path) == [
        "fedsim.engine.part:2 wide(config)",
        "fedsim.engine.part:4 Spec.config",
    ]


def test_no_component_below_the_composition_roots_takes_the_whole_config():
    offenders = whole_config_parameters()
    assert not offenders, "take the sections read, not the whole ExperimentConfig:\n" + "\n".join(offenders)
