"""One writer per run directory: the process that writes a run holds ``RUN_DIR/run.lock`` for the run's whole life.

The lock is the OS's advisory ``flock``: the kernel releases it when its holder exits, however it exits (``kill -9``
included), so a dead holder never leaves a stale lock behind and the next run simply takes it. The file itself
records the holder (pid, host, since when) for the message that refuses a second writer; it stays in the directory
after the run (removing it would let two processes lock two different files of one name).

Only the server side takes it (``RunStore.create`` and ``RunStore.open_for_resume``): readers (reports, sweeps
deciding what a point needs) and the clients, which write their ground truth and state into the directory while the
server holds it, never do. The descriptor is close-on-exec and ``spawn``ed processes (Ray, the attack workers) do
not inherit it, so the holder is the one process that writes the run. ``flock`` locks an open file description, so
a second ``open`` in the same process is refused too.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

from fedsim.core.errors import ConfigError
from fedsim.rundir.layout import RUN_LOCK_FILE

ONE_WRITER = "one process writes a run at a time"


class RunDirectoryBusy(FileExistsError):
    """Another process (or another open store in this one) is writing the run directory; one line, naming it."""


class RunLock:
    """The held lock of one run directory; ``release`` (or the holder's exit) frees it."""

    def __init__(self, path: Path, descriptor: int) -> None:
        self.path = path
        self._descriptor: int | None = descriptor

    @classmethod
    def acquire(cls, run_dir: Path, what: str, *, name: str = RUN_LOCK_FILE, rule: str = ONE_WRITER) -> RunLock:
        """Lock ``run_dir`` for this process or refuse in one line starting with ``what`` (e.g. ``--resume RUN``).

        ``name``: the lock file (``sweep.lock`` for a sweep directory); ``rule``: what the refusal says is allowed."""
        path = Path(run_dir) / name
        try:  # O_NOFOLLOW: a symlink planted as run.lock must not make us create or truncate a file elsewhere
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as error:
            raise ConfigError(f"{what}: cannot open the run's lock file '{path}' ({error.strerror})") from None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            raise RunDirectoryBusy(
                f"{what}: '{run_dir}' is being written by {describe_holder(path)}; {rule}: wait for it to end or stop "
                "it, then try again"
            ) from None
        except OSError as error:  # a file system without locks (some network mounts)
            os.close(descriptor)
            raise ConfigError(
                f"{what}: cannot lock '{path}' ({error.strerror}); put output.dir on a file system that supports flock"
            ) from None
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        }
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, (json.dumps(record) + "\n").encode(), 0)
        return cls(path, descriptor)

    def release(self) -> None:
        """Free the directory (closing the descriptor drops the flock); releasing twice is harmless."""
        descriptor, self._descriptor = self._descriptor, None
        if descriptor is not None:
            os.close(descriptor)

    def __del__(self) -> None:  # a store dropped without close() (tests, scripts) frees its directory too
        self.release()


def describe_holder(path: Path) -> str:
    """``pid 4242 on host since 2026-01-01 12:00:00 UTC`` from the lock file, as far as it can be read."""
    try:
        record = json.loads(Path(path).read_text())
        pid, host, since = int(record["pid"]), str(record["host"]), str(record["since"])
    except (OSError, ValueError, TypeError, KeyError):  # the holder is between locking and writing its record
        return f"another process (its record in '{path}' is not written yet)"
    this_process = " (this process)" if pid == os.getpid() and host == socket.gethostname() else ""
    return f"pid {pid} on {host}{this_process} since {since}"
