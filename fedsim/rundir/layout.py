"""Where everything lies in a run directory and a sweep directory: each file and folder is named here once.

    RUN_DIR/                       output.dir/<name>-<YYYYmmdd-HHMMSS> unless output.run_name names it
      run.lock                     flock'ed by the one process writing the run, for its whole life; names it
      config.yaml                  the resolved config (``fedsim run --resume`` reads it)
      fingerprint.json             that config's text and hash, and the fedsim version that started the run
      environment.json             versions, device, command; one entry more per resumed session
      metrics.jsonl                one row per event (fit, eval, attack, ...), appended as it happens
      commits.jsonl                one line per committed round: its checkpoint's sha256 and the length and
                                   sha256 of metrics.jsonl as it stood then (``--resume`` checks both)
      summary.json                 written when the run ends
      partitions.json              which samples each client holds
      client_errors.log            the tracebacks behind failed client replies
      checkpoints/round_NNNN.pt    the global model; its presence commits round NNNN (with its line in commits.jsonl)
      reconstructions/             round_NNNN_<target>_<attack>.png (originals over reconstructions)
                                   and ..._trajectory.png, when ``adversary.save_images``
      ground_truth/round_NNNN/client_NNNN.json   the samples a client trained on (read by scoring only)
      adversary/observed_round_NNNN.pt           the attack backlog: what the tap saw, until it is scored
      clients/<partition>/privacy.json           a client's DP-SGD ledger (and privacy.json.lock beside it)
      report/                      ``fedsim report``: report.html, report.md, the CSV tables and figures,
                                   and for a run its own utility.png, summary.md and rounds.csv

    SWEEP_DIR/                     output.dir/<name>-sweep-<YYYYmmdd-HHMMSS> unless --out names it
      sweep.yaml                   the base config and its grid (``fedsim sweep --resume`` re-reads it)
      sweep.json                   the manifest: every point, its run directory and status
      sweep.lock                   flock'ed by the one process running the sweep, for its whole life; names it
      <point>/                     one run directory per point
      report/                      as above, over every point

Clients read this module (the client state, the ground truth, the error log), so it imports nothing of the
project: it is part of the floor every layer stands on.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

TIMESTAMP_FORMAT = "%Y%m%d-%H%M%S"


def timestamped_run_dir(name: str) -> str:
    """A new run directory's name when none is given: ``<name>-<YYYYmmdd-HHMMSS>`` (now)."""
    return f"{name}-{time.strftime(TIMESTAMP_FORMAT)}"


def timestamped_sweep_dir(name: str) -> str:
    """A new sweep directory's name when none is given: ``<name>-sweep-<YYYYmmdd-HHMMSS>`` (now)."""
    return f"{name}-sweep-{time.strftime(TIMESTAMP_FORMAT)}"


# ------------------------------------------------------------------------------------ the run's records
RUN_LOCK_FILE = "run.lock"  # held by the server process that writes the run (fedsim.rundir.lock); never by clients
CONFIG_FILE = "config.yaml"
FINGERPRINT_FILE = "fingerprint.json"  # the resolved config and fedsim version a run started with
ENVIRONMENT_FILE = "environment.json"
METRICS_FILE = "metrics.jsonl"
COMMITS_FILE = "commits.jsonl"  # the checksums of each committed round's checkpoint and rows (fedsim.rundir.commits)
SUMMARY_FILE = "summary.json"
PARTITIONS_FILE = "partitions.json"
CLIENT_ERROR_LOG = "client_errors.log"

# ---------------------------------------------------------------------------------------- checkpoints
CHECKPOINT_DIR = "checkpoints"
CHECKPOINT_GLOB = "round_*.pt"
CHECKPOINT_PATTERN = re.compile(r"round_(\d{4,})\.pt$")  # group 1: the round


def checkpoint_file(server_round: int) -> str:
    return f"round_{server_round:04d}.pt"


# ------------------------------------------------------------------------------------ reconstructions
RECONSTRUCTIONS_DIR = "reconstructions"


def reconstruction_stem(server_round: int, target: str, attack: str) -> str:
    """``round_0001_client-0_dlg``: a round's result of one attack on one target (the target made file-safe)."""
    return f"round_{server_round:04d}_{re.sub(r'[^A-Za-z0-9-]', '-', target)}_{attack}"


def grid_file(server_round: int, target: str, attack: str) -> str:
    """The originals-over-reconstructions grid (``round_0001_client-0_dlg.png``)."""
    return f"{reconstruction_stem(server_round, target, attack)}.png"


def trajectory_file(server_round: int, target: str, attack: str) -> str:
    """The attack's trajectory plot (``round_0001_client-0_dlg_trajectory.png``)."""
    return f"{reconstruction_stem(server_round, target, attack)}_trajectory.png"


# ---------------------------------------------------------------------------------------- ground truth
GROUND_TRUTH_DIR = "ground_truth"
GROUND_TRUTH_CLIENT_GLOB = "client_*.json"


def ground_truth_round_dir(server_round: int) -> str:
    return f"round_{server_round:04d}"


def ground_truth_file(client: int) -> str:
    return f"client_{client:04d}.json"


# ------------------------------------------------------------------------------------- attack backlog
BACKLOG_DIR = "adversary"
BACKLOG_PATTERN = re.compile(r"observed_round_(\d+)\.pt$")  # group 1: the round


def backlog_file(server_round: int) -> str:
    return f"observed_round_{server_round:04d}.pt"


# ---------------------------------------------------------------------------------------- client state
# one folder per partition: what a client keeps beyond a round and its Ray actor (the DP-SGD privacy ledger)
CLIENT_STATE_DIR = "clients"
PRIVACY_LEDGER_FILE = "privacy.json"
PRIVACY_LEDGER_LOCK = PRIVACY_LEDGER_FILE + ".lock"  # flock'ed while the ledger is read and rewritten


def run_dir_of_client_state(state_dir: Path) -> Path | None:
    """The run directory that holds a client's state folder ``RUN_DIR/clients/<partition>``; None for a folder
    laid out otherwise (a client state kept outside any run)."""
    state_dir = Path(state_dir)
    return state_dir.parent.parent if state_dir.parent.name == CLIENT_STATE_DIR else None


# ---------------------------------------------------------------------------------------------- report
REPORT_DIR = "report"
REPORT_HTML = "report.html"
REPORT_MARKDOWN = "report.md"
RUNS_TABLE = "runs.csv"
UTILITY_ROUNDS_TABLE = "utility_rounds.csv"
ATTACKS_TABLE = "attacks.csv"
RECOVERED_TEXT_TABLE = "recovered_text.csv"  # a text attack's originals beside what it recovered
LEAKAGE_ROUNDS_TABLE = "leakage_rounds.csv"
FRONTIER_TABLE = "frontier.csv"
UTILITY_ROUNDS_FIGURE = "utility_rounds.png"
LEAKAGE_ROUNDS_FIGURE = "leakage_rounds.png"
FRONTIER_FIGURE = "frontier.png"
DEFENSE_CURVES_TABLE = "defense_curves.csv"
DEFENSE_CURVES_FIGURE = "defense_curves.png"
# a single run's own files beside its full report
RUN_UTILITY_FIGURE = "utility.png"
RUN_SUMMARY = "summary.md"
RUN_ROUNDS_TABLE = "rounds.csv"

# ----------------------------------------------------------------------------------------------- sweep
SWEEP_CONFIG = "sweep.yaml"
SWEEP_MANIFEST = "sweep.json"
SWEEP_LOCK_FILE = "sweep.lock"  # flock'ed by the one process running the sweep (fedsim.rundir.lock), as run.lock
