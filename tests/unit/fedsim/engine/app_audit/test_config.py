"""The audit config: run-config references resolved, the app's own sections refused, the fedsim config it becomes."""

from __future__ import annotations

import pytest
from flower_apps import QUICKSTART_APP, QUICKSTART_AUDIT

from fedsim.core.errors import ConfigError
from fedsim.engine.app_audit.app import read_app
from fedsim.engine.app_audit.audit_file import resolve_run_config
from fedsim.engine.app_audit.config import audit_config


def test_the_example_audit_follows_the_apps_run_config():
    app = read_app(QUICKSTART_APP, "batch-size=8 learning-rate=0.05 num-server-rounds=2")
    config, section = audit_config(app, QUICKSTART_AUDIT, ["app.num_supernodes=3"])
    assert (config.client.batch_size, config.client.lr, config.client.local_epochs) == (8, 0.05, 1)
    assert (config.federation.num_clients, config.federation.rounds) == (3, 2)
    assert config.model.name == "python" and config.model.target == "pytorchexample.task:Net"
    assert config.model.path == QUICKSTART_APP.resolve()  # the app's folder unless the audit says otherwise
    assert config.data.dataset == "flower-app" and config.data.num_partitions == 3
    assert config.data.arguments["batch_size"] == 8 and config.data.arguments["partition_id"] == "node:partition-id"
    assert section.mean == (0.5, 0.5, 0.5)


def test_the_nodes_default_to_the_apps_federation():
    config, _ = audit_config(read_app(QUICKSTART_APP), QUICKSTART_AUDIT)
    assert config.federation.num_clients == 10


def test_the_node_count_is_said_in_one_line_with_why_and_how_to_change_it(tmp_path, fedsim_log):
    pyproject = (QUICKSTART_APP / "pyproject.toml").read_text().split("[tool.flwr.federations]")[0]
    (tmp_path / "pyproject.toml").write_text(pyproject)  # as current Flower apps ship: no federations table
    audit_config(read_app(tmp_path), QUICKSTART_AUDIT)
    assert fedsim_log.messages == [
        "simulating 2 nodes: Flower's default for an app without a [tool.flwr.federations] table; "
        "set another count with --set app.num_supernodes=N"
    ]
    fedsim_log.clear()
    audit_config(read_app(QUICKSTART_APP), QUICKSTART_AUDIT, ["app.num_supernodes=3"])
    assert fedsim_log.messages == ["simulating 3 nodes: the audit config's app.num_supernodes"]


def test_a_run_config_reference_to_a_missing_key_names_where_it_is_and_what_there_is():
    with pytest.raises(ConfigError, match=r"^client.lr = 'run-config:lr': the app's run config has no 'lr'; it has "):
        resolve_run_config({"client": {"lr": "run-config:lr"}}, {"learning-rate": 0.1})


@pytest.mark.parametrize("section", ["data", "federation", "strategy"])
def test_sections_the_app_decides_are_refused(section):
    with pytest.raises(ConfigError, match=rf"^{section}: the audited app decides its own {section}"):
        audit_config(read_app(QUICKSTART_APP), QUICKSTART_AUDIT, [f"{section}.x=1"])


def test_a_bad_app_section_value_is_one_line_naming_it():
    with pytest.raises(ConfigError, match=r"^app.rounds = 0: Input should be greater than or equal to 1"):
        audit_config(read_app(QUICKSTART_APP), QUICKSTART_AUDIT, ["app.rounds=0"])


def test_a_canary_audit_of_the_app_is_accepted_where_its_canaries_can_enter_the_apps_data():
    config, _ = audit_config(read_app(QUICKSTART_APP), QUICKSTART_AUDIT, ["adversary.privacy_audit={canaries: 8}"])
    assert config.adversary.privacy_audit is not None and config.adversary.privacy_audit.canaries == 8


@pytest.mark.parametrize(
    ("setting", "refusal"),
    [
        ("{threat_model: final-model}", r"^adversary.privacy_audit.threat_model = 'final-model': an app audit scores"),
        ("{canary_norm: 2.0}", r"^adversary.privacy_audit.canary_norm = 2.0: an app audit's canaries are examples"),
        ("{host: 1}", r"^adversary.privacy_audit.host = 1: an app audit gives every node its own canaries"),
    ],
)
def test_a_canary_audit_the_app_audit_cannot_run_is_refused_in_one_line(setting, refusal):
    with pytest.raises(ConfigError, match=refusal):
        audit_config(read_app(QUICKSTART_APP), QUICKSTART_AUDIT, [f"adversary.privacy_audit={setting}"])


def test_a_canary_audit_without_held_out_images_for_canaries_is_refused():
    with pytest.raises(
        ConfigError, match=r"^adversary.privacy_audit: its canaries are held-out images .* app.data.test_output$"
    ):
        audit_config(
            read_app(QUICKSTART_APP),
            QUICKSTART_AUDIT,
            ["app.data.test_output=null", "adversary.privacy_audit={canaries: 8}"],
        )


def test_a_local_dp_mod_of_the_app_is_added_to_the_defenses_the_attacks_adapt_to():
    from flwr.clientapp import ClientApp
    from flwr.clientapp.mod import LocalDpMod

    from fedsim.engine.app_audit.dp_watch import with_found_defenses

    config, _ = audit_config(read_app(QUICKSTART_APP), QUICKSTART_AUDIT)
    app = ClientApp(mods=[LocalDpMod(clipping_norm=1.0, sensitivity=1e-4, epsilon=10.0, delta=1e-5)])
    adapted, added = with_found_defenses(config, app)
    assert [defense.name for defense in adapted.client.defenses] == ["clip", "noise"]
    assert adapted.client.defenses[0].max_norm == 1.0
    assert [(record["defense"]["name"], record["found_by"]) for record in added] == [
        ("clip", ["the ClientApp's mods"]),
        ("noise", ["the ClientApp's mods"]),
    ]
    assert with_found_defenses(config, ClientApp())[0] is config
