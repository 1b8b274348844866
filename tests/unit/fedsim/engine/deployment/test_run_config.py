"""The Flower run config: the whole experiment as scalars, declared in pyproject.toml with its defaults."""

from __future__ import annotations

import tomllib

import pytest
from repository import REPO_ROOT
from tiny_configs import tiny_config

from fedsim.config import ConfigError, dump_config, with_absolute_paths
from fedsim.engine.deployment.run_config import DEFAULTS, RunRequest, client_config, from_run_config, to_run_config


def test_the_run_config_carries_the_whole_experiment_as_scalars_and_reads_back_the_same(tmp_path):
    config = tiny_config(adversary={"tap": "mitm", "attacks": [{"name": "dlg", "iterations": 5}]})
    run_config = to_run_config(RunRequest(config=config, run_dir=tmp_path / "run", submitted_by="fedsim run x"))
    assert all(isinstance(value, (str, int)) for value in run_config.values())  # Flower's run config: scalars only
    request = from_run_config(run_config)
    assert dump_config(request.config) == dump_config(with_absolute_paths(config))
    assert request.run_dir == (tmp_path / "run").resolve() and request.resume is None and request.rounds is None
    assert request.submitted_by == "fedsim run x"
    assert client_config(run_config) == (request.config, (tmp_path / "run").resolve())


def test_pyproject_declares_the_app_and_every_run_config_key_with_its_default():
    flwr = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]
    assert flwr["config"] == DEFAULTS  # `flwr run --run-config` may only override keys declared there
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp

    import fedsim.engine.deployment.app as app

    assert flwr["components"] == {
        "serverapp": "fedsim.engine.deployment.app:server_app",
        "clientapp": "fedsim.engine.deployment.app:client_app",
    }
    assert isinstance(app.server_app, ServerApp) and isinstance(app.client_app, ClientApp)


def test_an_empty_run_config_is_every_default_and_bad_ones_are_refused_naming_the_key():
    assert dump_config(from_run_config(DEFAULTS).config) == dump_config(tiny_config().__class__())
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['seed'\]"):
        from_run_config({**DEFAULTS, "seed": 3})
    with pytest.raises(ConfigError, match="'rounds' extends a resumed run"):
        from_run_config({**DEFAULTS, "rounds": 5})
    with pytest.raises(ConfigError, match="'fedsim-config' is not valid YAML"):
        from_run_config({**DEFAULTS, "fedsim-config": "a: [1"})
    with pytest.raises(ConfigError, match=r"federation.num_clients"):
        from_run_config({**DEFAULTS, "fedsim-config": "federation: {num_clients: 0}"})
    with pytest.raises(ConfigError, match="'run-dir' is empty"):
        client_config(DEFAULTS)
