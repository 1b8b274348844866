"""Which round ``--resume`` restarts after: the last committed round whose checkpoint and rows check out.

A round's line in ``commits.jsonl`` (``fedsim.rundir.commits``) records its checkpoint's sha256 and the prefix
of ``metrics.jsonl`` committed with it. A resume trusts the newest checkpoint only when its sha256 is the one
recorded, and the metrics file only when it still begins with that prefix; otherwise it refuses in one line
naming the file, before anything is rewritten. One fault is repaired rather than refused: a metrics file cut
inside the committed prefix and ending in a torn row (the machine died mid-write) resumes from the newest
earlier round whose checkpoint and rows do check out, so the torn round runs again instead of losing its row.

A run whose ``fingerprint.json`` says it was written with the record (``fedsim.rundir.fingerprint``) is refused
without it: deleting or emptying ``commits.jsonl`` does not switch the checks off. Runs written before the
record existed have no ``commits.jsonl`` (and no such fingerprint): they resume unchecked, with a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from fedsim.core.errors import ConfigError
from fedsim.rundir.commits import Commit, read_commits, sha256_of_file, sha256_of_prefix
from fedsim.rundir.layout import CHECKPOINT_DIR, COMMITS_FILE, METRICS_FILE, checkpoint_file

logger = logging.getLogger("fedsim")


def verified_resume_round(run_dir: Path, checkpoint_rounds: Sequence[int], record_kept: bool = False) -> int:
    """The round to resume after, out of the rounds that have a checkpoint; ConfigError (one line) when the run's
    files disagree with its commit record. ``record_kept``: the run's fingerprint says it keeps one."""
    run_dir = Path(run_dir)
    last = max(checkpoint_rounds)
    commits = read_commits(run_dir / COMMITS_FILE)
    if not commits and record_kept:
        state = "is missing" if commits is None else "holds no commit"
        raise ConfigError(
            f"'{run_dir / COMMITS_FILE}' {state}, but the run's fingerprint.json records that the run keeps it: its "
            "rows and checkpoints cannot be verified without it; restore it from a copy of the run, or start the run "
            "again"
        )
    if commits is None:
        logger.warning(
            "--resume %s: no %s (the run predates it): its rows and checkpoints cannot be verified",
            run_dir,
            COMMITS_FILE,
        )
        return last
    earlier = max((r for r in checkpoint_rounds if r < last), default=None)
    fallback = f"remove it to resume from round {earlier}" if earlier is not None else "start the run again"
    checkpoint = run_dir / CHECKPOINT_DIR / checkpoint_file(last)
    commit = commits.get(last)
    if commit is None:
        if record_kept or any(recorded < last for recorded in commits):
            raise ConfigError(
                f"checkpoint '{checkpoint}' has no line in '{run_dir / COMMITS_FILE}': this run never committed "
                f"round {last} (copied in from elsewhere?); {fallback}"
            )
        # older than every line: written by a fedsim without the record, before this one resumed the run
        logger.warning(
            "--resume %s: checkpoint '%s' predates %s and cannot be verified", run_dir, checkpoint, COMMITS_FILE
        )
        return last
    if sha256_of_file(checkpoint) != commit.checkpoint_sha256:
        raise ConfigError(
            f"checkpoint '{checkpoint}' does not match the sha256 recorded in {COMMITS_FILE} when round {last} was "
            f"committed (replaced or altered); restore it, or {fallback}"
        )
    metrics = run_dir / METRICS_FILE
    content = metrics.read_bytes() if metrics.is_file() else b""
    if _holds_prefix(content, commit):
        return last
    if _torn_inside_prefix(content, commit):
        for candidate in sorted((r for r in checkpoint_rounds if r < last), reverse=True):
            if _checks_out(run_dir, content, commits.get(candidate)):
                logger.warning(
                    "--resume %s: %s ends in a row torn among round %d's committed rows: resuming from round %d, "
                    "rounds %d-%d run again",
                    run_dir,
                    METRICS_FILE,
                    last,
                    candidate,
                    candidate + 1,
                    last,
                )
                return candidate
        raise ConfigError(
            f"'{metrics}' ends in a row torn among round {last}'s committed rows, and no earlier round's checkpoint "
            "and rows check out to run it again from; start the run again"
        )
    raise ConfigError(f"'{metrics}' {_disagreement(metrics, content, commit)}; restore it, or start the run again")


def _holds_prefix(content: bytes, commit: Commit) -> bool:
    return len(content) >= commit.metrics_bytes and sha256_of_prefix(content, commit.metrics_bytes) == (
        commit.metrics_sha256
    )


def _torn_inside_prefix(content: bytes, commit: Commit) -> bool:
    """Cut inside the committed prefix, in the middle of a row: what a machine dying mid-write leaves."""
    return 0 < len(content) < commit.metrics_bytes and not content.endswith(b"\n")


def _checks_out(run_dir: Path, content: bytes, commit: Commit | None) -> bool:
    if commit is None or not _holds_prefix(content, commit):
        return False
    return sha256_of_file(run_dir / CHECKPOINT_DIR / checkpoint_file(commit.round)) == commit.checkpoint_sha256


def _disagreement(metrics: Path, content: bytes, commit: Commit) -> str:
    """How the metrics file differs from the rows committed with ``commit``, in words."""
    committed = f"the {commit.metrics_bytes} bytes of rows committed with round {commit.round}"
    if not metrics.is_file():
        return f"is missing, but {COMMITS_FILE} records {committed}"
    if not content:
        return f"is empty, but {COMMITS_FILE} records {committed}"
    if len(content) < commit.metrics_bytes:
        return f"holds {len(content)} bytes, fewer than {committed} ({COMMITS_FILE}): rows were removed"
    return f"no longer begins with {committed} (their sha256 differs from {COMMITS_FILE}'s): rows were edited"
