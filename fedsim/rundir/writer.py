"""The run directory's writer: ``RunStore`` claims a run directory and writes what a run records in it.

The resolved config and its fingerprint, the environment, the metrics log, the checkpoints and the summary;
where each lies is ``fedsim.rundir.layout``'s, and reading a finished run back is ``fedsim.rundir.reader``'s.

One process writes a run directory at a time: ``create`` and ``open_for_resume`` take its lock
(``fedsim.rundir.lock``) and ``close`` releases it; a plain ``RunStore(run_dir)`` only reads.

A round is committed when its checkpoint is renamed into place; every metrics row of that round is
written (and fsynced) before, and so is its line in ``commits.jsonl`` (``fedsim.rundir.commits``): the
checkpoint's sha256 and the metrics file's length and sha256 at that moment. ``--resume`` restarts after the
last checkpoint once it and the rows check out against that line (``fedsim.rundir.verify``), and drops the
rows of the round that was interrupted, which the resumed run recomputes identically.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import sys
import threading
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from fedsim.config import (
    SCHEMA_VERSION,
    ExperimentConfig,
    config_changes,
    dump_config,
    load_config,
    with_absolute_paths,
)
from fedsim.core.atomic import (
    append_line_durably,
    fsync_directory,
    inside,
    save_torch_atomic,
    write_bytes_atomic,
    write_json_atomic,
    write_text_atomic,
)
from fedsim.core.errors import ConfigError, first_line
from fedsim.models.checkpoint import ModelError, load_weights_only
from fedsim.rundir.claim import claim_named, claim_timestamped, give_back, remove_stale_temporaries
from fedsim.rundir.commits import Commit, MetricsDigest, append_commit, keep_commits_through, sha256_of_file
from fedsim.rundir.fingerprint import fedsim_version, keeps_integrity_record, read_fingerprint, write_fingerprint
from fedsim.rundir.layout import (
    CHECKPOINT_DIR,
    CHECKPOINT_GLOB,
    CHECKPOINT_PATTERN,
    COMMITS_FILE,
    CONFIG_FILE,
    ENVIRONMENT_FILE,
    FINGERPRINT_FILE,
    METRICS_FILE,
    checkpoint_file,
    timestamped_run_dir,
)
from fedsim.rundir.lock import RunLock
from fedsim.rundir.verify import verified_resume_round

logger = logging.getLogger("fedsim")


def environment_info(device: str) -> dict[str, Any]:
    packages = ("fedsim", "flwr", "ray", "torch", "torchvision", "numpy", "opacus", "scikit-image", "pydantic")
    versions: dict[str, str | None] = {}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "device": device,
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "versions": versions,
        "command": sys.argv,
    }


def _check_output_dir(folder: Path) -> None:
    """One line naming output.dir when runs cannot be written there (a file, no permission)."""
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise ConfigError(f"output.dir = '{folder}': '{existing}' is a file, not a folder")
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"output.dir = '{folder}': '{existing}' is not writable")


class RunStore:
    """Everything a run persists, in one directory (side effects live here, not in the simulation)."""

    def __init__(self, run_dir: Path, lock: RunLock | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.metrics_path = self.run_dir / METRICS_FILE
        self.checkpoint_dir = self.run_dir / CHECKPOINT_DIR
        self.commits_path = self.run_dir / COMMITS_FILE
        self._append_lock = threading.Lock()  # the server thread and attack workers append concurrently
        # the metrics file's running checksum, for the commit record; read from the file when first needed
        self._metrics_digest: MetricsDigest | None = None
        self._run_lock = lock  # held by the store that writes the run (create, open_for_resume); None to read
        self._created: bool | None = None  # create: whether fedsim made the folder (discard removes it then)

    def close(self) -> None:
        """Release the run directory for the next writer (the run ended, or failed); closing twice is harmless."""
        if self._run_lock is not None:
            self._run_lock.release()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ creation and resumption
    @classmethod
    def create(
        cls, config: ExperimentConfig, device: str, run_dir: Path | None = None, engine: dict[str, Any] | None = None
    ) -> RunStore:
        """Claim a new run directory atomically (two runs never share one) and write its config.

        A named directory (``output.run_name``, or ``run_dir`` from a sweep) is claimed by creating its
        metrics file exclusively; a generated ``<name>-<timestamp>`` one by creating the directory itself,
        with ``-2``, ``-3``... when another run took that second. Either is locked first (refused, naming the
        holder, while another process writes it) and stays locked until ``close``. A named folder that exists
        must be empty (``fedsim.rundir.claim``); ``discard`` gives the directory back if the run never commits.
        """
        _check_output_dir(config.output.dir if run_dir is None else Path(run_dir).parent)
        if run_dir is not None or config.output.run_name:
            run_dir = Path(run_dir) if run_dir is not None else config.output.dir / str(config.output.run_name)
            what = (
                "output.run_name"
                if config.output.run_name and run_dir.name == config.output.run_name
                else "the run directory"
            )
            claim = claim_named(run_dir, what)
        else:
            claim = claim_timestamped(config.output.dir, timestamped_run_dir(config.name))
        run_dir, lock = claim.run_dir, claim.lock
        store = cls(run_dir, lock)
        store._created = claim.created
        store._metrics_digest = MetricsDigest()  # the file was just created empty
        try:
            store._write_config(with_absolute_paths(config))
            environment = {**(engine or {"engine": "simulation"}), **environment_info(device)}
            write_json_atomic(run_dir / ENVIRONMENT_FILE, environment, durable=True, root=run_dir, indent=2)
        except BaseException:
            store.discard()
            raise
        return store

    def discard(self) -> None:
        """Give back a new run's directory that committed no round (stopped or refused at its start): fedsim's
        own files go, and the folder too when fedsim made it (``fedsim.rundir.claim``); then the lock is freed."""
        if self._run_lock is None or self._created is None:
            raise RuntimeError("only the store that created a run directory may discard it")
        give_back(self.run_dir, self._created)
        self.close()

    def record_resumption(self, device: str, engine: dict[str, Any]) -> None:
        """Add a resumed session's engine and environment to environment.json (`resumed`, oldest first)."""
        path = self.run_dir / ENVIRONMENT_FILE
        environment = json.loads(path.read_text()) if path.is_file() else {}
        environment.setdefault("resumed", []).append({**engine, **environment_info(device)})
        write_json_atomic(path, environment, durable=True, root=self.run_dir, indent=2)

    def _write_config(self, config: ExperimentConfig, *, with_record: bool = True) -> None:
        text = dump_config(config)
        write_fingerprint(self.run_dir, text, with_record=with_record)
        write_text_atomic(self.run_dir / CONFIG_FILE, text, durable=True, root=self.run_dir)

    def _check_fingerprint(
        self, config: ExperimentConfig, recorded: dict[str, Any] | None, rounds: int | None
    ) -> ExperimentConfig:
        """The run's config as it started (refusing an edited one or another fedsim), with ``rounds`` raised."""
        if recorded is not None:
            if recorded["fedsim"] != fedsim_version():
                raise ConfigError(
                    f"--resume {self.run_dir}: the run started with fedsim {recorded['fedsim']}, this is "
                    f"{fedsim_version()}; resume it with that version"
                )
            changed = config_changes(recorded["config"], dump_config(config))
            if changed:
                raise ConfigError(
                    f"--resume {self.run_dir}: {CONFIG_FILE} was edited since the run started ({', '.join(changed)}); "
                    "a resumed run must continue the same experiment (use --rounds N to extend federation.rounds)"
                )
        if rounds is None:
            return config
        if rounds < config.federation.rounds:
            raise ConfigError(
                f"--rounds {rounds}: must be >= the run's federation.rounds ({config.federation.rounds}); "
                "a run can be extended, not cut"
            )
        extended = config.model_copy(deep=True)
        extended.federation.rounds = rounds
        # a run with no record yet (older than it) gets one only from its next commit on: not claimed before
        self._write_config(extended, with_record=keeps_integrity_record(recorded) or self.commits_path.is_file())
        return extended

    def _fingerprint_for_resume(self) -> dict[str, Any] | None:
        """fingerprint.json's record; refused in one line when it is missing from a run that keeps a commit record
        (fedsim wrote fingerprints before it kept commit records), and said in a warning for an older run."""
        recorded = read_fingerprint(self.run_dir, f"--resume {self.run_dir}")
        if recorded is not None:
            return recorded
        if self.commits_path.exists():
            raise ConfigError(
                f"--resume {self.run_dir}: '{self.run_dir / FINGERPRINT_FILE}' is missing, but the run keeps "
                f"{COMMITS_FILE}, so fedsim wrote one: restore it from a copy of the run; without it an edited "
                f"{CONFIG_FILE} could not be told apart from the config the run started with"
            )
        logger.warning(
            "--resume %s: no %s (the run predates it): %s cannot be checked against the config the run started with",
            self.run_dir,
            FINGERPRINT_FILE,
            CONFIG_FILE,
        )
        return None

    @classmethod
    def open_for_resume(cls, run_dir: Path, rounds: int | None = None) -> tuple[RunStore, ExperimentConfig, int]:
        """Open a killed run; returns the store, its config and the last committed round.

        The config must be the one the run started with (``fingerprint.json``); ``rounds`` extends
        ``federation.rounds``, the one change a resumed run may make. The checkpoint and the rows must agree
        with the commit record (``fedsim.rundir.verify``); when the rows end in a row torn inside the last
        committed round, the run goes back to the newest earlier round that checks out, and the later rounds
        run again. The store holds the directory's lock (refused, naming the holder, while another process
        writes it) until ``close``; nothing is written before every file it reads has checked out.
        """
        run_dir = Path(run_dir)
        if not (run_dir / CONFIG_FILE).is_file():
            raise FileNotFoundError(f"--resume {run_dir}: not a fedsim run directory (no {CONFIG_FILE})")
        store = cls(run_dir, RunLock.acquire(run_dir, f"--resume {run_dir}"))
        try:
            config = load_config(run_dir / CONFIG_FILE)
            last = store.last_committed_round()
            if last is None:
                raise FileNotFoundError(
                    f"--resume {run_dir}: no checkpoint to resume from (the run was killed before round 0 was "
                    "committed); start it again under another output.run_name, or remove that folder first"
                )
            recorded = store._fingerprint_for_resume()
            try:
                store.load_checkpoint(last)
                last = verified_resume_round(run_dir, store._committed_rounds(), keeps_integrity_record(recorded))
            except ConfigError as error:
                raise ConfigError(f"--resume {run_dir}: {error}") from None
            config = store._check_fingerprint(config, recorded, rounds)
            remove_stale_temporaries(run_dir)
            # checkpoints first: a resume killed half-way then finds rows and record agreeing with its last one
            store._discard_checkpoints_after(last)
            store._drop_rows_after(last)
            keep_commits_through(store.commits_path, last, root=run_dir)
        except BaseException:
            store.close()
            raise
        return store, config, last

    def _discard_checkpoints_after(self, last_round: int) -> None:
        """Remove the checkpoints of rounds that run again (a row torn inside them: see verify)."""
        later = [r for r in self._committed_rounds() if r > last_round]
        for server_round in later:
            self.checkpoint_path(server_round).unlink()
        if later:
            fsync_directory(self.checkpoint_dir)

    def _drop_rows_after(self, last_round: int) -> None:
        """Keep the rows of rounds up to ``last_round``, each line as it was written: the prefix committed with
        a round must stay byte for byte what its checksum covers. A line torn by a kill goes."""
        kept = []
        content = self.metrics_path.read_bytes() if self.metrics_path.is_file() else b""
        for line in content.splitlines(keepends=True):
            row = _parsed_row(line)
            if row is not None and row.get("round", 0) <= last_round:
                kept.append(line if line.endswith(b"\n") else line + b"\n")
        body = b"".join(kept)
        write_bytes_atomic(self.metrics_path, body, durable=True, root=self.run_dir)
        with self._append_lock:
            self._metrics_digest = MetricsDigest(body)

    # ------------------------------------------------------------------------------- metrics
    def append(self, row: dict[str, Any]) -> None:
        """Append one metrics row, stamped with the schema version and the time, and make it durable.

        Rows written before versions existed have no ``schema``: they read as version 1.
        """
        if "round" not in row or "event" not in row:
            raise ValueError("every metrics row needs 'round' and 'event'")
        line = json.dumps({**row, "schema": SCHEMA_VERSION, "time": round(time.time(), 3)}, allow_nan=True) + "\n"
        with self._append_lock:
            digest = self._digest()
            append_line_durably(self.metrics_path, line, root=self.run_dir)
            digest.add(line.encode())  # only once the row is durable: a failed append is cut back

    def _digest(self) -> MetricsDigest:
        """The metrics file's running checksum (call with the append lock held)."""
        if self._metrics_digest is None:  # a store opened without create or open_for_resume
            content = self.metrics_path.read_bytes() if self.metrics_path.is_file() else b""
            self._metrics_digest = MetricsDigest(content)
        return self._metrics_digest

    def rows(self) -> list[dict[str, Any]]:
        """All complete rows; a line torn by a kill mid-write is ignored."""
        if not self.metrics_path.exists():
            return []
        rows = []
        for line in self.metrics_path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return rows

    # --------------------------------------------------------------------------- checkpoints
    def checkpoint_path(self, server_round: int) -> Path:
        return self.checkpoint_dir / checkpoint_file(server_round)

    def save_checkpoint(self, server_round: int, state_dict: dict[str, torch.Tensor]) -> None:
        """Commit ``server_round``: its checkpoint written, its line in the commit record, then the rename."""
        path = inside(self.run_dir, self.checkpoint_path(server_round))  # before mkdir: a symlinked folder leads out
        inside(self.run_dir, self.commits_path)
        with self._append_lock:  # every row appended so far, and only those, is committed with the round
            metrics_bytes, metrics_sha256 = self._digest().prefix()

        def record(written: Path) -> None:
            commit = Commit(server_round, sha256_of_file(written), metrics_bytes, metrics_sha256)
            append_commit(self.commits_path, commit, root=self.run_dir)

        self.checkpoint_dir.mkdir(exist_ok=True)
        state = {k: v.detach().cpu() for k, v in state_dict.items()}
        # durable: the checkpoint's presence commits the round (see the module docstring)
        save_torch_atomic(path, state, durable=True, root=self.run_dir, before_rename=record)

    def load_checkpoint(self, server_round: int) -> dict[str, torch.Tensor]:
        """The round's global model; one line naming the file (and the round to fall back to) if it is damaged."""
        path = self.checkpoint_path(server_round)
        try:
            state = load_weights_only(path, str(path))
        except ModelError as refused:  # objects other than tensors: refused before anything in them ran
            raise self._damaged_checkpoint(server_round, str(refused).removeprefix(f"{path}: ")) from None
        except Exception as error:  # torch.load raises many types for truncated or foreign files
            raise self._damaged_checkpoint(server_round, _load_failure(error)) from None
        if not isinstance(state, dict) or not all(
            isinstance(key, str) and isinstance(value, torch.Tensor) for key, value in state.items()
        ):
            raise self._damaged_checkpoint(server_round, f"holds a {type(state).__name__}, not a state_dict")
        for key, value in state.items():
            if value.is_floating_point() and not bool(torch.isfinite(value).all()):
                # a non-finite aggregate is never committed (fedsim.engine.lifecycle.rounds): this file was altered
                raise self._damaged_checkpoint(server_round, f"'{key}' holds NaN or infinite values")
        return state

    def _damaged_checkpoint(self, server_round: int, reason: str) -> ConfigError:
        path = self.checkpoint_path(server_round)
        earlier = [r for r in self._committed_rounds() if r < server_round]
        if earlier:
            remedy = f"remove it to resume from round {max(earlier)}"
        else:
            remedy = "the run has no earlier checkpoint to fall back to: start it again"
        return ConfigError(f"checkpoint '{path}' is damaged ({reason}); {remedy}")

    def _committed_rounds(self) -> list[int]:
        if not self.checkpoint_dir.is_dir():
            return []
        return [int(m.group(1)) for p in self.checkpoint_dir.iterdir() if (m := CHECKPOINT_PATTERN.match(p.name))]

    def last_committed_round(self) -> int | None:
        return max(self._committed_rounds(), default=None)

    def prune_checkpoints(self, keep: int) -> None:
        """Keep the checkpoint of round ``keep`` and the one before it (when the user did not ask for all of them).

        The one before is what a resume goes back to when the rows of round ``keep`` end in a torn row: that
        round then runs again (see verify) instead of losing its row."""
        kept = {keep, max((r for r in self._committed_rounds() if r < keep), default=keep)}
        for path in self.checkpoint_dir.glob(CHECKPOINT_GLOB):
            match = CHECKPOINT_PATTERN.match(path.name)
            if match and int(match.group(1)) not in kept:
                path.unlink()

    # ------------------------------------------------------------------------------- summary
    def write_json(self, name: str, payload: dict[str, Any]) -> None:
        write_json_atomic(self.run_dir / name, payload, durable=True, root=self.run_dir, indent=2)

    def read_json(self, name: str) -> dict[str, Any]:
        return json.loads((self.run_dir / name).read_text())


def _parsed_row(line: bytes) -> dict[str, Any] | None:
    """The row on one metrics line; None for a line torn by a kill (or anything else that is no JSON object)."""
    try:
        row = json.loads(line)
    except ValueError:
        return None
    return row if isinstance(row, dict) else None


def _load_failure(error: BaseException) -> str:
    """What torch.load's error says, in a few words (its messages run over several lines and paragraphs)."""
    if isinstance(error, EOFError):
        return "the file ends early"
    return first_line(error).split(". ")[0].rstrip(".")
