import numpy as np
import pytest
from text_corpus import hub_offline, text_data, write_corpus, write_labelled

from fedsim.data import DataConfig, DataError, load_dataset
from fedsim.data.text import IGNORED_TARGET, TextDataset


def test_a_text_file_becomes_padded_ids_with_next_token_targets(tmp_path):
    data = text_data(tmp_path, max_length=8)

    assert isinstance(data, TextDataset)
    assert data.x_train.shape[1] == 8 and len(data.x_test) > 0  # test split held out of the file
    row = data.x_train[0]
    length = int((row != data.pad_id).sum())
    # targets: the inputs shifted by one, then end of sequence, then ignored padding
    assert data.y_train[0, : length - 1].tolist() == row[1:length].tolist()
    assert data.y_train[0, length - 1] == data.tokenizer.eos_id
    assert (data.y_train[0, length:] == IGNORED_TARGET).all()


def test_decoding_gives_back_the_lines_of_the_file(tmp_path):
    path = write_corpus(tmp_path, count=20)
    data = load_dataset(DataConfig(dataset="text-files", path=path, max_length=12, test_fraction=0.5), seed=0)

    lines = set(path.read_text().splitlines())
    assert set(data.decode(data.x_train)) <= lines


def test_a_jsonl_file_gives_class_labels_for_classification(tmp_path):
    config = DataConfig(dataset="text-files", path=write_labelled(tmp_path), task="classification")
    data = load_dataset(config, seed=0)

    assert data.class_names == ("dry", "wet")
    assert data.y_train.ndim == 1 and set(data.y_train.tolist()) <= {0, 1}


def test_a_missing_label_field_is_named_in_one_line(tmp_path):
    config = DataConfig(dataset="text-files", path=write_labelled(tmp_path), task="classification", label_field="topic")
    with pytest.raises(DataError, match=r"data.label_field = 'topic': .* has no such field"):
        load_dataset(config, seed=0)


def test_a_hub_data_set_offline_fails_in_one_line(tmp_path, monkeypatch):
    hub_offline(monkeypatch)
    config = DataConfig(dataset="hf-text", hub_name="fedsim-absent/no-such-set", cache_dir=tmp_path)
    with pytest.raises(DataError, match=r"^data.hub_name = 'fedsim-absent/no-such-set' \(split 'train'\)") as error:
        load_dataset(config, seed=0)
    assert "\n" not in str(error.value)


def test_a_hub_tokenizer_offline_fails_in_one_line(tmp_path, monkeypatch):
    hub_offline(monkeypatch)
    config = DataConfig(dataset="text-files", path=write_corpus(tmp_path), tokenizer="fedsim-absent/tokenizer")
    with pytest.raises(DataError, match=r"^data.tokenizer = 'fedsim-absent/tokenizer': "):
        load_dataset(config, seed=0)


def test_the_trained_tokenizer_is_the_same_every_time(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = text_data(tmp_path / "a"), text_data(tmp_path / "b")
    assert np.array_equal(first.x_train, second.x_train)
    assert first.tokenizer.backend.get_vocab() == second.tokenizer.backend.get_vocab()
