import numpy as np
import pytest
from text_corpus import write_corpus
from tiny_configs import tiny_config

from fedsim.data import TOKEN_IDS, DataError
from fedsim.engine.assembly import federation_of
from fedsim.engine.lifecycle.federation import partition_record


def text_config(tmp_path, partition="iid", **data):
    path = str(write_corpus(tmp_path, count=40))
    return tiny_config(
        data={"dataset": "text-files", "path": path, "normalize": "none", "partition": partition, **data},
        model={"name": "gpt2", "init": "default"},
        federation={"num_clients": 4},
    )


def test_a_next_token_corpus_is_split_iid_and_its_token_ids_are_not_normalised(tmp_path):
    federation = federation_of(text_config(tmp_path))

    assert len(federation.partitions) == 4
    held = np.concatenate(federation.partitions)
    assert sorted(held.tolist()) == list(range(len(federation.dataset.x_train)))
    assert federation.client_stats == (TOKEN_IDS,) * 4 and federation.test_stats == TOKEN_IDS


def test_a_label_skewed_partition_of_next_token_text_is_refused_in_one_line(tmp_path):
    with pytest.raises(DataError, match=r"data.partition.name = 'dirichlet': next-token text has no class labels"):
        federation_of(text_config(tmp_path, partition="dirichlet"))


def test_the_partition_record_of_text_names_each_clients_samples_without_label_counts(tmp_path):
    record = partition_record(federation_of(text_config(tmp_path)))

    for client in record["clients"]:
        assert "label_counts" not in client and client["num_examples"] == len(client["sample_ids"])
    assert record["test_normalization"] == {"mean": [], "std": []}
