import importlib

from fedsim.data import DataConfig, TextDataset, load_dataset
from fedsim.data.sources.python_docs import python_doc_sentences


def test_the_standard_library_corpus_does_not_depend_on_what_the_process_imported():
    before = python_doc_sentences()
    for name in ("email.mime.text", "http.cookies", "unittest.mock", "urllib.robotparser"):
        importlib.import_module(name)

    assert python_doc_sentences() == before
    assert len(before) > 500 and all(4 <= len(sentence.split()) <= 12 for sentence in before)


def test_python_docs_is_next_token_text_with_a_public_split_held_out():
    data = load_dataset(DataConfig(dataset="python-docs", max_length=12), seed=0)

    assert isinstance(data, TextDataset) and data.task == "next-token"
    assert len(data.x_test) > 0 and data.x_train.shape[1] == 12
