"""A Flower app's folder as fedsim reads it: components, run config (with --run-config), nodes, and the refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
from flower_apps import QUICKSTART_APP

from fedsim.core.errors import ConfigError
from fedsim.engine.app_audit.app import DEFAULT_SUPERNODES, load_components, read_app


def write_app(folder: Path, pyproject: str, code: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(pyproject)
    if code:
        (folder / "someapp.py").write_text(code)
    return folder


COMPONENTS = '[tool.flwr.app.components]\nserverapp = "someapp:server"\nclientapp = "someapp:client"\n'


def test_the_example_app_is_read_as_flwr_run_reads_it():
    app = read_app(QUICKSTART_APP, 'batch-size=4 data-files="/tmp/x.parquet"')
    assert (app.server_app, app.client_app) == ("pytorchexample.server_app:app", "pytorchexample.client_app:app")
    assert app.run_config["batch-size"] == 4 and app.run_config["data-files"] == "/tmp/x.parquet"
    assert app.run_config["learning-rate"] == 0.1  # the app's default, untouched
    assert app.overrides == {"batch-size": 4, "data-files": "/tmp/x.parquet"}
    assert app.num_supernodes == 10  # its default federation's options.num-supernodes


def test_a_run_config_key_the_app_does_not_have_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"^--run-config = 'batchsize=4': Key 'batchsize' is not present"):
        read_app(QUICKSTART_APP, "batchsize=4")


def test_a_folder_without_pyproject_or_components_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"no pyproject.toml there; a Flower app's folder has one"):
        read_app(tmp_path)
    write_app(tmp_path, '[project]\nname = "x"\n[tool.flwr.app.components]\nserverapp = "a:b"\n')
    with pytest.raises(ConfigError, match=r"has no \[tool.flwr.app.components\] clientapp; fedsim audits Flower apps"):
        read_app(tmp_path)


def test_without_a_default_federation_the_simulation_has_flowers_default_nodes(tmp_path):
    app = read_app(write_app(tmp_path, COMPONENTS))
    assert app.num_supernodes == DEFAULT_SUPERNODES == 2  # what `flwr run` simulates for such an app
    assert app.nodes_from == "Flower's default for an app without a [tool.flwr.federations] table"


def test_components_that_are_not_flower_apps_are_refused_naming_the_component(tmp_path):
    code = "from flwr.serverapp import ServerApp\nserver = ServerApp()\nclient = object()\n"
    app = read_app(write_app(tmp_path / "notflower", COMPONENTS, code))
    with pytest.raises(ConfigError, match=r"^clientapp = 'someapp:client': is object, not a Flower ClientApp"):
        load_components(app)


def test_a_component_that_cannot_be_imported_is_one_line(tmp_path):
    folder = write_app(tmp_path / "broken", COMPONENTS.replace("someapp", "brokenapp"))
    (folder / "brokenapp.py").write_text("import not_a_module_anywhere\n")
    app = read_app(folder)
    with pytest.raises(ConfigError, match=r"^serverapp = 'brokenapp:server': cannot import 'brokenapp' from .*"):
        load_components(app)
