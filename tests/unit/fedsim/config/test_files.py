"""Reading a config file: YAML is read strictly, and a file that is not text is one line."""

from __future__ import annotations

import pytest

from fedsim.config import ConfigError, load_config


def test_a_key_written_twice_in_one_mapping_is_refused_naming_it_and_both_lines(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text("name: twice\nclient:\n  lr: 0.1\n  batch_size: 2\n  lr: 0.2\n")
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert str(raised.value) == (
        f"config file '{path}': key 'lr' is written twice in one mapping (lines 3 and 5); keep one"
    )


def test_the_same_key_in_two_mappings_and_a_merge_key_override_are_fine(tmp_path):
    path = tmp_path / "merged.yaml"
    path.write_text(
        "federation: {num_clients: 2, rounds: 1}\n"
        "client: &training {lr: 0.3, batch_size: 2}\n"
        "adversary: {attacks: [{name: dlg, lr: 0.5}]}\n"
    )
    assert load_config(path).client.lr == 0.3
    path.write_text("client: {<<: {lr: 0.3, batch_size: 2}, lr: 0.2}\n")
    config = load_config(path)
    assert (config.client.lr, config.client.batch_size) == (0.2, 2)


def test_a_config_that_is_not_utf8_text_is_one_line(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: café\n".encode("latin-1"))
    with pytest.raises(
        ConfigError, match=r"^config file '.*latin1\.yaml' is not UTF-8 text \(byte 0xe9 at offset 9\)$"
    ):
        load_config(path)
