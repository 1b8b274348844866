"""The deployment engine, submitting side: ``fedsim run CONFIG --engine deployment --superlink HOST:PORT``.

The experiment goes to a running SuperLink as a Flower run, through Flower's own CLI (``flwr run``, then
``flwr list`` until it finishes, ``flwr stop`` on Ctrl-C): fedsim's Flower App (``fedsim.engine.deployment.app``) is
built from this checkout into a FAB, the experiment travels in its run config (``fedsim.engine.deployment.run_config``),
and the ServerApp, on the SuperLink's machine, writes the run directory there, at the absolute path chosen
here. ``flwr run`` names a SuperLink by a connection in a Flower configuration file, so this writes one
(for this address only) into a temporary ``FLWR_HOME``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import tomli_w

from fedsim.config import ExperimentConfig, load_config
from fedsim.core.errors import ConfigError, Interrupted, TrainingFailed
from fedsim.core.processes import die_with_parent
from fedsim.core.stopping import in_main_thread
from fedsim.engine.deployment.run_config import RunRequest, to_run_config
from fedsim.engine.lifecycle.network import probe
from fedsim.rundir.layout import CONFIG_FILE, timestamped_run_dir

logger = logging.getLogger("fedsim")

CONNECTION = "fedsim"  # the connection's name in the temporary Flower configuration
POLL_INTERVAL_S = 0.2  # whether `flwr log --stream` ended (a local process: polling it costs nothing)
EXCEPTION_LINE = re.compile(r"^\s*[\w.]*(Error|Failed|Exception|Interrupt)\b[^:]*: ")  # a traceback's last line
FLWR_TIMEOUT_S = 120.0  # one `flwr` CLI call (it starts a Python process and talks HTTP)
STOP_TIMEOUT_S = 8.0  # `flwr stop` after Ctrl-C: an interrupted submitter does not wait on a SuperLink for long


class DeploymentError(RuntimeError):
    """The SuperLink refused or failed the run (one line; the run's own log says more: `flwr log RUN_ID`)."""


@dataclass(frozen=True)
class SuperLink:
    """A SuperLink's Control API, as ``flwr run`` reaches it."""

    address: str  # HOST:PORT
    insecure: bool = False  # plain HTTP (a SuperLink started with --insecure)
    root_certificates: Path | None = None  # PEM of the CA that signed the SuperLink's certificate (TLS)

    def connection(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"address": self.address}
        if self.insecure:
            entry["insecure"] = True
        elif self.root_certificates is not None:
            entry["root-certificates"] = str(self.root_certificates.resolve())
        return {"superlink": {"default": CONNECTION, CONNECTION: entry}}


def app_directory() -> Path:
    """The checkout whose ``pyproject.toml`` declares fedsim's Flower App (``[tool.flwr.app]``)."""
    root = Path(__file__).resolve().parents[3]  # <root>/fedsim/engine/deployment/submit.py
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file() or "[tool.flwr.app]" not in pyproject.read_text():
        raise ConfigError(
            f"--engine deployment builds fedsim's Flower App from its source checkout, but {root} has no "
            "pyproject.toml with [tool.flwr.app]; install fedsim from a checkout (pip install -e .)"
        )
    return root


def planned_run_dir(config: ExperimentConfig) -> Path:
    """Where the ServerApp will write the run (absolute; on the SuperLink's machine): ``output.dir/run_name``,
    or ``output.dir/<name>-<timestamp>`` (``-2``, ``-3`` when that exists here)."""
    parent = Path(config.output.dir).expanduser().resolve()
    if config.output.run_name:
        return parent / str(config.output.run_name)
    stem = timestamped_run_dir(config.name)
    candidate, attempt = parent / stem, 1
    while candidate.exists():
        attempt += 1
        candidate = parent / f"{stem}-{attempt}"
    return candidate


def resume_request(run_dir: Path, rounds: int | None, submitted_by: str) -> RunRequest:
    """A resumed run carries its own config.yaml (extended to ``rounds``) for the ClientApps."""
    config_path = run_dir / CONFIG_FILE
    if not config_path.is_file():
        raise FileNotFoundError(
            f"--resume {run_dir}: no {CONFIG_FILE} here; the deployment engine reads the run's config "
            "on this machine and sends it to the SuperNodes (copy the run directory here)"
        )
    config = load_config(config_path)
    if rounds is not None:
        config.federation.rounds = max(rounds, config.federation.rounds)  # the ServerApp refuses a cut
    return RunRequest(config=config, resume=run_dir, rounds=rounds, submitted_by=submitted_by)


class FlowerCli:
    """``flwr`` commands against one SuperLink, with a Flower configuration of their own."""

    def __init__(self, superlink: SuperLink, home: Path) -> None:
        self.superlink = superlink
        self.home = home
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(tomli_w.dumps(superlink.connection()))
        self.executable = _flwr_executable()

    def __call__(self, *arguments: str, timeout: float = FLWR_TIMEOUT_S) -> str:
        command = [self.executable, *arguments]
        env = {**os.environ, "FLWR_HOME": str(self.home)}
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                env=env,
                timeout=timeout,
                check=False,
                preexec_fn=die_with_parent,
            )
        except subprocess.TimeoutExpired:
            raise DeploymentError(
                f"`{shlex.join(command[:2])}` got no answer from the SuperLink at "
                f"{self.superlink.address} in {timeout:.0f}s"
            ) from None
        if done.returncode != 0:
            raise DeploymentError(
                f"`flwr {arguments[0]}` failed against the SuperLink at {self.superlink.address}: "
                f"{_last_line(done.stderr or done.stdout)}"
            )
        return done.stdout

    def popen(self, *arguments: str) -> subprocess.Popen[bytes]:
        """A long-running ``flwr`` command whose output goes to this process's stderr."""
        environment = {**os.environ, "FLWR_HOME": str(self.home)}
        return subprocess.Popen(
            [self.executable, *arguments],
            stdout=sys.stderr,
            stderr=sys.stderr,
            env=environment,
            preexec_fn=die_with_parent,
        )

    def json(self, *arguments: str) -> dict[str, Any]:
        output = self(*arguments, "--format", "json")
        try:
            return json.loads(output[output.index("{") :])
        except ValueError:
            raise DeploymentError(
                f"`flwr {arguments[0]}` answered something other than JSON: {_last_line(output)}"
            ) from None


def _flwr_executable() -> str:
    beside = Path(sys.executable).parent / "flwr"  # the flwr of this environment, whatever PATH says
    return str(beside) if beside.is_file() else "flwr"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip().strip("│╭╰─")]
    return lines[-1].strip("│ ") if lines else "(no output)"


def submit(request: RunRequest, superlink: SuperLink) -> Path:
    """Submit ``request`` to the SuperLink, wait for the run to finish (its log streamed to stderr) and return
    its run directory (a path on the SuperLink's machine)."""
    probe(
        superlink.address,
        "--superlink",
        "start a SuperLink (flower-superlink, see docs/how-to/deploy.md) or pass the address of its Control API",
    )
    run_dir = request.resume if request.resume is not None else request.run_dir
    assert run_dir is not None, "the submitter fixes the run directory"
    app = app_directory()
    with tempfile.TemporaryDirectory(prefix="fedsim-flwr-") as scratch:
        cli = FlowerCli(superlink, Path(scratch) / "flwr-home")
        run_config = Path(scratch) / "run-config.toml"
        run_config.write_text(tomli_w.dumps(to_run_config(request)))
        started = cli.json("run", str(app), CONNECTION, "--run-config", str(run_config))
        run_id = started.get("run-id")
        if not started.get("success") or run_id is None:
            raise DeploymentError(f"the SuperLink at {superlink.address} did not start the run: {started}")
        logger.info(
            "submitted as Flower run %s to the SuperLink at %s; run directory (on its machine): %s",
            run_id,
            superlink.address,
            run_dir,
        )
        try:
            with sigterm_as_interrupt():  # a stopped submitter stops its Flower run, whichever signal stopped it
                status = wait_for_run(cli, str(run_id))
        except KeyboardInterrupt:
            logger.warning("stopping Flower run %s", run_id)
            try:
                cli("stop", str(run_id), CONNECTION, timeout=STOP_TIMEOUT_S)
            except DeploymentError as error:  # the interrupt is what the user sees; this says what was left
                logger.warning("Flower run %s may still be running: %s", run_id, error)
            raise
        if status != "finished:completed":
            raise run_failure(cli, str(run_id), status, superlink)
    return run_dir


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While inside (main thread only): SIGTERM interrupts as Ctrl-C does (``Interrupted``, with its signal)."""
    if not in_main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(f"stopped by {signal.Signals(signum).name}", signum)

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def wait_for_run(cli: FlowerCli, run_id: str) -> str:
    """Stream the run's log (the ServerApp's lines: fedsim's progress, Flower's own) to stderr until the run
    finishes (``flwr log --stream`` returns then), and return its final status (``finished:completed``, ...)."""
    stream = cli.popen("log", run_id, CONNECTION, "--stream")
    try:
        while stream.poll() is None:
            time.sleep(POLL_INTERVAL_S)
    finally:
        if stream.poll() is None:
            stream.terminate()
            stream.wait()
    while True:  # the stream also ends when the connection drops: the status says whether the run is over
        runs = cli.json("list", CONNECTION, "--run-id", run_id).get("runs") or [{}]
        status = str(runs[0].get("status", "unknown"))
        if status.startswith("finished"):
            return status
        time.sleep(POLL_INTERVAL_S)


def run_failure(cli: FlowerCli, run_id: str, status: str, superlink: SuperLink) -> Exception:
    """The error of a run that did not complete: its ServerApp's last error line (from `flwr log`)."""
    try:
        log = cli("log", run_id, CONNECTION, "--show", timeout=30)
    except DeploymentError:
        log = ""
    errors = [line.strip() for line in log.splitlines() if EXCEPTION_LINE.match(line)]
    reason = errors[-1] if errors else f"see `flwr log {run_id}` against {superlink.address}"
    if "TrainingFailed" in reason:
        return TrainingFailed(reason.split("TrainingFailed:", 1)[-1].strip())
    return DeploymentError(f"Flower run {run_id} on the SuperLink at {superlink.address} ended {status}: {reason}")
