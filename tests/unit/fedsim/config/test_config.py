"""Config parsing: defaults, overrides, and one-line errors that name the key, the value and what is allowed."""

from pathlib import Path

import pytest

from fedsim.config import ConfigError, ExperimentConfig, apply_override, load_config, parse_config
from fedsim.config.schema import schema_rows

# run configs; the audit configs of configs/flower-apps/ are validated by tests/unit/fedsim/engine/app_audit
CONFIGS = sorted(p for p in (Path(__file__).parents[4] / "configs").rglob("*.yaml") if "flower-apps" not in p.parts)


def error_of(raw: dict) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(raw)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_empty_config_gets_every_default():
    config = parse_config({})
    assert config.data.dataset == "digits"
    assert config.client.local_epochs == 1 and config.client.local_steps is None
    assert config.data.partition.name == "iid"
    assert config.strategy.name == "fedavg"


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_bundled_configs_are_valid(path):
    assert isinstance(load_config(path), ExperimentConfig)


def test_unknown_key_suggests_the_close_one():
    message = error_of({"client": {"lrr": 0.1}})
    assert "client.lrr" in message and "did you mean 'lr'" in message


def test_unknown_top_level_section_is_rejected():
    message = error_of({"federaton": {"rounds": 2}})
    assert "federaton" in message and "did you mean 'federation'" in message


def test_bad_type_names_path_and_value():
    message = error_of({"federation": {"rounds": "many"}})
    assert message.startswith("federation.rounds = 'many'")
    assert "integer" in message


def test_out_of_range_value_says_what_is_allowed():
    message = error_of({"client": {"lr": -1}})
    assert "client.lr = -1" in message and "greater than 0" in message


def test_bad_partition_name_lists_the_schemes():
    message = error_of({"data": {"partition": "zipf"}})
    assert "data.partition" in message and "'zipf'" in message
    assert "allowed: dirichlet, iid, pathological" in message


def test_bad_partition_parameter():
    message = error_of({"data": {"partition": {"name": "dirichlet", "alpha": 0}}})
    assert "data.partition.alpha = 0" in message and "greater than 0" in message


def test_partition_parameter_of_another_scheme_is_unknown():
    message = error_of({"data": {"partition": {"name": "iid", "alpha": 0.3}}})
    assert "data.partition.alpha" in message and "unknown key" in message


def test_unknown_dataset_and_model_list_allowed_names():
    assert "did you mean 'digits'" in error_of({"data": {"dataset": "digit"}})
    message = error_of({"model": {"name": "lennet"}})
    assert "model.name = 'lennet'" in message and "lenet" in message


def test_local_steps_and_epochs_are_exclusive():
    message = error_of({"client": {"local_steps": 1, "local_epochs": 2}})
    assert "client" in message and "only one" in message


def test_min_fit_clients_cannot_exceed_clients():
    assert "min_fit_clients = 5" in error_of({"federation": {"num_clients": 4, "min_fit_clients": 5}})


def test_failure_injection_must_name_an_existing_client():
    message = error_of({"federation": {"num_clients": 2, "failures": [{"round": 1, "client": 3}]}})
    assert "failures.client = 3" in message


def test_bad_device_is_one_line():
    assert "device = 'gpu0'" in error_of({"device": "gpu0"})


def test_overrides_parse_yaml_values_and_create_sections():
    raw: dict = {"client": {"lr": 0.1}}
    apply_override(raw, "client.lr=0.05")
    apply_override(raw, "federation.rounds=3")
    apply_override(raw, "data.partition.name=dirichlet")
    config = parse_config(raw)
    assert config.client.lr == 0.05 and config.federation.rounds == 3
    assert config.data.partition.name == "dirichlet"


def test_override_expands_a_partition_shorthand():
    raw: dict = {"data": {"partition": "dirichlet"}}
    apply_override(raw, "data.partition.alpha=0.1")
    assert parse_config(raw).data.partition.alpha == 0.1


def test_override_into_a_list_by_index():
    raw: dict = {}
    apply_override(raw, "federation.failures.0.round=1")
    apply_override(raw, "federation.failures.0.client=0")
    assert parse_config(raw).federation.failures[0].round == 1


def test_override_without_equals_sign_is_a_clear_error():
    with pytest.raises(ConfigError, match=r"KEY.PATH=VALUE"):
        apply_override({}, "client.lr")


def test_override_that_breaks_validation_names_the_key(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("federation:\n  rounds: 2\n")
    with pytest.raises(ConfigError, match=r"federation.rounds = 0"):
        load_config(path, ["federation.rounds=0"])


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("data: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML at line"):
        load_config(bad)


def test_yaml_tags_are_not_executed(tmp_path):
    evil = tmp_path / "evil.yaml"
    evil.write_text("name: !!python/object/apply:os.system ['echo hacked']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(evil)


def test_schema_documents_every_field():
    rows = schema_rows()
    keys = {key for key, *_ in rows}
    for required in (
        "data.dataset",
        "data[npz].path",
        "data[imagefolder].path",
        "data[cifar10].root",
        "data[mnist].download",
        "data.image_size",
        "data.partition",
        "data.partition[dirichlet].alpha",
        "data.partition[pathological].classes_per_client",
        "model.name",
        "model[lenet].activation",
        "model[resnet18].norm",
        "model[convnet].norm",
        "model[tv].pretrained",
        "federation.num_clients",
        "federation.rounds",
        "federation.fraction_fit",
        "federation.client_resources.cpus",
        "federation.client_resources.gpus",
        "client.optimizer",
        "client.lr",
        "client.batch_size",
        "client.local_steps",
        "client.local_epochs",
        "strategy.name",
        "output.dir",
    ):
        assert required in keys
    assert all(description for _, _, _, description in rows)
    # a key is documented where it means something: norm for the models with norm layers, path for file data sets
    assert not {"model.norm", "model[lenet].norm", "model[tv].activation", "data.path", "data[digits].root"} & keys


@pytest.mark.parametrize("name", ["../../x", "/tmp/x", "a/b", "..", "."])
def test_a_name_that_would_leave_the_output_folder_is_refused_in_one_line(name):
    with pytest.raises(ConfigError) as error:
        parse_config({"name": name})
    assert str(error.value) == (
        f"name = {name!r}: '{name}' may only contain letters, digits, '.', '_' and '-' (and not be only dots)"
    )
    with pytest.raises(ConfigError, match=r"^output\.run_name = "):
        parse_config({"output": {"run_name": name}})
