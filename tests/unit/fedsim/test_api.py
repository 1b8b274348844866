"""The Python API: `fedsim.run`, `fedsim.load_run` and `fedsim.Run` are real attributes, `Run.images()` is one
row per reconstructed image with integer client ids, and a config given as a dict or an ExperimentConfig
loads as the command line loads a file."""

import math
import subprocess
import sys

import pytest
from synthetic_runs import _synthetic_run
from tiny_configs import tiny_config, tiny_raw

import fedsim
from fedsim.config import load_config
from fedsim.core.errors import ConfigError
from fedsim.rundir.writer import RunStore


def test_the_public_names_are_real_attributes_that_dir_lists():
    for name in ("run", "Run", "load_run", "load_sweep", "Sweep"):
        assert name in dir(fedsim) and name in vars(fedsim), name  # in the module, not made up by __getattr__
        assert getattr(fedsim, name).__doc__ and ">>> " in getattr(fedsim, name).__doc__, f"{name}: an example"
    assert fedsim.Run is fedsim.rundir.reader.Run and fedsim.load_run is fedsim.rundir.reader.load_run


def test_importing_fedsim_imports_neither_pandas_nor_torch_nor_flower_nor_ray():
    probe = "import sys, fedsim; print(sorted(m for m in ('pandas', 'torch', 'flwr', 'ray') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_images_is_one_row_per_image_with_integer_clients_and_na_for_the_aggregate(tmp_path):
    store = RunStore(_synthetic_run(tmp_path, "run"))
    attack = {"round": 2, "event": "attack", "attack": "ig", "status": "ok", "verdict": "leaks", "floor_ssim": 0.3}
    store.append({**attack, "target": "client:3", "truth_index": [1, 0], "psnr": [None, 21.5], "ssim": [1.0, 0.6]})
    store.append({**attack, "target": "aggregate", "verdict": "at floor", "psnr": [9.0], "ssim": [0.2], "lpips": [0.7]})
    run = fedsim.load_run(store.run_dir)
    images = run.images()
    assert str(images["client"].dtype) == "Int64" and str(images["image"].dtype) == "Int64"
    assert images["psnr"].dtype == float and images["ssim"].dtype == float  # numbers, not per-image lists
    newest = images[images["round"] == 2].reset_index(drop=True)
    assert newest["client"].tolist()[:2] == [3, 3] and newest["client"].isna().tolist() == [False, False, True]
    assert newest["image"].tolist()[:2] == [1, 0]  # the image's index in the client's batch
    assert newest["psnr"].tolist()[:2] == [100.0, 21.5]  # an exact copy at the report's cap
    assert newest.loc[2, ["target", "lpips", "verdict"]].tolist() == ["aggregate", 0.7, "at floor"]
    assert math.isnan(newest.loc[0, "lpips"]) and newest.loc[0, "verdict"] == "leaks"
    # the synthetic run's round-1 rows have means only (an older fedsim): each stands as one image
    older = images[images["round"] == 1]
    assert len(older) == 3 and older["image"].isna().all() and older["verdict"].eq("unknown").all()
    assert older.set_index("target").loc["client:0", "psnr"] == 100.0  # every pair exact, no psnr_mean
    best = images.groupby(["round", "client"])["ssim"].max()  # plain numbers: a max is a number, not a list
    assert best.loc[(2, 3)] == 1.0 and best.loc[(1, 1)] == 0.9
    assert images.loc[images["client"].isna(), "ssim"].max() == pytest.approx(0.45)


def test_metrics_client_ids_are_integers_with_na_on_the_servers_rows(tmp_path):
    run = fedsim.load_run(_synthetic_run(tmp_path, "run"))
    assert str(run.metrics["client"].dtype) == "Int64"
    assert run.events("fit")["client"].tolist() == [0, 1, 0, 1]
    assert run.metrics.loc[run.metrics["event"] == "eval", "client"].isna().all()


def test_a_run_without_attacks_has_no_images(tmp_path):
    store = RunStore.create(tiny_config(output={"dir": str(tmp_path), "run_name": "plain"}), "cpu")
    store.append({"round": 0, "event": "eval", "accuracy": 0.1})
    images = fedsim.load_run(store.run_dir).images()
    assert images.empty and list(images.columns)[:4] == ["round", "target", "client", "attack"]


def test_a_config_as_a_dict_or_a_config_loads_with_overrides_as_a_file_does(tmp_path):
    raw = tiny_raw(name="from-python")
    config = load_config(raw, ["client.lr=0.5", "federation.rounds=3"])
    assert (config.client.lr, config.federation.rounds, config.name) == (0.5, 3, "from-python")
    assert raw["client"]["lr"] == 0.1  # the caller's dict is not changed
    again = load_config(config, ["federation.rounds=4"])
    assert again.federation.rounds == 4 and again.client.lr == 0.5 and config.federation.rounds == 3
    assert load_config(config) == config
    with pytest.raises(ConfigError, match=r"client\.lrr"):
        load_config(raw, ["client.lrr=1"])


def test_run_refuses_a_bad_config_in_one_line_before_anything_runs(tmp_path):
    with pytest.raises(ConfigError, match=r"federation\.rounds") as refused:
        fedsim.run(tiny_raw(output={"dir": str(tmp_path)}), overrides="federation.rounds=0")
    assert "\n" not in str(refused.value) and not any(tmp_path.iterdir())
