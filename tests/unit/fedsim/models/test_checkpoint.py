"""Checkpoints: round trips, wrapped state dicts, and one-line errors for wrong shapes, keys or files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from model_builds import build, one_line_error, same_weights, state
from tiny_configs import tiny_config

from fedsim.data import load_dataset
from fedsim.models import ModelError


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    saved = state(build("convnet", 3, 16, seed=3))
    torch.save(saved, tmp_path / "plain.pt")
    torch.save({"model": saved, "round": 4}, tmp_path / "wrapped.pt")
    for file in ("plain.pt", "wrapped.pt"):
        loaded = build("convnet", 3, 16, seed=4, checkpoint=tmp_path / file)
        assert same_weights(state(loaded), saved)


def test_checkpoint_wins_over_uniform_init(tmp_path: Path) -> None:
    saved = state(build("lenet", seed=5))
    torch.save({"state_dict": saved}, tmp_path / "ckpt.pt")
    assert same_weights(state(build("lenet", init="uniform", checkpoint=tmp_path / "ckpt.pt")), saved)


def test_checkpoint_with_wrong_shapes_is_one_line(tmp_path: Path) -> None:
    file = tmp_path / "ten_classes.pt"
    torch.save(build("lenet", classes=10).state_dict(), file)
    with pytest.raises(ModelError) as excinfo:
        build("lenet", classes=5, checkpoint=file)
    message = one_line_error(excinfo)
    assert message.startswith(f"model.checkpoint = '{file}'")
    assert "'fc.weight'" in message and "[10, 768]" in message and "[5, 768]" in message


def test_checkpoint_of_another_model_names_the_first_key(tmp_path: Path) -> None:
    file = tmp_path / "cnn.pt"
    torch.save(build("cnn").state_dict(), file)
    with pytest.raises(ModelError, match=r"key 'body\.0\.weight' is missing"):
        build("lenet", checkpoint=file)


def test_missing_or_unreadable_checkpoint(tmp_path: Path) -> None:
    from fedsim.config import ConfigError, parse_config

    with pytest.raises(ConfigError, match=r"^model.checkpoint = '.*absent.pt': no such file$"):
        parse_config({"model": {"name": "lenet", "checkpoint": str(tmp_path / "absent.pt")}})
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ModelError) as excinfo:
        build("lenet", checkpoint=tmp_path / "junk.pt")
    assert "cannot be read" in one_line_error(excinfo)


def test_a_checkpoint_full_of_nan_is_refused(tmp_path):
    from fedsim.engine.assembly import run_model_of
    from fedsim.models import ModelError

    config = tiny_config()
    dataset = load_dataset(config.data, seed=0)
    model = run_model_of(config, dataset, seed=0, with_weights=False)
    poisoned = {name: torch.full_like(value, float("nan")) for name, value in model.state_dict().items()}
    torch.save(poisoned, tmp_path / "nan.pt")
    with pytest.raises(ModelError, match=r"holds NaN or infinite values"):
        run_model_of(tiny_config(model={"checkpoint": str(tmp_path / "nan.pt")}), dataset, seed=0, with_weights=True)


def test_a_malicious_pickle_as_model_checkpoint_is_one_line_and_runs_nothing(tmp_path, capsys):
    from cli_errors import one_line_error
    from malicious_pickles import assert_really_malicious, save_malicious

    assert_really_malicious(tmp_path)
    checkpoint, sentinel = tmp_path / "evil.pt", tmp_path / "code-ran"
    save_malicious(checkpoint, sentinel, weight=torch.zeros(2))
    config = tmp_path / "c.yaml"
    config.write_text(f"data:\n  dataset: digits\nmodel:\n  checkpoint: {checkpoint}\n")
    line = one_line_error(capsys, "run", str(config), "--quiet", "--set", f"output.dir={tmp_path / 'runs'}")
    assert f"model.checkpoint = '{checkpoint}'" in line and "holds objects other than tensors" in line
    assert "io.open" in line and "weights_only" not in line  # no advice to load it unsafely
    assert not sentinel.exists()
