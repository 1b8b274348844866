"""Bad input gets one line naming the key, before anything runs, and leaves nothing behind."""

import numpy as np
import pytest
import torch
import yaml

from fedsim.core.errors import ConfigError
from fedsim.cli import main
from fedsim.config import load_config, parse_config
from fedsim.data import DataError, load_dataset
from fedsim.rundir.writer import RunStore
from tiny_configs import tiny_config, tiny_raw


def one_line_error(capsys, *argv) -> str:
    assert main(list(argv)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def write_config(tmp_path, **overrides):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(tiny_raw(**overrides)))
    return path


@pytest.mark.parametrize(
    ("adversary", "starts"),
    [
        ({"rounds": "5-2"}, "adversary.rounds = '5-2': selects no round; an interval"),
        ({"rounds": [99]}, "adversary.rounds = [99]: selects no round of 1 .. 1"),
        ({"rounds": []}, "adversary.rounds = []: selects no round"),
        ({"clients": [99]}, "adversary.clients = [99]: no client 99; partition ids run 0 .. 1"),
        ({"clients": [-1]}, "adversary.clients = [-1]: selects no client"),
    ],
)
def test_an_adversary_that_selects_nothing_is_refused(adversary, starts):
    with pytest.raises(ConfigError) as error:
        parse_config(tiny_raw(adversary={"attacks": ["dlg"], **adversary}))
    assert str(error.value).startswith(starts)


def test_a_seed_beyond_what_the_generators_take_is_one_line():
    with pytest.raises(ConfigError, match=r"^seed = 1180591620717411303424: Input should be less than 4294967296"):
        parse_config(tiny_raw(seed=2**70))


def test_validate_checks_that_the_checkpoint_exists(tmp_path, capsys):
    config = write_config(tmp_path, model={"checkpoint": str(tmp_path / "missing.pt")})
    assert one_line_error(capsys, "validate", str(config)).endswith(f"model.checkpoint = '{tmp_path / 'missing.pt'}': no such file")


def test_a_checkpoint_full_of_nan_is_refused(tmp_path):
    from fedsim.engine.lifecycle.assembly import run_model_of
    from fedsim.models import ModelError

    config = tiny_config()
    dataset = load_dataset(config.data, seed=0)
    model = run_model_of(config, dataset, seed=0, with_weights=False)
    poisoned = {name: torch.full_like(value, float("nan")) for name, value in model.state_dict().items()}
    torch.save(poisoned, tmp_path / "nan.pt")
    with pytest.raises(ModelError, match=r"holds NaN or infinite values"):
        run_model_of(tiny_config(model={"checkpoint": str(tmp_path / "nan.pt")}), dataset, seed=0, with_weights=True)


def test_an_output_dir_that_is_a_file_or_not_writable_is_one_line(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    config = write_config(tmp_path, output={"dir": str(tmp_path / "afile")})
    assert one_line_error(capsys, "validate", str(config)).endswith(f"output.dir = '{tmp_path / 'afile'}': is a file, not a folder")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        if not __import__("os").access(locked, __import__("os").W_OK):  # root may write anywhere
            with pytest.raises(ConfigError, match=r"^output.dir = .*is not writable"):
                RunStore.create(tiny_config(output={"dir": str(locked / "runs")}), "cpu")
    finally:
        locked.chmod(0o700)


def npz(tmp_path, **arrays):
    path = tmp_path / "data.npz"
    np.savez(path, **arrays)
    return tiny_config(data={"dataset": "npz", "path": str(path)}).data


def images(count):
    return np.zeros((count, 8, 8), np.float32)


def test_a_huge_label_id_is_refused_before_anything_is_sized_by_it(tmp_path):
    labels = np.array([0, 1] * 9 + [2**40, 1])
    with pytest.raises(DataError, match=r"y holds class id 1099511627776; ids must be 0..num_classes-1"):
        load_dataset(npz(tmp_path, x=images(20), y=labels), seed=0)


def test_an_empty_test_split_is_refused_not_silently_replaced(tmp_path):
    empty = npz(tmp_path, x_train=images(20), y_train=np.arange(20) % 2, x_test=images(0), y_test=np.zeros(0, int))
    with pytest.raises(DataError, match=r"x_test is empty"):
        load_dataset(empty, seed=0)


def test_a_single_image_takes_a_separate_test_split_or_says_what_the_split_needs(tmp_path):
    with pytest.raises(DataError, match=r"cannot split 1 samples .* \(it needs at least 5\)"):
        load_dataset(npz(tmp_path, x=images(1), y=np.array([0])), seed=0)
    data = load_dataset(npz(tmp_path, x=images(1), y=np.array([0]), x_test=images(3), y_test=np.array([0, 1, 0])), seed=0)
    assert len(data.x_train) == 1 and len(data.x_test) == 3


def test_a_yaml_alias_bomb_is_bounded_and_one_line(tmp_path, capsys):
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for level in "bcdefgh":
        previous = chr(ord(level) - 1)
        lines.append(f"{level}: &{level} [" + ",".join([f"*{previous}"] * 9) + "]")
    lines.append("name: *h")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    assert "expands to more than 100,000 values" in one_line_error(capsys, "validate", str(path))


def test_a_failed_start_leaves_no_run_directory(tmp_path, capsys):
    config = write_config(
        tmp_path, data={"dataset": "npz", "path": str(tmp_path / "data.npz")}, output={"dir": str(tmp_path / "runs")}
    )
    np.savez(tmp_path / "data.npz", x=images(1), y=np.array([0]))
    assert "cannot split 1 samples" in one_line_error(capsys, "run", str(config), "--quiet")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_lpips_required_without_the_weights_refuses_to_start_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))
    monkeypatch.delenv("FEDSIM_LPIPS_WEIGHTS", raising=False)
    config = write_config(
        tmp_path, adversary={"attacks": ["dlg"], "lpips": "required"}, output={"dir": str(tmp_path / "runs")}
    )
    assert "adversary.lpips = 'required': no ImageNet AlexNet weights" in one_line_error(capsys, "run", str(config), "--quiet")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
