import numpy as np
import pytest
import torch
from text_corpus import text_data, tiny_gpt2
from text_guesses import one_sentence_view, random_guesses_right, tokens_right

from adversary.attacks.tag import TagOptions, attack, sequence_length
from adversary.inversion.requirements import AttackSetting
from fedsim.config import parse_config
from fedsim.core.errors import ConfigError
from fedsim.engine.leakage.portfolio import attack_setting, resolve_attacks
from fedsim.models import ModelConfig, build_model


def test_it_recovers_more_tokens_of_a_sentence_than_random_guesses_do(tmp_path):
    torch.set_num_threads(1)
    data, row, view = one_sentence_view(tmp_path)
    truth = data.x_train[row]

    (result,) = attack([view], TagOptions(iterations=60, restarts=1), seed=0, device=torch.device("cpu"))

    recovered = tokens_right(result.tokens[0].numpy(), truth, data.pad_id)
    assert recovered > np.quantile(random_guesses_right(data, truth), 0.95)
    assert result.tokens.shape == (1, 8) and len(result.restart_objectives) == 1


def test_the_length_is_read_off_the_position_embeddings_that_moved(tmp_path):
    data, row, view = one_sentence_view(tmp_path)
    delta = {name.removeprefix("network."): value for name, value in view.parameter_delta().items()}
    positions = [name for name in delta if name.endswith("wpe.weight")]

    assert sequence_length(delta, tuple(positions), 8) == (data.x_train[row] != data.pad_id).sum()
    assert sequence_length(delta, (), 8) == 8  # position embeddings not trained: the full length


def test_a_restart_starts_from_the_same_point_whichever_share_it_runs_in(tmp_path):
    torch.set_num_threads(1)
    _, _, view = one_sentence_view(tmp_path)
    both = attack([view], TagOptions(iterations=3, restarts=2), seed=0, device=torch.device("cpu"))[0]
    second = attack([view], TagOptions(iterations=3, restarts=1, first_restart=1), seed=0, device=torch.device("cpu"))

    assert both.restart_objectives[1] == pytest.approx(second[0].restart_objectives[0])


def test_a_bad_option_is_one_line_naming_the_field():
    with pytest.raises(ConfigError) as error:
        parse_config({"adversary": {"attacks": [{"name": "tag", "l1_weight": -1}]}})
    assert "\n" not in str(error.value) and "l1_weight" in str(error.value)


def test_strongest_runs_tag_and_lamp_beside_dager_for_text_models_and_neither_for_images(tmp_path):
    config = parse_config({"adversary": {"attacks": "strongest"}})
    gpt2 = tiny_gpt2(text_data(tmp_path), hidden=32)
    lenet = build_model(ModelConfig(name="lenet"), 1, 10, 28, seed=0)

    def portfolio(model, shape) -> set[str]:
        setting = attack_setting(config.adversary, config.client, config.model.name, False, model, shape, 10)
        return {options.name for options in resolve_attacks(config.adversary, config.client.defenses, setting).attacks}

    assert {"dager", "tag", "lamp"} <= portfolio(gpt2, (1, 1, 8))
    assert not {"dager", "tag", "lamp"} & portfolio(lenet, (1, 28, 28))
    setting = AttackSetting(model=lenet, model_name="lenet", input_shape=(1, 28, 28), num_classes=10)
    assert TagOptions().refusal(setting) == "tag reconstructs text; lenet is an image model"
