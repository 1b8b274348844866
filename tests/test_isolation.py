"""The attacker never reaches the ground truth: not by import, not by its inputs, not at run time."""

import ast
import dataclasses
from pathlib import Path

import torch

from adversary.view import AttackerView

ROOT = Path(__file__).resolve().parents[1]
PROJECT_PACKAGES = ("fedsim", "adversary", "strategies", "clients")
# Where the truth lives (who trained on what, the run's records) and the scoring side that reads it.
TRUTH_MODULES = {"fedsim.ground_truth", "fedsim.results", "fedsim.leakage", "fedsim.runner"}
ATTACKER_ROOTS = ["adversary.view", "adversary.threat_models", "adversary.adversary", "adversary.attacks"]


def module_file(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def project_imports(module: str) -> set[str]:
    """Every project module that ``module`` imports, anywhere in its file (lazy imports included)."""
    path = module_file(module)
    if path is None:
        return set()
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {name for name in names if name.split(".")[0] in PROJECT_PACKAGES and module_file(name)}
    if path.name == "__init__.py":  # a package brings its modules along
        found |= {f"{module}.{p.stem}" for p in path.parent.glob("*.py") if p.stem != "__init__"}
        found |= {f"{module}.{p.name}" for p in path.parent.iterdir() if (p / "__init__.py").is_file()}
    return found


def reachable(roots: list[str]) -> dict[str, str]:
    """Project modules reachable from ``roots`` by imports, each with the module that first imported it."""
    seen: dict[str, str] = {root: "(root)" for root in roots}
    frontier = list(roots)
    while frontier:
        current = frontier.pop()
        for imported in project_imports(current):
            if imported not in seen:
                seen[imported] = current
                frontier.append(imported)
    return seen


def test_no_import_path_leads_from_the_attacker_to_the_ground_truth():
    seen = reachable(ATTACKER_ROOTS)
    leaks = {module: via for module, via in seen.items() if module in TRUTH_MODULES}
    assert not leaks, f"attacker code reaches the ground truth: {leaks}"
    assert "adversary.threat_models" in seen  # the scan really walks the attacker's modules


def test_the_scan_would_catch_a_leak():
    seen = reachable(["fedsim.runner"])
    assert "fedsim.ground_truth" in seen or "fedsim.results" in seen


def test_the_attackers_input_holds_only_what_a_threat_model_exposes():
    fields = {field.name for field in dataclasses.fields(AttackerView)}
    assert fields == {
        "round", "tap", "target", "model", "global_state", "observed_state", "input_shape", "num_classes",
        "num_samples", "local_training", "labels", "input_bounds", "bn_statistics",
    }, "a new attacker input must be reviewed against the threat models"
    annotations = " ".join(str(field.type) for field in dataclasses.fields(AttackerView))
    for forbidden in ("GroundTruth", "RunStore", "ImageDataset", "Federation", "Path"):
        assert forbidden not in annotations


def test_an_attack_runs_with_the_ground_truth_and_the_data_locked_away(monkeypatch):
    """Every route to the truth raises while the attack runs; it still reconstructs."""
    from adversary.attacks import run_attack
    from adversary.view import LocalTraining
    from fedsim import data as data_package
    from fedsim.config import AttackOptions
    from fedsim.ground_truth import GroundTruthStore

    def locked(*args, **kwargs):
        raise AssertionError("the attacker touched the ground truth")

    for name in ("__init__", "read", "clients"):
        monkeypatch.setattr(GroundTruthStore, name, locked)
    monkeypatch.setattr(data_package, "load_dataset", locked)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
    global_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    secret = torch.rand(1, 1, 4, 4)  # the victim trains on it; the attacker only sees the update
    loss = torch.nn.functional.cross_entropy(model(secret), torch.tensor([2]))
    grads = torch.autograd.grad(loss, list(model.parameters()))
    observed = {name: global_state[name] - 0.1 * g for (name, _), g in zip(model.named_parameters(), grads)}
    view = AttackerView(
        round=1, tap="mitm", target="client:0", model=model, global_state=global_state, observed_state=observed,
        input_shape=(1, 4, 4), num_classes=3, num_samples=1, local_training=LocalTraining(0.1, 1, 1),
    )
    (reconstruction,) = run_attack(AttackOptions(name="idlg", iterations=50), [view], seed=0, device=torch.device("cpu"))
    assert reconstruction.labels.tolist() == [2]
    assert torch.nn.functional.mse_loss(reconstruction.images, secret) < 1e-3
