"""Running a sweep's points: skip finished runs, resume interrupted ones, and run several at once.

Each point is a whole fedsim run (its own in-process Flower simulation and Ray instance). Ray keeps one
instance per process, so runs side by side need processes: ``parallel`` > 1 runs points in that many
spawned worker processes, and splits the machine between them: every worker's Ray instance is started
with ``num_cpus = cpus // parallel``, so the clients of all runs together never reserve more CPUs than
there are. GPUs are not split: each Ray instance sees every visible GPU, and ``client_resources.gpus``
bounds each run on its own. Whether a run is finished is read from its directory (``summary.json``
covering every round), never from the manifest, so a killed sweep picks up where it stopped.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from fedsim.config import ConfigError, ExperimentConfig, load_config
from fedsim.core.atomic import inside
from fedsim.core.errors import Interrupted, RunInterrupted, first_line
from fedsim.core.notices import warnings_as_log_lines
from fedsim.core.stopping import StopSignal
from fedsim.rundir.layout import CONFIG_FILE, METRICS_FILE, SUMMARY_FILE
from fedsim.rundir.writer import RunStore
from fedsim.sweep.grid import SweepPoint
from fedsim.sweep.manifest import Manifest

if TYPE_CHECKING:  # imported where a sweep runs: planning one (--dry-run) needs neither torch nor Ray
    from fedsim.engine.lifecycle.services import SharedServices

logger = logging.getLogger("fedsim")

Action = Literal["run", "resume", "restart", "skip"]


@dataclass(frozen=True)
class PointJob:
    """What one worker does for one point (picklable: it crosses to a spawned process)."""

    name: str
    config: ExperimentConfig
    run_dir: Path
    action: Action
    ray_resources: dict[str, float] | None
    quiet: bool


@dataclass(frozen=True)
class PointOutcome:
    name: str
    status: Literal["complete", "failed", "interrupted", "busy"]  # busy: another process writes its run
    seconds: float
    error: str | None = None
    breakdown: PointTime | None = None  # where a complete point's time went


@dataclass(frozen=True)
class PointTime:
    """Where a point's wall time went: its rounds (training, evaluation, the waits in them), the attacks still
    running after its last round, and the rest: the overhead of starting and ending the run."""

    rounds: float
    attack_tail: float
    overhead: float
    started: tuple[str, ...] = ()  # what this point had to start (Ray, attack workers) rather than reuse

    def text(self) -> str:
        started = " and ".join(self.started) if self.started else "nothing, kept from the previous point"
        return (
            f"rounds {self.rounds:.1f}s, attacks after the last round {self.attack_tail:.1f}s, "
            f"overhead {self.overhead:.1f}s; started {started}"
        )


def point_time(run_dir: Path, wall: float, since: float, started: tuple[str, ...] = ()) -> PointTime:
    """``wall`` seconds of a point split by its rows written after ``since`` (a time.time()): the rounds' own
    seconds, the attacks' tail after the last round, and the overhead that leaves."""
    rows = [json.loads(line) for line in (run_dir / METRICS_FILE).read_text().splitlines() if line.strip()]
    fresh = [row for row in rows if float(row.get("time", 0)) >= since]
    evals = [row for row in fresh if row["event"] == "eval" and "seconds" in row]
    rounds = sum(float(row["seconds"]) for row in evals)
    last_round = max((float(row["time"]) for row in evals), default=since)
    last_attack = max((float(row["time"]) for row in fresh if row["event"] == "attack"), default=last_round)
    tail = max(0.0, last_attack - last_round)
    return PointTime(rounds, tail, max(0.0, wall - rounds - tail), started)


def run_is_complete(run_dir: Path, config: ExperimentConfig) -> bool:
    """A run is complete when its summary (written after the last attack reported) covers every round, or the
    run stopped at its plateau (``federation.plateau``: no further round is played, fedsim.engine.lifecycle.rounds)."""
    path = Path(run_dir) / SUMMARY_FILE
    if not path.is_file():
        return False
    try:
        summary = json.loads(path.read_text())
    except json.JSONDecodeError:
        return False
    if int(summary.get("rounds_completed", 0)) >= config.federation.rounds:
        return True
    plateau = summary.get("plateau")
    return (
        config.federation.plateau is not None
        and plateau is not None
        and int(summary.get("rounds_completed", 0)) >= int(plateau["round"])
    )


def point_action(point: SweepPoint, run_dir: Path) -> Action:
    """What a point needs: nothing (complete), a fresh run, a resume, or a restart (killed before round 0).

    A directory that holds a run of another config is an error, not something to overwrite or reuse.
    """
    if not (run_dir / METRICS_FILE).is_file():
        return "run"
    if (run_dir / CONFIG_FILE).is_file():
        _check_same_config(point, run_dir)
    if run_is_complete(run_dir, point.config):
        return "skip"
    return "restart" if RunStore(run_dir).last_committed_round() is None else "resume"


def _check_same_config(point: SweepPoint, run_dir: Path) -> None:
    try:
        recorded = load_config(run_dir / CONFIG_FILE)
    except ConfigError as error:  # e.g. written by another version of fedsim
        raise ConfigError(f"sweep: '{run_dir / CONFIG_FILE}' no longer loads ({error}); remove that run") from None
    existing, wanted = _comparable(recorded), _comparable(point.config)
    if "adversary.attacks" in wanted and len(recorded.adversary.attacks) == len(point.config.adversary.attacks):
        existing["adversary.attacks"], wanted["adversary.attacks"] = _attacks_as_given(
            recorded.adversary.attacks, point.config.adversary.attacks
        )
    if existing != wanted:
        key = next(k for k in sorted(set(existing) | set(wanted)) if existing.get(k) != wanted.get(k))
        raise ConfigError(
            f"sweep: '{run_dir}' holds a run with {key} = {existing.get(key)!r}, but point {point.name} sets "
            f"{wanted.get(key)!r}; sweep into another --out, or remove that run"
        )


def _attacks_as_given(recorded: list[Any], wanted: list[Any]) -> tuple[list[dict], list[dict]]:
    """Both attack lists without what adaptation filled in: a run records its adaptive attacks adapted to its
    defenses (``adapted_fields``); where the point leaves such an option unset, the same model and defenses
    (compared with the rest of the config) fill it in alike, so it is left out on both sides."""
    pairs = []
    for given, asked in zip(recorded, wanted, strict=True):
        filled = asked.adapted_fields - asked.model_fields_set
        pairs.append(
            tuple(
                {key: value for key, value in options.model_dump(mode="json").items() if key not in filled}
                for options in (given, asked)
            )
        )
    return [old for old, _ in pairs], [new for _, new in pairs]


def _comparable(config: ExperimentConfig) -> dict[str, Any]:
    """The config flattened to dotted keys, without `output` (where a run lies does not change what it is)."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(f"{prefix}.{key}" if prefix else key, value)
        else:
            flat[prefix] = node

    dumped = config.model_dump(mode="json")
    dumped.pop("output")
    if dumped["adversary"]["portfolio"] == "strongest":
        # a run records the portfolio as resolved against its model and defenses (fedsim.engine.leakage.portfolio);
        # `strongest` with the same portfolio options and exclusions is the same point
        dumped["adversary"].pop("attacks")
    walk("", dumped)
    return flat


def execute_point(
    job: PointJob, stop: StopSignal | None = None, services: SharedServices | None = None
) -> PointOutcome:
    """Run, resume or restart one point; a failure is returned as an outcome, so the other points go on.

    ``stop``: the sweep's stop request; a stopped run is an ``interrupted`` outcome (resumed with the sweep).
    ``services``: the sweep's Ray and attack workers, lent to the run (see fedsim.engine.lifecycle.services)."""
    from fedsim.engine.run import run_experiment
    from fedsim.rundir.claim import give_back
    from fedsim.rundir.lock import RunDirectoryBusy, RunLock

    _CURRENT_POINT[0] = job.name
    started, since = time.perf_counter(), time.time()
    try:
        if job.action == "restart":  # killed before round 0 was committed: nothing in it to keep
            # ... unless another process is writing it now: then its lock refuses, and nothing is deleted; and only
            # fedsim's own files go (the folder stays, empty, for the run to claim again)
            lock = RunLock.acquire(job.run_dir, f"sweep point {job.name}")
            try:
                give_back(job.run_dir, created=False)
            finally:
                lock.release()
        if job.action == "resume":
            logger.info("resuming %s", job.run_dir)
            run_experiment(
                resume=job.run_dir, quiet=job.quiet, ray_resources=job.ray_resources, stop=stop, services=services
            )
        else:
            run_experiment(
                job.config,
                quiet=job.quiet,
                run_dir=job.run_dir,
                ray_resources=job.ray_resources,
                stop=stop,
                services=services,
            )
    except RunInterrupted as interrupted:
        return PointOutcome(job.name, "interrupted", time.perf_counter() - started, str(interrupted))
    except RunDirectoryBusy as busy:  # another process runs this point's run: it has not failed, this sweep skips it
        return PointOutcome(job.name, "busy", time.perf_counter() - started, str(busy))
    except Exception as error:
        return PointOutcome(job.name, "failed", time.perf_counter() - started, failure_line(job, error))
    seconds = time.perf_counter() - started
    if not run_is_complete(job.run_dir, job.config):
        return PointOutcome(job.name, "failed", seconds, "the run stopped before its last round (see its log)")
    started_here = tuple(services.take_started()) if services is not None else ()
    return PointOutcome(job.name, "complete", seconds, breakdown=point_time(job.run_dir, seconds, since, started_here))


def failure_line(job: PointJob, error: Exception) -> str:
    """A point's failure in one line; its traceback goes to a log the line points to, not to the console."""
    from fedsim.core.failure_log import pointer_to, write_failure_log
    from fedsim.rundir.refused_writes import WRITE_FAILURES, refused_write_line

    log = write_failure_log(error, "sweep")
    if isinstance(error, OSError) and error.errno in WRITE_FAILURES:
        return refused_write_line(error, "sweep", job.run_dir.parent, None) + pointer_to(log)
    return f"{type(error).__name__}: {first_line(error)}{pointer_to(log)}"


def available_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def ray_share(points: list[SweepPoint], parallel: int, cpus: int | None) -> dict[str, float] | None:
    """Each worker's Ray resources (``num_cpus``), checked against what every point's clients reserve.

    One run at a time with no ``cpus`` given keeps Ray's own default (the whole machine), as ``fedsim run``.
    """
    if parallel < 1:
        raise ConfigError(f"--parallel {parallel}: must be >= 1")
    if parallel == 1 and cpus is None:
        return None
    total = cpus if cpus is not None else available_cpus()
    share = total // parallel
    if share < 1:
        raise ConfigError(
            f"--parallel {parallel}: {total} CPU(s) cannot give every worker at least one; "
            f"allowed: --parallel <= {total}"
        )
    for point in points:
        need = point.config.federation.client_resources.cpus
        if need > share:
            raise ConfigError(
                f"--parallel {parallel}: each run gets {share} of {total} CPU(s), but point {point.name} reserves "
                f"federation.client_resources.cpus = {need:g} per client; lower --parallel or that reservation"
            )
    return {"num_cpus": share}


@dataclass(frozen=True)
class Schedule:
    """What each point needs, and the Ray resources of each run; decided before anything runs."""

    actions: dict[str, Action]
    ray_resources: dict[str, float] | None


def schedule(sweep_dir: Path, points: list[SweepPoint], parallel: int = 1, cpus: int | None = None) -> Schedule:
    """Check every existing run's config and the resources up front (ConfigError in one line); a point directory
    that leads outside the sweep (a symlink) is refused, never resumed or restarted there."""
    actions = {point.name: point_action(point, inside(sweep_dir, sweep_dir / point.name)) for point in points}
    todo = [point for point in points if actions[point.name] != "skip"]
    return Schedule(actions, ray_share(todo, parallel, cpus))


def run_points(
    sweep_dir: Path,
    points: list[SweepPoint],
    manifest: Manifest,
    plan: Schedule,
    *,
    parallel: int = 1,
    quiet: bool = False,
    stop: StopSignal | None = None,
) -> list[PointOutcome]:
    """Run every point that is not complete; returns the outcome of each point that ran.

    Once ``stop`` is requested, the running points stop without committing their round in progress, no other
    point starts, and ``Interrupted`` is raised (``fedsim sweep --resume`` carries on)."""
    stop = stop or StopSignal()
    todo = [point for point in points if plan.actions[point.name] != "skip"]
    for record in manifest.points:
        record.status = "complete" if plan.actions[record.name] == "skip" else "pending"
    manifest.save()
    resumed = sum(plan.actions[p.name] == "resume" for p in todo)
    logger.info(
        "sweep %s: %d point(s), %d complete (skipped), %d to run (%d resumed), %d at a time",
        sweep_dir,
        len(points),
        len(points) - len(todo),
        len(todo),
        resumed,
        min(parallel, max(len(todo), 1)),
    )
    jobs = [
        PointJob(p.name, p.config, sweep_dir / p.name, plan.actions[p.name], plan.ray_resources, quiet or parallel > 1)
        for p in todo
    ]
    if parallel == 1 or len(jobs) <= 1:
        from fedsim.engine.lifecycle.services import SharedServices

        outcomes = []
        with SharedServices() as services:  # Ray and the attack workers start once, for every point
            for job in jobs:
                if stop.requested:
                    break
                outcomes.append(_run_here(job, manifest, stop, services))
    else:
        threads = max(1, int(plan.ray_resources["num_cpus"])) if plan.ray_resources else 1
        outcomes = _run_in_workers(jobs, manifest, parallel, threads, stop)
    if stop.requested:
        raise Interrupted(f"sweep {sweep_dir} interrupted", stop.signum)
    return outcomes


def _run_here(job: PointJob, manifest: Manifest, stop: StopSignal, services: SharedServices) -> PointOutcome:
    manifest.record(job.name, "running")
    outcome = execute_point(job, stop, services)
    manifest.record(job.name, recorded_status(outcome), outcome.error, outcome.seconds)
    _log_outcome(outcome)
    return outcome


_STOP_POLL_S = 0.2  # how often the sweep process and its workers look for a stop request


def _run_in_workers(
    jobs: list[PointJob], manifest: Manifest, parallel: int, threads: int, stop: StopSignal
) -> list[PointOutcome]:
    outcomes: list[PointOutcome] = []
    _note_lpips_once(jobs)
    context = get_context("spawn")  # a fresh interpreter per worker: no forked torch, Ray or thread state
    stop_request = context.Value("i", 0)  # the signal number, once the sweep is asked to stop
    with ProcessPoolExecutor(
        max_workers=min(parallel, len(jobs)),
        mp_context=context,
        initializer=_init_worker,
        initargs=(threads, stop_request, os.getpid()),
    ) as pool:
        pending: dict[Future[PointOutcome | None], PointJob] = {}
        queued = list(jobs)  # the pool starts jobs in submission order, one per free worker
        try:
            for job in jobs:
                pending[pool.submit(_run_in_worker, job)] = job
            for job in queued[:parallel]:
                manifest.record(job.name, "running")
            del queued[:parallel]
            while pending:
                done, _ = wait(pending, timeout=_STOP_POLL_S, return_when=FIRST_COMPLETED)
                if stop.requested and not stop_request.value:
                    stop_request.value = stop.signum or signal.SIGINT  # the workers stop their runs
                    queued.clear()
                    for future in pending:
                        future.cancel()  # points not handed to a worker yet never start
                for future in done:
                    job = pending.pop(future)
                    if queued:
                        manifest.record(queued.pop(0).name, "running")
                    outcome = _outcome_of(future, job)
                    if outcome is None:  # never started: the point stays pending
                        manifest.record(job.name, "pending")
                        continue
                    manifest.record(job.name, recorded_status(outcome), outcome.error, outcome.seconds)
                    _log_outcome(outcome)
                    outcomes.append(outcome)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    return outcomes


def _note_lpips_once(jobs: list[PointJob]) -> None:
    """LPIPS unavailable is said once by the sweep, not once by every worker that scores an attack."""
    modes = {job.config.adversary.lpips for job in jobs if job.config.adversary.attacks}
    if "auto" in modes:
        from fedsim.judge.metrics import note_unavailable_once

        note_unavailable_once("auto")


def _outcome_of(future: Future[PointOutcome | None], job: PointJob) -> PointOutcome | None:
    if future.cancelled():
        return None
    error = future.exception()
    if error is not None:
        return PointOutcome(job.name, "failed", 0.0, f"worker died: {type(error).__name__}: {error}")
    return future.result()


def recorded_status(outcome: PointOutcome) -> str:
    """The point's status in sweep.json: a point another process was running is still to run (``pending``, with the
    reason), never ``failed``: its run has not failed."""
    return "pending" if outcome.status == "busy" else outcome.status


def _log_outcome(outcome: PointOutcome) -> None:
    if outcome.status == "complete" and outcome.breakdown is not None:
        logger.info("sweep point %s complete (%.0fs: %s)", outcome.name, outcome.seconds, outcome.breakdown.text())
    elif outcome.status == "complete":
        logger.info("sweep point %s complete (%.0fs)", outcome.name, outcome.seconds)
    elif outcome.status == "interrupted":
        logger.warning("sweep point %s interrupted (%.0fs)", outcome.name, outcome.seconds)
    elif outcome.status == "busy":
        logger.warning("sweep point %s not run: %s", outcome.name, outcome.error)
    else:
        logger.error("sweep point %s failed: %s", outcome.name, outcome.error)


# The point a worker is running, for its log lines (one point at a time per process).
_CURRENT_POINT: list[str] = ["-"]


class _PointFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.point = _CURRENT_POINT[0]
        return True


# A worker's stop request: set from the sweep process's (``_watch_sweep``), read by the run it plays.
_WORKER_STOP = StopSignal()


def _init_worker(threads: int, stop_request: Any, sweep_pid: int) -> None:
    """A spawned worker: torch threads within its CPU share, log lines that name the point, and stops that come
    from the sweep process (which a terminal's Ctrl-C reaches too: the worker leaves SIGINT to it)."""
    import torch

    torch.set_num_threads(threads)
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_PointFilter())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s [%(point)s] %(message)s"))
    fedsim_logger = logging.getLogger("fedsim")
    fedsim_logger.handlers[:] = [handler]
    fedsim_logger.setLevel(logging.INFO)
    fedsim_logger.propagate = False
    warnings_as_log_lines()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_sweep, args=(stop_request, sweep_pid), name="fedsim-sweep-stop", daemon=True).start()


def _watch_sweep(stop_request: Any, sweep_pid: int) -> None:
    """Request this worker's stop when the sweep process asks, or when it is gone (killed)."""
    while not _WORKER_STOP.requested:
        if stop_request.value:
            _WORKER_STOP.request(stop_request.value)
        elif os.getppid() != sweep_pid:
            _WORKER_STOP.request(signal.SIGTERM)
        time.sleep(_STOP_POLL_S)


def _run_in_worker(job: PointJob) -> PointOutcome | None:
    """``execute_point`` in a worker; None when the sweep was stopped before the point started."""
    if _WORKER_STOP.requested:
        return None
    return execute_point(job, _WORKER_STOP)
