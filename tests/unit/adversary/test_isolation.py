"""The attacker never reaches the ground truth: not by import, not by its inputs, not at run time."""

import ast
import dataclasses
from pathlib import Path

import torch
from repository import REPO_ROOT

from adversary.view import AttackerView

PROJECT_PACKAGES = ("fedsim", "adversary", "strategies", "clients")
# Where the truth lives (who trained on what, the run's records) and the scoring side that reads it.
TRUTH_MODULES = {
    "fedsim.rundir.ground_truth",
    "fedsim.rundir.writer",
    "fedsim.engine.leakage.scoring",
    "fedsim.engine.leakage.wiring",
    "fedsim.engine.run",
    "fedsim.engine.session",
}
ATTACKER_ROOTS = ["adversary.view", "adversary.threat_models", "adversary.adversary", "adversary.attacks"]


def module_file(module: str) -> Path | None:
    base = REPO_ROOT.joinpath(*module.split("."))
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
    seen: dict[str, str] = dict.fromkeys(roots, "(root)")
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
    seen = reachable(["fedsim.engine.run"])
    assert "fedsim.rundir.ground_truth" in seen or "fedsim.rundir.writer" in seen


def test_the_attackers_input_holds_only_what_a_threat_model_exposes():
    fields = {field.name for field in dataclasses.fields(AttackerView)}
    assert fields == {
        "round",
        "tap",
        "target",
        "model",
        "global_state",
        "observed_state",
        "input_shape",
        "num_classes",
        "num_samples",
        "local_training",
        "labels",
        "input_bounds",
        "bn_statistics",
        # reviewed: who is in an aggregate and the counts they reported travel in clear beside the updates
        "contributors",
        "groups",
        # reviewed: the noise SecAgg+'s quantisation leaves in an aggregate, from the protocol's public parameters
        # and those counts (the server's own view of the sum it unmasks; never a client's data)
        "update_noise",
    }, "a new attacker input must be reviewed against the threat models"
    annotations = " ".join(str(field.type) for field in dataclasses.fields(AttackerView))
    for forbidden in ("GroundTruth", "RunStore", "ImageDataset", "Federation", "Path"):
        assert forbidden not in annotations


def test_an_attack_runs_with_the_ground_truth_and_the_data_locked_away(monkeypatch):
    """Every route to the truth raises while the attack runs; it still reconstructs."""
    from adversary.inversion import run_attack
    from adversary.view import LocalTraining
    from fedsim import data as data_package
    from fedsim.config import AttackOptions
    from fedsim.rundir.ground_truth import GroundTruthStore

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
        round=1,
        tap="mitm",
        target="client:0",
        model=model,
        global_state=global_state,
        observed_state=observed,
        input_shape=(1, 4, 4),
        num_classes=3,
        num_samples=1,
        local_training=LocalTraining(0.1, 1, 1),
    )
    (reconstruction,) = run_attack(
        AttackOptions(name="idlg", iterations=50), [view], seed=0, device=torch.device("cpu")
    )
    assert reconstruction.labels.tolist() == [2]
    assert torch.nn.functional.mse_loss(reconstruction.images, secret) < 1e-3


def test_inside_an_attack_worker_nothing_leads_to_the_ground_truth(tmp_path, monkeypatch):
    """A real adversary attacks a round in its worker process; then, in that same process, nothing reachable
    (the job it was given, its working directory, environment, command line, imported modules and their
    caches, every object in its heap) leads to the run directory or the training images. The server holds
    all of it, and scores the reconstructions. This stops attack code from using the truth by accident; it
    is not a sandbox against hostile code, which could still open any file the user can read.
    """
    import hashlib
    import multiprocessing.process
    import sys

    import isolation_probe

    from adversary.taps import TappedUpdate
    from adversary.workers import ProcessAttackWorkers
    from fedsim.config import parse_config
    from fedsim.core.seeding import derive_seed
    from fedsim.engine.assembly import adversary_of as attach_adversary
    from fedsim.engine.assembly import federation_of
    from fedsim.engine.lifecycle.federation import partition_record
    from fedsim.rundir.ground_truth import GroundTruthStore
    from fedsim.rundir.layout import PARTITIONS_FILE
    from fedsim.rundir.writer import RunStore

    run_dir = tmp_path / "run-isolation"
    config = parse_config(
        {
            "seed": 3,
            "device": "cpu",
            "data": {"dataset": "digits", "max_train_samples": 20, "max_test_samples": 20, "normalize": "none"},
            "model": {"name": "lenet", "init": "uniform"},
            "federation": {"num_clients": 2, "rounds": 1},
            "client": {"lr": 0.1, "batch_size": 1, "local_steps": 1},
            "adversary": {
                "targets": "both",
                "workers": 1,
                "save_images": False,
                "attacks": [{"name": "idlg", "iterations": 5}],
            },
        }
    )
    federation = federation_of(config)  # the server's data cache now holds the training set
    store = RunStore.create(config, "cpu", run_dir)
    store.write_json(PARTITIONS_FILE, partition_record(federation))
    # The server as a user may start it: from inside the run directory, naming it on the command line.
    monkeypatch.chdir(run_dir)
    monkeypatch.setenv("PWD", str(run_dir))
    monkeypatch.setattr(sys, "argv", ["fedsim", "run", "--resume", str(run_dir)])
    monkeypatch.setattr(multiprocessing.process, "ORIGINAL_DIR", str(run_dir))

    sent = []
    real_submit = ProcessAttackWorkers.submit

    def recording_submit(self, job):
        future = real_submit(self, job)
        sent.append((job.to_bytes(), future))
        return future

    monkeypatch.setattr(ProcessAttackWorkers, "submit", recording_submit)
    adversary = attach_adversary(config, federation, store, derive_seed(config.seed, "model")).adversary
    model, x_train = adversary.architecture.model, federation.dataset.x_train
    start = {key: value.detach().clone() for key, value in model.state_dict().items()}
    for client in range(2):
        sample = int(federation.partitions[client][0])
        GroundTruthStore(run_dir).write(1, client, [[sample]], [[int(federation.dataset.y_train[sample])]])
        image = federation.client_stats[client].normalize(torch.from_numpy(x_train[sample : sample + 1]))
        loss = torch.nn.functional.cross_entropy(model(image), torch.from_numpy(federation.dataset.y_train[[sample]]))
        grads = torch.autograd.grad(loss, list(model.parameters()))
        sent_state = {**start, **{name: start[name] - 0.1 * g for (name, _), g in zip(model.named_parameters(), grads)}}
        adversary.observe(TappedUpdate(1, "mitm", f"client:{client}", start, sent_state, 1, 1, (client,)))
    assert adversary.round_finished(1) == 2  # the clients as one batched job, the aggregate as another
    try:
        for _, future in sent:
            future.result(timeout=300)
        digest = hashlib.sha256(x_train.tobytes()).hexdigest()
        payloads = [payload for payload, _ in sent]
        probe = adversary.workers.call(isolation_probe.find_the_truth, payloads, str(run_dir), x_train.nbytes, digest)
        assert probe.result(timeout=300) == []
    finally:
        adversary.finish()
    rows = [row for row in store.rows() if row["event"] == "attack"]
    assert sorted((row["target"], row["status"]) for row in rows) == [
        ("aggregate", "ok"),
        ("client:0", "ok"),
        ("client:1", "ok"),
    ]
    # The same search in the server process finds the truth, so an empty list from the worker means something.
    leaks = isolation_probe.find_the_truth(payloads, str(run_dir), x_train.nbytes, digest)
    assert any("working directory" in leak for leak in leaks) and any("_CACHE" in leak for leak in leaks)
    assert any("training images" in leak for leak in leaks) and any("GroundTruthStore" in leak for leak in leaks)
