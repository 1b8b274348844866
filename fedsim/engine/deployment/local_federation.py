"""A SuperLink and its SuperNodes on this machine (insecure, free local ports), for trying the deployment engine.

``make deployment-smoke`` and the deployment test use it; docs/how-to/deploy.md gives the same
commands to type by hand. Every process is started here and stopped here, by its own pid (Flower's own
children, SuperExec and the ServerApp/ClientApp processes, watch their parent's pid and exit with it).
Runtime installation of app dependencies is disabled: the App runs with this environment's packages, offline.

    # start, run, stop; prints the run dir
    python -m fedsim.engine.deployment.local_federation CONFIG [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from fedsim.engine.lifecycle.network import Unreachable, free_port, probe

HOST = "127.0.0.1"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0


def _executable(name: str) -> str:
    beside = Path(sys.executable).parent / name  # this environment's Flower, whatever PATH says
    return str(beside) if beside.is_file() else name


class LocalFederation:
    """``with LocalFederation(num_nodes) as federation:`` a SuperLink at ``federation.address`` and ``num_nodes``
    SuperNodes holding partitions 0..num_nodes-1; all stopped on exit."""

    def __init__(self, num_nodes: int, workdir: Path | None = None) -> None:
        self.num_nodes = num_nodes
        self._scratch = None if workdir is not None else tempfile.TemporaryDirectory(prefix="fedsim-federation-")
        self.workdir = Path(workdir if workdir is not None else self._scratch.name)  # type: ignore[union-attr]
        self.port = free_port(HOST)
        self.address = f"{HOST}:{self.port}"
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes.values()]

    def _environment(self, home: Path) -> dict[str, str]:
        # the ServerApp and ClientApp processes Flower spawns must find this environment's flwr and fedsim
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        return {**os.environ, "FLWR_HOME": str(home), "PATH": path}

    def _start(self, name: str, command: list[str]) -> None:
        home = self.workdir / name
        home.mkdir(parents=True, exist_ok=True)
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 (kept open for the process's lifetime)
        self.processes[name] = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=self._environment(home)
        )
        log.close()  # the child holds its own descriptor

    def superlink_command(self) -> list[str]:
        return [
            _executable("flower-superlink"),
            "--insecure",
            "--host",
            HOST,
            "--port",
            str(self.port),
            "--disable-runtime-dependency-installation",
        ]

    def supernode_command(self, partition: int, port: int) -> list[str]:
        return [
            _executable("flower-supernode"),
            "--insecure",
            "--superlink",
            self.address,
            "--host",
            HOST,
            "--port",
            str(port),
            "--node-config",
            f"partition-id={partition} num-partitions={self.num_nodes}",
        ]

    def start(self) -> LocalFederation:
        self._start("superlink", self.superlink_command())
        self._wait_for(self.address, "superlink")
        for partition in range(self.num_nodes):
            self._start(f"supernode-{partition}", self.supernode_command(partition, free_port(HOST)))
        return self

    def _wait_for(self, address: str, name: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.processes[name].poll() is not None:
                raise RuntimeError(f"{name} exited at start: see {self.workdir / (name + '.log')}")
            try:
                probe(address, name)
                return
            except Unreachable:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not listen on {address} in {START_TIMEOUT_S:.0f}s") from None
                time.sleep(0.2)

    def stop(self) -> None:
        """SIGTERM every process started here (SuperNodes first), then SIGKILL what is still alive."""
        for process in reversed(list(self.processes.values())):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for process in self.processes.values():
            try:
                process.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def stop_node(self, partition: int) -> None:
        """Kill one SuperNode (a node that drops out)."""
        process = self.processes[f"supernode-{partition}"]
        process.kill()
        process.wait()

    def __enter__(self) -> LocalFederation:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()
        if self._scratch is not None:
            self._scratch.cleanup()


def main(argv: list[str] | None = None) -> int:
    """Start a local SuperLink and one SuperNode per client of CONFIG, run CONFIG through the deployment engine,
    stop everything; the run directory is the last line (as `fedsim run` prints it)."""
    from fedsim.config import load_config

    parser = argparse.ArgumentParser(
        prog="python -m fedsim.engine.deployment.local_federation", description=main.__doc__
    )
    parser.add_argument("config", type=Path)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    config = load_config(args.config, args.set)  # one line on a bad config, before anything starts
    with LocalFederation(config.federation.num_clients) as federation:
        print(
            f"SuperLink at {federation.address}, {federation.num_nodes} SuperNodes (pids {federation.pids})",
            file=sys.stderr,
        )
        command = [
            sys.executable,
            "-m",
            "fedsim.cli",
            "run",
            str(args.config),
            "--quiet",
            *[f"--set={item}" for item in args.set],
            "--engine",
            "deployment",
            "--superlink",
            federation.address,
            "--insecure",
        ]
        print("+ " + shlex.join(command), file=sys.stderr)
        done = subprocess.run(command, check=False)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
