import numpy as np
from text_corpus import text_data

from fedsim.engine.leakage.text_rows import text_fields


def test_an_exact_recovery_in_another_order_scores_one_leaks_and_pairs_each_text_with_itself(tmp_path):
    data = text_data(tmp_path)
    ids = np.array([3, 7, 11])
    recovered = data.x_train[ids[::-1]]

    row = text_fields(recovered, data, ids, seed=0, draws=19, level=0.05)

    assert row["modality"] == "text" and row["sequences"] == 3
    assert row["tokens"] == int((data.x_train[ids] != data.pad_id).sum())
    assert row["exact_mean"] == row["token_accuracy_mean"] == row["rougeL_mean"] == 1.0
    assert row["verdict"] == "leaks" and row["floor_rougeL"] < 1.0
    assert [pair["original"] for pair in row["texts"]] == data.decode(data.x_train[ids])
    assert all(pair["recovered"] == pair["original"] for pair in row["texts"])


def test_nothing_recovered_is_at_the_floor_with_empty_texts_beside_the_originals(tmp_path):
    data = text_data(tmp_path)
    ids = np.array([0, 1])
    nothing = np.full_like(data.x_train[ids], data.pad_id)

    row = text_fields(nothing, data, ids, seed=0, draws=19, level=0.05)

    assert row["exact_mean"] == 0.0 and row["verdict"] == "at floor"
    assert [pair["recovered"] for pair in row["texts"]] == ["", ""]
