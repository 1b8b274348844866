"""``fedsim audit`` refuses a bad audit file or ``--set`` before torch and Ray load (of Flower, only its config
helpers, which read the app's run config)."""

from __future__ import annotations

import subprocess
import sys

from flower_apps import QUICKSTART_APP, QUICKSTART_AUDIT
from repository import REPO_ROOT

PROBE = """
import sys
from pathlib import Path
from fedsim.core.errors import ConfigError
from fedsim.engine.app_audit.preflight import preflight
try:
    preflight(Path(sys.argv[1]), Path(sys.argv[2]), [sys.argv[3]], None)
    print("accepted")
except ConfigError as error:
    print("refused:", error)
print("torch loaded" if "torch" in sys.modules else "torch not loaded")
print("ray loaded" if "ray" in sys.modules else "ray not loaded")
"""


def preflight_in_a_fresh_process(assignment: str) -> list[str]:
    command = [sys.executable, "-c", PROBE, str(QUICKSTART_APP), str(QUICKSTART_AUDIT), assignment]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, timeout=120, check=True)
    return result.stdout.splitlines()


def test_a_bad_set_value_is_refused_in_one_line_before_torch_or_ray_load():
    lines = preflight_in_a_fresh_process("adversary.attacks=[{name: dlg, iterations: -1}]")
    assert lines == [
        "refused: adversary.attacks[0].iterations = -1: -1 is less than the minimum of 1",
        "torch not loaded",
        "ray not loaded",
    ]


def test_a_sound_audit_passes_without_loading_torch():
    assert preflight_in_a_fresh_process("adversary.attacks=[dlg]") == [
        "accepted",
        "torch not loaded",
        "ray not loaded",
    ]


def test_fedsim_audit_in_python_refuses_the_same_way_before_torch_loads():
    probe = (
        "import sys, fedsim\n"
        "from fedsim.core.errors import ConfigError\n"
        "try:\n"
        "    fedsim.audit(sys.argv[1], sys.argv[2], ['client.lr=fast'])\n"
        "except ConfigError as error:\n"
        "    print('refused:', error)\n"
        "print('torch loaded' if 'torch' in sys.modules else 'torch not loaded')\n"
    )
    command = [sys.executable, "-c", probe, str(QUICKSTART_APP), str(QUICKSTART_AUDIT)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, timeout=120, check=True)
    assert result.stdout.splitlines() == [
        "refused: client.lr = 'fast': 'fast' is not of type 'number'",
        "torch not loaded",
    ]
