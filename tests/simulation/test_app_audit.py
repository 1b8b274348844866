"""``fedsim audit`` on the example Flower app, unedited: every client's update attacked and scored against its own
training images, and the app's final global model the same with and without the audit."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from flower_apps import QUICKSTART_APP, QUICKSTART_AUDIT, write_image_parquet

import fedsim
from fedsim.engine.app_audit.app import load_components, read_app
from fedsim.engine.app_audit.config import audit_config
from fedsim.engine.app_audit.runner import audit_app, final_state, run_app
from fedsim.rundir.writer import RunStore

pytestmark = pytest.mark.simulation

# two nodes of 5 images each: the app keeps 4 for training (80%), one batch of 4, one SGD step per round
TINY = "num-server-rounds=1 fraction-train=1.0 fraction-evaluate=1.0 batch-size=4 seed=3"
AUDIT_SETTINGS = [
    "app.num_supernodes=2",
    "adversary.portfolio=listed",
    "adversary.attacks=[{name: dlg, iterations: 10}]",
    "adversary.save_images=false",
]


def test_an_unedited_app_is_attacked_per_client_and_trains_as_without_the_audit(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = write_image_parquet(tmp_path / "images.parquet", 10)
    settings = [*AUDIT_SETTINGS, f"output.dir={tmp_path / 'runs'}"]
    audited_model, plain_model = tmp_path / "audited.pt", tmp_path / "plain.pt"

    run_config = f'{TINY} data-files="{data}" final-model="{audited_model}"'
    run = fedsim.load_run(audit_app(QUICKSTART_APP, QUICKSTART_AUDIT, settings, run_config))

    attacks = run.events("attack").sort_values("target")
    assert attacks["target"].tolist() == ["client:0", "client:1"]
    assert attacks["round"].tolist() == [1, 1]
    assert (attacks["status"] == "ok").all()
    assert attacks["batch_size"].tolist() == [4, 4]  # scored against the 4 images each node trained on
    evals = run.events("eval")
    assert evals["round"].tolist() == [1]  # the global model the round released, evaluated
    assert 0 <= evals["app_federated_eval_acc"].iloc[0] <= 1  # the app's own evaluation, as its strategy aggregated
    fits = run.events("fit").sort_values("client")
    assert fits["client"].tolist() == [0, 1] and fits["num_examples"].tolist() == [4, 4]
    assert (fits["train_loss"] > 0).all()  # what each node reported beside its update
    assert (fits["ground_truth"] == "steps").all()  # the samples each local step drew, noted in the node
    assert sorted(run.events("client_eval")["client"].tolist()) == [0, 1]
    assert json.loads((run.path / "summary.json").read_text())["app_evaluation"]["app_federated_eval_acc"] >= 0
    partitions = json.loads((run.path / "partitions.json").read_text())["clients"]
    assert [client["sample_ids"] for client in partitions] == [[0, 1, 2, 3], [4, 5, 6, 7]]

    # the same app, the same run config and seed, under Flower alone: the same final global model
    app = read_app(QUICKSTART_APP, f'{TINY} data-files="{data}" final-model="{plain_model}"')
    config, section = audit_config(app, QUICKSTART_AUDIT, settings)
    server_app, client_app = load_components(app)
    run_app(app, server_app, client_app, config, section)
    from pytorchexample.task import Net  # the app's own model, importable once the audit loaded the app

    audited, plain = final_state(audited_model), final_state(plain_model)
    assert audited.keys() == plain.keys()
    for name in audited:
        np.testing.assert_array_equal(audited[name], plain[name])
    # what the audit saw released is the app's final model, and training moved it from the seeded initial one
    released = RunStore(run.path).load_checkpoint(1)
    for name in audited:
        np.testing.assert_array_equal(released[name].numpy(), audited[name])
    torch.manual_seed(3)
    initial = Net().state_dict()
    assert any(not np.array_equal(initial[name].numpy(), audited[name]) for name in audited)
