"""The audit config: what the attacker knows of the app, and how the scoring side reads the app's own data.

An audit config is a fedsim config (``model``, ``client``, ``adversary``, ``output``, ``seed``: the attacker's
knowledge and where results go) with an ``app`` section instead of ``data``, ``federation`` and ``strategy``,
which the app itself decides. Any value may be ``run-config:<key>``: the app's run config value of that key
(after ``--run-config``), so the audit follows the app's settings. The result is the ``ExperimentConfig`` the run
directory records, with every reference resolved: reading it back needs neither the audit file nor the run config.
"""

from __future__ import annotations

import logging
from pathlib import Path

from fedsim.config import ExperimentConfig, parse_config
from fedsim.engine.app_audit.app import FlowerApp
from fedsim.engine.app_audit.audit_file import AppSection, experiment_of, nodes_line

logger = logging.getLogger("fedsim")


def audit_config(
    app: FlowerApp, path: Path | None, overrides: list[str] | None = None
) -> tuple[ExperimentConfig, AppSection]:
    """The run's fedsim config and the app section, from the audit file (or ``app`` defaults) and ``--set``."""
    experiment, section = experiment_of(app, path, overrides)
    logger.info(nodes_line(app, section))
    return parse_config(experiment), section
