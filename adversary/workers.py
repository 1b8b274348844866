"""Attack workers: the processes that run attacks, apart from the server process and its ground truth.

A job crosses to a worker as bytes: the serialised ``AttackerView``s, the attack's options and a seed.
The worker runs the attack on its own device with its own torch thread count and returns the
reconstructions as bytes; scoring them against the truth stays in the server process. Each worker is a
spawned process (not a fork of the server, which would inherit the server's memory: the loaded training
set, the ground-truth store): it starts with a fresh interpreter, in an empty working directory of its
own, without the server's command line.

This keeps attack code from *accidentally* using the truth (a stray import, a cache, a path in the
arguments); it is not a sandbox against hostile code, which could still open any file the user can read.

Workers start once per run (``ProcessAttackWorkers`` launches them all at construction) and serve every
job of the run; ``settings_for`` turns ``adversary.workers``, ``adversary.resources`` and the device into
per-worker settings.
"""

from __future__ import annotations

import io
import logging
import logging.handlers
import math
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any, Protocol

import torch

from adversary.view import AttackerView, Reconstruction

logger = logging.getLogger("fedsim")

_TERMINATE_WAIT_S = 5.0  # a worker SIGTERM does not end in this long is killed
_SERVER_WATCH_S = 1.0  # how often a worker checks that its server process is still there


@dataclass(frozen=True)
class WorkerSettings:
    """How every attack worker process is set up."""

    count: int  # worker processes (adversary.workers)
    threads: int  # torch intra-op threads per worker (from adversary.resources.cpus)
    devices: tuple[str, ...]  # worker i runs its attacks on devices[i % len(devices)]


def settings_for(workers: int, cpus: float, device: torch.device) -> WorkerSettings:
    """Per-worker settings from the adversary's config: threads = the worker's CPU share (at least one);
    on a CUDA device without an index, the workers spread over the visible GPUs."""
    threads = max(1, math.floor(cpus))
    if device.type == "cuda" and device.index is None and torch.cuda.device_count() > 1:
        devices = tuple(f"cuda:{i}" for i in range(torch.cuda.device_count()))
    else:
        devices = (str(device),)
    return WorkerSettings(count=workers, threads=threads, devices=devices)


@dataclass(frozen=True)
class AttackJob:
    """What a worker receives: the views of one batchable group, the attack's options, the seed."""

    options: Any  # the attack's options (a pydantic model with ``name``; pickled as it is)
    views: list[AttackerView]
    seed: int
    tuning: Any = None  # a TuningTask: tune the options on public problems first (adversary.inversion.tuning)

    def to_bytes(self) -> bytes:
        return _dump({"options": self.options, "views": self.views, "seed": self.seed, "tuning": self.tuning})

    @staticmethod
    def from_bytes(payload: bytes) -> AttackJob:
        fields = _load(payload)
        return AttackJob(
            options=fields["options"], views=list(fields["views"]), seed=int(fields["seed"]), tuning=fields["tuning"]
        )


@dataclass(frozen=True)
class PortfolioJob:
    """Every attack of a portfolio on one batchable group, then the saturation step on the leading ones
    (``adversary.inversion.saturation``): one job, because which attacks lead is known only once all have run."""

    attacks: list[tuple[Any, int]]  # (the attack's options, its seed)
    views: list[AttackerView]
    budget: Any  # SaturationBudget
    tuning: dict[int, Any] = field(default_factory=dict)  # attack index -> its TuningTask, for those tuned first

    def to_bytes(self) -> bytes:
        return _dump({"attacks": self.attacks, "views": self.views, "budget": self.budget, "tuning": self.tuning})

    @staticmethod
    def from_bytes(payload: bytes) -> PortfolioJob:
        fields = _load(payload)
        return PortfolioJob(
            attacks=list(fields["attacks"]),
            views=list(fields["views"]),
            budget=fields["budget"],
            tuning=fields["tuning"],
        )


def restart_shares(options: Any, workers: int) -> list[Any]:
    """``options`` as up to ``workers`` runs of consecutive restarts (``first_restart``, ``restarts``), as even as can
    be: restart r starts from the same point whichever run it is in, so the best of the runs is the one run's answer.
    Options without restarts (closed-form attacks) stay one run."""
    restarts = int(getattr(options, "restarts", 1) or 1)
    count = max(1, min(workers, restarts))
    if count == 1 or not hasattr(options, "first_restart"):
        return [options]
    size, extra = divmod(restarts, count)
    shares, start = [], int(options.first_restart)
    for share in range(count):
        length = size + (1 if share < extra else 0)
        shares.append(options.model_copy(update={"first_restart": start, "restarts": length}))
        start += length
    return shares


def best_of(parts: Sequence[Future[list[Reconstruction]]]) -> Future[list[Reconstruction]]:
    """Once every run of an attack's restarts (``restart_shares``) has reported: per target the result with the lowest
    objective of the attack's own, carrying every run's restart objectives; the first error fails it."""
    merged: Future[list[Reconstruction]] = Future()
    merged.set_running_or_notify_cancel()
    left = [len(parts)]
    lock = threading.Lock()

    def done(_: Future) -> None:
        with lock:
            left[0] -= 1
            if left[0]:
                return
        errors = [None if part.cancelled() else part.exception() for part in parts]
        errors = [error for part, error in zip(parts, errors, strict=True) if part.cancelled() or error is not None]
        if errors:
            merged.set_exception(errors[0] or CancelledError("the attack workers were terminated before this job ran"))
            return
        results = [part.result() for part in parts]
        best = []
        for per_target in zip(*results, strict=True):
            chosen = min(per_target, key=lambda rec: rec.objective)
            objectives = tuple(value for rec in per_target for value in rec.restart_objectives)
            best.append(replace(chosen, restart_objectives=objectives, seconds=max(rec.seconds for rec in per_target)))
        merged.set_result(best)

    for part in parts:
        part.add_done_callback(done)
    return merged


def _dump(value: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def _load(payload: bytes) -> Any:
    # weights_only=False: a view carries its architecture (an nn.Module), which only full unpickling restores.
    return torch.load(io.BytesIO(payload), weights_only=False, map_location="cpu")


def encode_reconstructions(reconstructions: Sequence[Reconstruction]) -> bytes:
    return _dump(list(reconstructions))


def decode_reconstructions(payload: bytes) -> list[Reconstruction]:
    return list(_load(payload))


class AttackWorkers(Protocol):
    """Where attack jobs run: ``submit`` returns the job's reconstructions (one per view, in order)."""

    def submit(self, job: AttackJob | PortfolioJob) -> Future[Any]: ...
    def shutdown(self) -> None: ...
    def terminate(self) -> None: ...


class ProcessAttackWorkers:
    """A pool of spawned worker processes, started once and kept for the run."""

    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings
        logger.info(
            "starting attack workers: %d process(es), %d torch thread(s) each, on %s",
            settings.count,
            settings.threads,
            ", ".join(settings.devices),
        )
        context = multiprocessing.get_context("spawn")
        counter = context.Value("i", 0)
        # the workers' log lines (attack progress) come back here, into the run's log and console
        self._log_queue = context.Queue()
        self._log_listener: logging.handlers.QueueListener | None = logging.handlers.QueueListener(
            self._log_queue, _ServerLog()
        )
        self._log_listener.start()
        self._pool = ProcessPoolExecutor(
            max_workers=settings.count,
            mp_context=context,
            initializer=_start_worker,
            initargs=(settings.threads, settings.devices, counter, _project_root(), os.getpid(), self._log_queue),
        )
        # A spawned pool starts a process per submission while none is idle: start them all now, once per run,
        # while the federation starts, rather than on the first attack.
        for _ in range(settings.count):
            self._pool.submit(_ready)

    def submit(self, job: AttackJob | PortfolioJob) -> Future[Any]:
        """An attack job's reconstructions; a portfolio job's per attack (or the error that attack raised)."""
        return _decoded(
            self._pool.submit(run_portfolio_job if isinstance(job, PortfolioJob) else run_job, job.to_bytes())
        )

    def call(self, function: Callable[..., Any], *args: Any) -> Future[Any]:
        """Run a module-level ``function(*args)`` in one of the workers (diagnostics, tests)."""
        return self._pool.submit(function, *args)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)
        self._stop_log()

    def _stop_log(self) -> None:
        """Relay what the workers logged before they ended, then stop listening."""
        if self._log_listener is not None:
            self._log_listener.stop()
            self._log_listener = None
            self._log_queue.close()

    def terminate(self) -> None:
        """End the workers now, jobs under way included (a stopped run): their futures fail, nothing waits."""
        # ProcessPoolExecutor.terminate_workers() arrives in Python 3.14; before, the pool's processes are its
        # _processes (stable since 3.2)
        processes = list((getattr(self._pool, "_processes", None) or {}).values())
        manager = getattr(self._pool, "_executor_manager_thread", None)
        self._pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        for process in processes:
            process.join(timeout=_TERMINATE_WAIT_S)
            if process.is_alive():
                process.kill()
        # Python < 3.13 wakes the pool's manager thread at interpreter exit without its lock: were the thread still
        # closing its wake-up pipe then, the exit would print "OSError: [Errno 9] Bad file descriptor" after the
        # run's last line. With its workers gone it ends at once; wait for it here.
        if manager is not None:
            manager.join(timeout=_TERMINATE_WAIT_S)
        self._stop_log()


class _ServerLog(logging.Handler):
    """Hands a worker's log record to the server's logger of the same name (its handlers, its level)."""

    def emit(self, record: logging.LogRecord) -> None:
        target = logging.getLogger(record.name)
        if target.isEnabledFor(record.levelno):
            target.handle(record)


def _decoded(inner: Future[bytes]) -> Future[Any]:
    outer: Future[Any] = Future()

    def relay(done: Future[bytes]) -> None:
        if done.cancelled():  # the pool was terminated (a stopped run): exception() would raise, from a callback
            outer.set_exception(CancelledError("the attack workers were terminated before this job ran"))
            return
        error = done.exception()
        if error is not None:
            outer.set_exception(error)
            return
        try:
            outer.set_result(decode_reconstructions(done.result()))
        except Exception as decode_error:
            outer.set_exception(decode_error)

    outer.set_running_or_notify_cancel()
    inner.add_done_callback(relay)
    return outer


def _project_root() -> str:
    """The folder holding the project's packages (``adversary`` among them)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------------------------------- worker side

_DEVICE: torch.device | None = None


def _start_worker(
    threads: int, devices: tuple[str, ...], counter: Any, project_root: str, server: int, log_queue: Any = None
) -> None:
    """Set up one worker process: its threads, its device, an empty working directory, no server argv.

    ``server``: the pid of the process that started the pool (read there: a server killed while this worker still
    imported torch has already left this worker to another parent). ``log_queue``: where the worker's ``fedsim`` log
    records go (the server relays them into the run's log), each line prefixed with the worker's number."""
    global _DEVICE
    # Ctrl-C reaches the whole process group: the server decides (it stops the run and terminates the workers;
    # --resume re-attacks what was left), a worker must not turn it into failed attacks.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with_server, args=(server,), name="fedsim-server-watch", daemon=True).start()
    with counter.get_lock():
        index = counter.value
        counter.value += 1
    torch.set_num_threads(threads)
    _DEVICE = torch.device(devices[index % len(devices)])
    if log_queue is not None:
        to_server = logging.handlers.QueueHandler(log_queue)
        to_server.setFormatter(logging.Formatter(f"attack worker {index}: %(message)s"))
        logger.handlers[:] = [to_server]
        logger.setLevel(logging.INFO)
        logger.propagate = False
    # The server's working directory and command line (a run directory with --resume) stay behind; an empty
    # sys.path entry would have meant that working directory, so it points at the project instead.
    sys.path[:] = [project_root if entry == "" else entry for entry in sys.path]
    sys.path_importer_cache.clear()  # its finder for "" still points at the server's working directory
    sys.argv[:] = ["fedsim-attack-worker"]
    workdir = tempfile.mkdtemp(prefix="fedsim-attack-worker-")
    os.chdir(workdir)
    os.environ["PWD"] = workdir
    os.environ.pop("OLDPWD", None)
    # spawn copied the server's starting directory here (typeshed does not declare this module global)
    multiprocessing.process.ORIGINAL_DIR = workdir  # type: ignore[attr-defined]
    _forget_spawn_preparation()
    import atexit

    atexit.register(shutil.rmtree, workdir, ignore_errors=True)
    import adversary.attacks  # noqa: F401  (registers the attacks before the first job)


def _exit_with_server(server: int) -> None:
    """End this worker once the server process is gone (killed): an orphan would hold its CPU for minutes."""
    while os.getppid() == server:
        time.sleep(_SERVER_WATCH_S)
    os._exit(1)


def _forget_spawn_preparation() -> None:
    """Empty the start-up data that spawn handed over (the server's working directory, argv and sys.path): the
    frame that started this process keeps it referenced for the life of the worker."""
    frame: FrameType | None = sys._getframe()
    while frame is not None:
        data = frame.f_locals.get("preparation_data")
        if isinstance(data, dict):
            data.clear()
        frame = frame.f_back


def _ready() -> int:
    return os.getpid()


def run_job(payload: bytes) -> bytes:
    """Worker side of ``submit``: deserialise the job, run the attack on this worker's device, serialise the result."""
    job = AttackJob.from_bytes(payload)
    device = _DEVICE if _DEVICE is not None else torch.device("cpu")
    return encode_reconstructions(run_tuned(job.options, job.tuning, job.views, job.seed, device))


def run_tuned(options: Any, task: Any, views: list[AttackerView], seed: int, device: torch.device) -> list:
    """``options`` tuned on ``task``'s public problems first (where given), then run on ``views``; each
    reconstruction records the tuning behind it."""
    from adversary.inversion import run_attack
    from adversary.inversion.tuning import tuned
    from adversary.postprocessing import finish

    chosen, tuning = tuned(options, task, device)
    reconstructions = finish(views, run_attack(chosen, views, seed, device), device)
    if tuning is None:
        return reconstructions
    return [replace(rec, tuning=tuning.to_row()) for rec in reconstructions]


def _recording(options: Any, record: dict | None, views: list[AttackerView], seed: int, device: torch.device):
    """How a portfolio runs one attack (at whatever budget the race or the saturation step asks, on every view or
    on the ``targets`` given): its reconstructions carry the tuning ``record`` behind ``options``."""
    from adversary.inversion import run_attack

    def run(chosen: Any, targets: Sequence[int] | None = None) -> list:
        chosen_views = views if targets is None else [views[t] for t in targets]
        reconstructions = run_attack(chosen, chosen_views, seed, device)
        return reconstructions if record is None else [replace(rec, tuning=record) for rec in reconstructions]

    return run


def run_portfolio_job(payload: bytes) -> bytes:
    """Worker side of a ``PortfolioJob``: every attack raced (or run once), the leaders saturated; per attack its
    reconstructions or its error (as an exception that pickles: the message, typed RuntimeError)."""
    from adversary.inversion.race import portfolio
    from adversary.inversion.tuning import tuned

    job = PortfolioJob.from_bytes(payload)
    device = _DEVICE if _DEVICE is not None else torch.device("cpu")
    entries = []
    for index, (options, seed) in enumerate(job.attacks):
        chosen, tuning = tuned(options, job.tuning.get(index), device)
        record = tuning.to_row() if tuning is not None else None
        entries.append((chosen, _recording(chosen, record, job.views, seed, device)))
    from adversary.postprocessing import finish

    outcomes = portfolio(entries, job.views, job.budget, device)
    return _dump(
        [
            RuntimeError(f"{type(outcome).__name__}: {outcome}")
            if isinstance(outcome, BaseException)
            else finish(job.views, outcome, device)
            for outcome in outcomes
        ]
    )
