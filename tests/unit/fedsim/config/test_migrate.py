"""Runs and configs written before the schema version (and before per-attack options) still open.

A run directory of the old layout: a config.yaml without ``schema_version`` that dumps every attack with
the one flat option model of that time (unset options as null, ``tv_weight`` / ``bn_weight`` keys), and
metrics rows without ``schema``. It must open in ``fedsim.load_run``, ``fedsim report`` and ``--resume``,
with the same attack settings it ran with.
"""

from __future__ import annotations

import logging

import pytest
import yaml
from old_runs import assert_old_attack_settings, assert_old_model_and_data, write_old_run

import fedsim
from fedsim.cli import main
from fedsim.config import SCHEMA_VERSION, dump_config, load_config, parse_config
from fedsim.rundir.writer import RunStore


def test_an_old_run_opens_in_load_run_with_the_attack_settings_it_ran_with(tmp_path):
    run = fedsim.load_run(write_old_run(tmp_path / "old"))
    assert_old_attack_settings(run.config)
    assert_old_model_and_data(run.config)
    assert list(run.metrics.query("event == 'eval'")["accuracy"]) == [0.1, 0.3, 0.4]


def test_an_old_run_gets_a_report(capsys, tmp_path):
    run_dir = write_old_run(tmp_path / "old")
    assert main(["report", str(run_dir)]) == 0
    assert "| 1 | 2.1000 | 0.3000 |" in (run_dir / "report" / "summary.md").read_text()
    assert "- `noise`: sigma=0.1, distribution=gaussian" in (run_dir / "report" / "summary.md").read_text()


def test_an_old_run_reopens_for_resume_and_new_rows_carry_the_schema(tmp_path):
    run_dir = write_old_run(tmp_path / "old")
    store, config, last = RunStore.open_for_resume(run_dir)
    assert last == 1 and [row["round"] for row in store.rows()] == [0, 1, 1, 1]  # round 2 was not committed
    assert_old_attack_settings(config)
    assert_old_model_and_data(config)
    store.append({"round": 2, "event": "eval", "loss": 2.0, "accuracy": 0.4})
    assert [row.get("schema") for row in store.rows()] == [None, None, None, None, SCHEMA_VERSION]


def test_old_keys_say_once_which_key_replaced_them(tmp_path, caplog, monkeypatch):
    import fedsim.core.sections

    monkeypatch.setattr(fedsim.core.sections, "_said", set())  # what earlier tests of this process were told
    caplog.set_level(logging.INFO, "fedsim")
    write_old_run(tmp_path / "old")
    load_config(tmp_path / "old" / "config.yaml")
    load_config(tmp_path / "old" / "config.yaml")  # a sweep reads its config once per point
    lines = [record.getMessage() for record in caplog.records if "deprecated" in record.getMessage()]
    assert lines == [
        "adversary.attacks[0].tv_weight is deprecated; use regularizers: [{name: tv, weight: 0.03}]",
        "adversary.attacks[1].bn_weight is deprecated; use regularizers: [{name: tv, weight: 0.0001}, "
        "{name: bn_statistics, weight: 0.5}]",
    ]  # unset (null) old keys are silent: they only meant "the attack's default"


def test_a_written_config_carries_its_schema_version_and_reads_back_identically(tmp_path):
    config = load_config(write_old_run(tmp_path / "old") / "config.yaml")
    text = dump_config(config)
    assert yaml.safe_load(text)["schema_version"] == SCHEMA_VERSION
    assert "tv_weight" not in text and "bn_weight" not in text
    assert parse_config(yaml.safe_load(text)) == config


@pytest.mark.parametrize(
    "section, key, value",
    [
        ("model", "norm", "group"),
        ("model", "pretrained", True),
        ("data", "root", "/elsewhere"),
        ("data", "download", False),
    ],
)
def test_an_old_flat_key_that_was_set_is_still_an_error_naming_the_plugin(section, key, value):
    """Only the old unset value is dropped: a value someone chose, for a model or data set that ignores it, is said."""
    from fedsim.config import ConfigError

    raw = {"model": {"name": "lenet"}, "data": {"dataset": "digits"}}
    raw[section][key] = value
    owner = "model 'lenet'" if section == "model" else "data set 'digits'"
    with pytest.raises(ConfigError, match=f"^unknown key '{section}.{key}' for {owner}; allowed here: "):
        parse_config(raw)


def test_a_file_of_the_current_schema_gets_no_leniency_for_old_flat_keys():
    from fedsim.config import ConfigError

    parse_config({"schema_version": 2, "model": {"name": "tv:resnet18", "norm": "batch", "dropout": 0}})
    with pytest.raises(ConfigError, match=r"^unknown key 'model.norm' for model 'tv:resnet18'"):
        parse_config({"schema_version": SCHEMA_VERSION, "model": {"name": "tv:resnet18", "norm": "batch"}})


def test_a_config_from_a_newer_fedsim_is_refused_in_one_line():
    from fedsim.config import ConfigError

    with pytest.raises(ConfigError, match=f"schema_version = 99: this fedsim reads versions up to {SCHEMA_VERSION}"):
        parse_config({"schema_version": 99})


def test_a_config_written_before_the_privacy_audit_was_named_apart_still_loads(tmp_path):
    # adversary.audit, before `fedsim audit` (a Flower app's audit) took the word: a run's config.yaml dumps it
    old = {"schema_version": SCHEMA_VERSION, "strategy": {"dp": {}}, "adversary": {"audit": {"canaries": 300}}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old))
    config = load_config(tmp_path / "config.yaml")
    assert config.adversary.privacy_audit is not None and config.adversary.privacy_audit.canaries == 300
    assert "privacy_audit:" in dump_config(config) and "\n  audit:" not in dump_config(config)
    assert parse_config({"adversary": {"audit": None}}).adversary.privacy_audit is None  # an old run's unset audit
    with pytest.raises(Exception, match="keep only privacy_audit"):
        parse_config({"adversary": {"audit": {"canaries": 300}, "privacy_audit": {"canaries": 200}}})
