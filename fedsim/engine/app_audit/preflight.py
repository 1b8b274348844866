"""What ``fedsim audit`` checks before torch, Flower and Ray load (about a second, not a minute): the app's folder
and ``--run-config`` (``read_app``), the audit file and ``--set`` (``experiment_of``), and the config they make
against the config's shipped JSON Schema (``fedsim.core.schema_check``). Where installed packages register plugins of
their own the schema does not know them, and the full validation alone decides (it runs in any case)."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from fedsim.core.schema_check import check_against_schema
from fedsim.engine.app_audit.app import FlowerApp, read_app
from fedsim.engine.app_audit.audit_file import experiment_of

#: written by ``python -m fedsim.config.schema`` (a test keeps it current)
SCHEMA_FILE = Path(__file__).resolve().parents[2] / "config" / "experiment.schema.json"  # fedsim/config/
PLUGIN_GROUP = "fedsim.plugins"  # fedsim.config.plugins.ENTRY_POINT_GROUP, read here without loading the plugins


def preflight(
    app_dir: Path, config_path: Path | None, overrides: list[str] | None, run_config: str | None
) -> FlowerApp:
    """The app, once everything above is found sound (ConfigError: one line naming what is not)."""
    app = read_app(app_dir, run_config)
    experiment, _ = experiment_of(app, config_path, overrides)  # refuses what an app's privacy audit cannot do
    if not list(metadata.entry_points(group=PLUGIN_GROUP)) and SCHEMA_FILE.is_file():
        check_against_schema(experiment, SCHEMA_FILE)
    return app
