import subprocess
import sys

import numpy as np
import pytest
import torch
from text_corpus import hub_offline, text_data, tiny_gpt2, write_labelled
from torch import nn

from clients.training import train_locally
from fedsim.config import ClientConfig
from fedsim.models import ModelConfig, ModelError, build_run_model


def test_importing_fedsim_models_leaves_transformers_unimported():
    code = "import fedsim.models, fedsim.data, sys; print('transformers' in sys.modules, 'peft' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_a_gpt2_from_a_config_learns_next_tokens_through_the_clients_training(tmp_path):
    data = text_data(tmp_path)
    model = tiny_gpt2(data)
    x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
    settings = ClientConfig(lr=0.5, batch_size=16, local_epochs=1)

    losses = [train_locally(model, x, y, np.arange(len(x)), settings, seed=epoch).train_loss for epoch in range(3)]

    assert model(x[:2]).shape == (2, data.vocab_size, data.x_train.shape[1])
    assert losses[-1] < losses[0] - 0.5  # from about log(vocabulary) towards the corpus' word frequencies


def test_lora_trains_only_the_adapters(tmp_path):
    data = text_data(tmp_path)
    model = tiny_gpt2(data, lora_rank=4)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)

    train_locally(model, x, y, np.arange(len(x)), ClientConfig(lr=0.5, batch_size=16, local_steps=2), seed=0)

    changed = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    assert changed and all("lora_" in name for name in changed)


def test_a_bert_classifies_labelled_text(tmp_path):
    from fedsim.data import DataConfig, load_dataset

    data = load_dataset(DataConfig(dataset="text-files", path=write_labelled(tmp_path), task="classification"), seed=0)
    model = build_run_model(
        ModelConfig(name="bert", task="classification"), data, seed=0, with_weights=True, dp_compatible=False
    )
    assert model(torch.from_numpy(data.x_train[:3])).shape == (3, 2)


def test_next_token_prediction_on_class_labels_is_refused_in_one_line(tmp_path):
    from fedsim.data import DataConfig, load_dataset

    data = load_dataset(DataConfig(dataset="text-files", path=write_labelled(tmp_path), task="classification"), seed=0)
    with pytest.raises(ModelError, match=r"^model.task = 'next-token': the data set has 2 classes"):
        build_run_model(ModelConfig(name="gpt2"), data, seed=0, with_weights=True, dp_compatible=False)


def test_a_pretrained_model_that_cannot_be_loaded_fails_in_one_line(tmp_path, monkeypatch):
    hub_offline(monkeypatch)
    data = text_data(tmp_path)
    with pytest.raises(ModelError, match=r"^model.pretrained = 'fedsim-absent/gpt2': cannot be loaded"):
        tiny_gpt2(data, pretrained="fedsim-absent/gpt2")


def test_the_same_seed_builds_the_same_text_model(tmp_path):
    data = text_data(tmp_path)
    first, second = tiny_gpt2(data, seed=3), tiny_gpt2(data, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), second.state_dict().values()))
    assert isinstance(first, nn.Module)


def test_the_architecture_of_a_pretrained_text_model_is_built_from_its_config_without_loading_weights(tmp_path):
    data = text_data(tmp_path)
    config = ModelConfig(name="gpt2", pad_id=data.pad_id, pretrained=str(tmp_path / "no-such-model"))

    model = build_run_model(config, data, seed=0, with_weights=False, dp_compatible=False)

    assert model(torch.from_numpy(data.x_train[:2])).shape[:2] == (2, data.vocab_size)
