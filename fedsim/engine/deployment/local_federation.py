"""A SuperLink and its SuperNodes on this machine (insecure, free local ports), for trying the deployment engine.

``make deployment-smoke`` and the deployment test use it; docs/how-to/deploy.md gives the same
commands to type by hand. Runtime installation of app dependencies is disabled: the App runs with this
environment's packages, offline.

None of the processes outlives the federation, however it ends. Each runs in a process group of its own (a
terminal's Ctrl-C or ``timeout``'s signal reaches this process alone, which stops the submitter, the SuperNodes
and the SuperLink in turn); every descendant (Flower's SuperExec, ServerApp and ClientApp processes, the
attack workers) is noted while it runs and SIGKILLed if still there after a grace period. On Linux each dies with
its parent too (PR_SET_PDEATHSIG; Flower's own children through launchers put ahead on their PATH), which
covers this process being killed with SIGKILL.

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
from types import FrameType, TracebackType
from typing import Any

from fedsim.core.errors import ConfigError, Interrupted
from fedsim.core.processes import ProcessWatch, die_with_parent, stop_processes
from fedsim.core.stopping import STOP_SIGNALS, exit_status
from fedsim.engine.lifecycle.network import Unreachable, free_port, probe

HOST = "127.0.0.1"
START_TIMEOUT_S = 60.0
STOP_GRACE_S = 5.0  # SIGTERM, then SIGKILL for what is still there after this long
# How often a SuperExec asks its SuperNode or SuperLink for a task to start (Flower's default: 1 s); every message
# waits for it, and on this machine asking costs next to nothing
SUPEREXEC_POLL_INTERVAL_S = 0.1
FLOWER_CHILDREN = ("flower-superexec", "flwr-serverapp", "flwr-clientapp")  # what Flower starts by name, on PATH


def _executable(name: str) -> str:
    beside = Path(sys.executable).parent / name  # this environment's Flower, whatever PATH says
    return str(beside) if beside.is_file() else name


def write_launchers(directory: Path) -> Path:
    """Launchers for the processes Flower starts by name: each has the kernel SIGKILL it once the process that
    started it dies (PR_SET_PDEATHSIG, Linux), then becomes the environment's own command (exec)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in FLOWER_CHILDREN:
        real = _executable(name)
        launcher = directory / name
        launcher.write_text(
            f"#!{sys.executable} -S\n"
            f"# {name}, dying with the process that started it (fedsim's local federation wrote this)\n"
            "import ctypes, os, signal, sys\n"
            "parent = os.getppid()\n"
            "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG\n"
            "if os.getppid() != parent:\n"
            "    os._exit(1)\n"
            f"os.execv({real!r}, [{real!r}, *sys.argv[1:]])\n"
        )
        launcher.chmod(0o755)
    return directory


class LocalFederation:
    """``with LocalFederation(num_nodes) as federation:`` a SuperLink at ``federation.address`` and ``num_nodes``
    SuperNodes holding partitions 0..num_nodes-1; all stopped on exit."""

    def __init__(self, num_nodes: int, workdir: Path | None = None) -> None:
        self.num_nodes = num_nodes
        self._scratch: tempfile.TemporaryDirectory[str] | None = None
        if workdir is None:
            self._scratch = tempfile.TemporaryDirectory(prefix="fedsim-federation-")
            workdir = Path(self._scratch.name)
        self.workdir = Path(workdir)
        self.port = free_port(HOST)
        self.address = f"{HOST}:{self.port}"
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._launched: set[int] = set()
        # everything under the processes started here (Flower's children included), noted while it runs; nothing
        # else this process may have started
        self.watch = ProcessWatch(keep=self._launched.__contains__)

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes.values()]

    def environment(self, home: Path | None = None) -> dict[str, str]:
        """The environment of the processes started here: this environment's Flower and fedsim first on PATH
        (the ServerApp and ClientApp processes Flower starts must find them), behind the launchers on Linux."""
        entries = [str(Path(sys.executable).parent), os.environ.get("PATH", "")]
        if sys.platform.startswith("linux"):
            entries.insert(0, str(write_launchers(self.workdir / "bin")))
        environment = {
            **os.environ,
            "PATH": os.pathsep.join(entries),
            "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": str(SUPEREXEC_POLL_INTERVAL_S),
        }
        if home is not None:
            environment["FLWR_HOME"] = str(home)
        return environment

    def launch(self, name: str, command: list[str], **options: Any) -> subprocess.Popen[bytes]:
        """Start ``command`` as one of the federation's processes: in a process group of its own, dying with this
        process, stopped with the federation."""
        process = subprocess.Popen(command, process_group=0, preexec_fn=die_with_parent, **options)
        self._launched.add(process.pid)
        self.processes[name] = process
        return process

    def _start(self, name: str, command: list[str]) -> None:
        home = self.workdir / name
        home.mkdir(parents=True, exist_ok=True)
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 (kept open for the process's lifetime)
        self.launch(name, command, stdout=log, stderr=subprocess.STDOUT, env=self.environment(home))
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
        self.watch.start()
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

    def stop(self, grace: float = STOP_GRACE_S) -> None:
        """SIGTERM every process started here (the last started first: SuperNodes before the SuperLink), then
        every descendant noted (Flower's children, the attack workers); SIGKILL what is still there after
        ``grace`` seconds."""
        descendants = self.watch.note()  # those started since the last look, too
        for process in reversed(list(self.processes.values())):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for process in self.processes.values():
            try:
                process.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        stop_processes(descendants | self.watch.note(), grace=max(deadline - time.monotonic(), 0.5))
        self.watch.close()

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
    try:
        config = load_config(args.config, args.set)  # one line on a bad config, before anything starts
    except (ConfigError, FileNotFoundError) as error:
        print(f"fedsim: error: {error}", file=sys.stderr)
        return 2
    previous = {signum: signal.signal(signum, _stop_once) for signum in STOP_SIGNALS}
    try:
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
            submitter = federation.launch("submitter", command, env=federation.environment())
            try:
                return submitter.wait()
            except Interrupted:
                # the SuperLink goes next, its run with it: nothing to ask of it (its `flwr` children die with it)
                submitter.kill()
                submitter.wait()
                raise
    except Interrupted as interrupted:
        print(
            f"fedsim: {interrupted}; the local SuperLink, its SuperNodes and every process they started were stopped",
            file=sys.stderr,
        )
        return exit_status(interrupted.signum or signal.SIGINT)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _stop_once(signum: int, frame: FrameType | None) -> None:
    """The first SIGINT or SIGTERM ends the wait and starts the teardown; further ones are ignored (it is
    bounded: SIGKILL after the grace periods), so that a second Ctrl-C cannot cut it short and leave processes."""
    for stop_signal in STOP_SIGNALS:
        signal.signal(stop_signal, signal.SIG_IGN)
    raise Interrupted(f"stopped by {signal.Signals(signum).name}", signum)


if __name__ == "__main__":
    sys.exit(main())
