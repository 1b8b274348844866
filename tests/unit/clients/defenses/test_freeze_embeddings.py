import numpy as np
import pytest
import torch
from text_corpus import text_data, tiny_gpt2

from clients.defenses.freeze_embeddings import FreezeEmbeddingsDefense
from clients.training import check_training_defenses, train_locally
from fedsim.config import ClientConfig
from fedsim.models import ModelError


def test_frozen_word_embeddings_do_not_move_while_the_rest_trains(tmp_path):
    data = text_data(tmp_path)
    model = tiny_gpt2(data)
    embeddings = model.base().get_input_embeddings().weight
    before_embeddings, before_attention = (
        embeddings.detach().clone(),
        model.base().transformer.h[0].attn.c_attn.weight.detach().clone(),
    )
    x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
    settings = ClientConfig(lr=0.5, batch_size=8, local_steps=2, defenses=[FreezeEmbeddingsDefense()])

    result = train_locally(model, x, y, np.arange(len(x)), settings, seed=0)

    assert torch.equal(embeddings, before_embeddings)
    assert not torch.equal(model.base().transformer.h[0].attn.c_attn.weight, before_attention)
    assert embeddings.requires_grad  # the session gives the model back as it was
    assert result.defense_records["defense.freeze-embeddings.frozen_parameters"] == embeddings.numel()


def test_an_image_model_is_refused_before_the_run(tmp_path):
    from fedsim.models import ModelConfig, build_model

    lenet = build_model(ModelConfig(name="lenet"), 1, 10, 28, seed=0)
    with pytest.raises(ModelError, match=r"freeze-embeddings: model .* is not a language model"):
        check_training_defenses(lenet, [FreezeEmbeddingsDefense()])
