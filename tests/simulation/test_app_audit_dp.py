"""``fedsim audit`` finds the DP of an unedited Flower app as it trains: Opacus' DP-SGD per node with the app's own
epsilon beside it, and a LocalDpMod whose noise does not support the epsilon it states, flagged in one line."""

from __future__ import annotations

import json
import logging
import sys

import pytest
from flower_apps import LOCAL_DP_APP, LOCAL_DP_AUDIT, OPACUS_APP, OPACUS_AUDIT, write_image_parquet

import fedsim
from fedsim.engine.app_audit.runner import audit_app

pytestmark = pytest.mark.simulation

TINY = "num-server-rounds=1 batch-size=4 seed=3"
SETTINGS = [
    "app.num_supernodes=2",
    "adversary.portfolio=listed",
    "adversary.attacks=[{name: dlg, iterations: 5}]",
    "adversary.save_images=false",
]


class _Messages(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture(scope="module")
def opacus_audit(tmp_path_factory) -> tuple[fedsim.Run, list[str]]:
    """One audit of the unedited Opacus example app (2 nodes, 60 images, one round), attacked by the adaptive attack
    (refused where no dpsgd is known to be in force) and audited with 10 canaries per node; with what fedsim logged."""
    tmp_path = tmp_path_factory.mktemp("opacus")
    data = write_image_parquet(tmp_path / "images.parquet", 60)
    run_config = f'{TINY} data-files="{data}"'
    adapted = "adversary.attacks=[{name: ig-dpsgd, iterations: 5}]"
    audit = "adversary.privacy_audit={canaries: 10}"
    logger, handler = logging.getLogger("fedsim"), _Messages()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with pytest.MonkeyPatch.context() as patch:
            task = sys.modules.get("opacusexample.task")
            if task is not None:  # the app caches its data set per process (as Flower's example does)
                patch.setattr(task, "fds", None)
            path = audit_app(
                OPACUS_APP, OPACUS_AUDIT, [*SETTINGS, adapted, audit, f"output.dir={tmp_path}"], run_config
            )
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return fedsim.load_run(path), handler.messages


def test_opacus_dp_sgd_is_found_before_the_attacks_are_chosen_and_per_node_beside_the_apps_own_epsilon(opacus_audit):
    run, messages = opacus_audit

    # the dry call of the app's first round found DP-SGD before the attacks were chosen: the adapted attack ran, told
    # the least noise of any node (node 0's 1.0) and Opacus' clip; its noise in the update's units: 1 step, batch 4
    assert [d.name for d in run.config.client.defenses] == ["dpsgd"]
    assert run.config.client.defenses[0].noise_multiplier == 1.0
    (attack,) = run.config.adversary.attacks
    assert (attack.name, attack.per_sample_clip, attack.loss) == ("ig-dpsgd", 1.0, "l2")
    assert attack.noise_sigma == pytest.approx(1.0 * 1.0 / 4)
    assert set(run.events("attack")["attack"]) == {"ig-dpsgd"} and (run.events("attack")["status"] == "ok").all()

    rows = run.events("app_dp").sort_values("client")
    found = rows[rows["mechanism"] == "opacus-dpsgd"]
    assert found["client"].tolist() == [0, 1]
    assert found["noise_multiplier"].tolist() == [1.0, 1.5] and found["max_grad_norm"].tolist() == [1.0, 1.0]
    fits = run.events("fit").sort_values("client")
    assert (fits["epsilon"] > 0).all()  # the app's own claim, per node
    asked = rows[rows["mechanism"] == "opacus-epsilon-spent"]  # what it asked Opacus' accountant, at which delta
    assert asked["epsilon"].tolist() == pytest.approx(fits["epsilon"].tolist()) and (asked["delta"] == 1e-5).all()
    assert (fits["ground_truth"] == "steps").all()  # what Opacus' Poisson batches drew, not the whole split
    evals = run.events("eval")
    assert evals["round"].tolist() == [0, 1] and evals["app_central_accuracy"].between(0, 1).all()
    summary = json.loads((run.path / "summary.json").read_text())
    assert set(summary["app_dp"]["epsilon_claims"]) == {"0", "1"}
    assert summary["app_dp"]["unadapted"] is None  # the attacks knew it
    (record,) = summary["app_dp"]["attacks_adapted_to"]
    assert record["nodes"] == {"0": 1.0, "1": 1.5} and record["found_by"] == ["a dry call of the app's first round"]
    assert not [m for m in messages if "no evaluated round" in m]


def test_a_local_dp_mod_whose_noise_supports_a_far_larger_epsilon_is_flagged_and_bounded_at_client_level(
    tmp_path, fedsim_log
):
    data = write_image_parquet(tmp_path / "images.parquet", 60)
    run_config = f'{TINY} data-files="{data}"'
    settings = [*SETTINGS, "adversary.privacy_audit={canaries: 10}", f"output.dir={tmp_path}"]
    run = fedsim.audit(LOCAL_DP_APP, LOCAL_DP_AUDIT, settings, run_config=run_config)

    assert [defense.name for defense in run.config.client.defenses] == ["clip", "noise"]  # the attacks knew it
    found = run.events("app_dp")
    assert set(found["mechanism"]) == {"flower-localdp", "audit-canaries-entered"}  # and the audit's own canaries
    found = found[found["mechanism"] == "flower-localdp"]
    assert found["noise_std_measured"].between(4e-5, 6e-5).all()  # 1e-4 * sqrt(2 ln(1.25e5)) / 10 = 4.8e-5
    flagged = [
        r.getMessage() for r in fedsim_log.records if r.getMessage().startswith("LocalDpMod's claim contradicted")
    ]
    assert len(flagged) >= 2 and "not the 10 it states" in flagged[0]
    summary = json.loads((run.path / "summary.json").read_text())
    assert len(summary["app_dp"]["contradicted"]) == 2
    # canary clients through the app's own LocalDpMod: its noise hides none of them, beside the
    # epsilon it states; 10 canaries cannot prove 10 (the bound's ceiling grows with the canaries)
    bounds = run.events("app_privacy_audit")
    (client,) = bounds[bounds["audit_adjacency"] == "client"].to_dict("records")
    assert (client["mechanism"], client["epsilon_client"], client["audit_canaries"]) == ("flower-localdp", 10.0, 10)
    # half the guesses "in", half "out": every guess right but those the count of included canaries forbids
    allowed = client["audit_guesses"] - abs(client["audit_included"] - client["audit_guesses"] // 2)
    assert client["audit_correct"] == allowed > 0
    assert summary["app_dp"]["privacy_audit_client"][0]["audit_delta"] == 1e-5


def test_opacus_apps_nodes_get_a_measured_lower_bound_beside_their_own_epsilon(opacus_audit):
    run, messages = opacus_audit
    bounds = run.events("app_privacy_audit").sort_values("client")
    assert bounds["client"].tolist() == [0, 1]
    assert (bounds["audit_adjacency"] == "example").all() and (bounds["audit_updates"] == 1).all()
    assert (bounds["audit_delta"] == 1e-5).all()  # the delta the app asked its accountant for
    claims = run.events("fit").sort_values("client")["epsilon"].to_numpy()
    assert bounds["epsilon_example"].to_numpy() == pytest.approx(claims)  # the app's own, per node
    assert (bounds["audit_epsilon_lower"] < bounds["epsilon_example"]).all()  # DP-SGD as configured: not contradicted
    assert (bounds["audit_included"] > 0).all()
    fits = run.events("fit")
    assert (fits["ground_truth"] == "steps").all()  # the canaries are not among what a step drew of the partition
    lines = [m for m in messages if m.startswith("privacy audit, node")]
    assert len(lines) == 2 and "beside the app's own epsilon" in lines[0]
    assert not [m for m in messages if "is contradicted" in m]
    summary = json.loads((run.path / "summary.json").read_text())
    assert set(summary["app_dp"]["privacy_audit"]) == {"0", "1"}
