"""A Flower app's folder, read as ``flwr run`` reads it: its components, its run config and its nodes."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedsim.core.errors import ConfigError
from fedsim.core.importing import import_object, on_path

#: the nodes of a simulation when neither the app's default federation nor the audit config says: Flower's own
#: (what `flwr run` gets from the local SuperLink of an app without a [tool.flwr.federations] table)
DEFAULT_SUPERNODES = 2
FEDERATION_NODES = "its default federation's options.num-supernodes"
FLOWER_DEFAULT_NODES = "Flower's default for an app without a [tool.flwr.federations] table"


@dataclass(frozen=True)
class FlowerApp:
    """What fedsim reads of a Flower app: never its code's behaviour, only where its parts are and their settings."""

    path: Path
    name: str
    server_app: str  # `module:attribute` of its ServerApp
    client_app: str  # `module:attribute` of its ClientApp
    run_config: dict[str, Any]  # the app's [tool.flwr.app.config] with --run-config applied, flattened
    overrides: dict[str, Any]  # --run-config alone, as Flower's Run carries it
    num_supernodes: int  # its default federation's options.num-supernodes, else Flower's default
    nodes_from: str = FLOWER_DEFAULT_NODES  # which of the two


def read_app(app_dir: Path, run_config: str | None = None) -> FlowerApp:
    """The app in ``app_dir``; ``run_config``: `flwr run`'s --run-config text ('key=value key2="text"')."""
    from flwr.common.config import flatten_dict, fuse_dicts, parse_config_args

    path = Path(app_dir).expanduser().resolve()
    pyproject = path / "pyproject.toml"
    if not pyproject.is_file():
        raise ConfigError(f"APP_DIR = '{app_dir}': no pyproject.toml there; a Flower app's folder has one")
    try:
        project = tomllib.loads(pyproject.read_text())
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"APP_DIR = '{app_dir}': pyproject.toml is not valid TOML ({error})") from None
    flwr = project.get("tool", {}).get("flwr", {})
    components = flwr.get("app", {}).get("components", {})
    missing = [key for key in ("serverapp", "clientapp") if not isinstance(components.get(key), str)]
    if missing:
        raise ConfigError(
            f"APP_DIR = '{app_dir}': pyproject.toml has no [tool.flwr.app.components] {' and '.join(missing)}; "
            f"fedsim audits Flower apps (serverapp = 'module:app', clientapp = 'module:app')"
        )
    try:
        overrides = parse_config_args([run_config]) if run_config else {}
        fused = fuse_dicts(flatten_dict(flwr.get("app", {}).get("config", {})), overrides)
    except ValueError as error:
        raise ConfigError(f"--run-config = {run_config!r}: {error}") from None
    return FlowerApp(
        path=path,
        name=str(project.get("project", {}).get("name", path.name)),
        server_app=components["serverapp"],
        client_app=components["clientapp"],
        run_config=fused,
        overrides=overrides,
        **_default_supernodes(flwr),
    )


def _default_supernodes(flwr: dict[str, Any]) -> dict[str, Any]:
    federations = flwr.get("federations", {})
    default = federations.get(federations.get("default", ""), {})
    count = default.get("options", {}).get("num-supernodes") if isinstance(default, dict) else None
    if isinstance(count, int) and count >= 1:
        return {"num_supernodes": count, "nodes_from": FEDERATION_NODES}
    return {"num_supernodes": flower_default_supernodes(), "nodes_from": FLOWER_DEFAULT_NODES}


def flower_default_supernodes() -> int:
    """The nodes Flower simulates for an app that names none (its local SuperLink's default simulation config)."""
    from fedsim.core.flower_private import default_supernodes

    return default_supernodes() or DEFAULT_SUPERNODES  # a Flower without one: the value it had when this was written


def load_components(app: FlowerApp) -> tuple[Any, Any]:
    """The app's ServerApp and ClientApp objects, imported from its folder (which goes first on ``sys.path``)."""
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp

    on_path(app.path)
    server = import_object(app.server_app, app.path, "serverapp", ConfigError)
    client = import_object(app.client_app, app.path, "clientapp", ConfigError)
    for field, value, kind in (("serverapp", server, ServerApp), ("clientapp", client, ClientApp)):
        if not isinstance(value, kind):
            target = app.server_app if field == "serverapp" else app.client_app
            raise ConfigError(
                f"{field} = {target!r}: is {type(value).__name__}, not a Flower {kind.__name__}; fedsim audits "
                f"Flower apps of the Message API or the legacy NumPyClient/Strategy API"
            )
    return server, client
