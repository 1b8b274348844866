"""The commit record: one durable line per committed round, holding the checksums that ``--resume`` checks.

``RUN_DIR/commits.jsonl`` gets a line as each round is committed: the round, the sha256 of its checkpoint,
and the length and sha256 of ``metrics.jsonl`` as it stood at that moment (its committed prefix). Rows
appended later (the next round's, or attack rows that finish after the commit) lie after that prefix, and
every row inside it belongs to the round committed or an earlier one, so dropping the rows of uncommitted
rounds on resume leaves the prefix byte for byte as it was.

The line is written (and fsynced) before the checkpoint is renamed into place, and the rename stays what
commits the round: a line whose checkpoint never appeared is ignored, the newest line of a round wins (a
round that ran again after a resume), and a line torn by a kill is ignored.

``MetricsDigest`` keeps the prefix's checksum running as rows are appended, so a commit never re-reads the
metrics file.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from fedsim.core.atomic import append_line_durably, write_bytes_atomic


@dataclass(frozen=True)
class Commit:
    """What was on disk when ``round`` was committed."""

    round: int
    checkpoint_sha256: str
    metrics_bytes: int  # the committed prefix of metrics.jsonl: its first metrics_bytes bytes ...
    metrics_sha256: str  # ... and their sha256


class MetricsDigest:
    """The length and sha256 of the metrics file, advanced by every appended row."""

    def __init__(self, content: bytes = b"") -> None:
        self._sha256 = hashlib.sha256(content)
        self._length = len(content)

    def add(self, appended: bytes) -> None:
        self._sha256.update(appended)
        self._length += len(appended)

    def prefix(self) -> tuple[int, str]:
        """``(metrics_bytes, metrics_sha256)`` of everything added so far."""
        return self._length, self._sha256.hexdigest()


def sha256_of_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_of_prefix(content: bytes, length: int) -> str:
    return hashlib.sha256(content[:length]).hexdigest()


def append_commit(path: Path, commit: Commit, *, root: Path) -> None:
    """Add ``commit``'s line to the record, durably (before its checkpoint is renamed into place)."""
    append_line_durably(path, json.dumps(asdict(commit)) + "\n", root=root)


def _parse(line: bytes) -> Commit | None:
    """The commit on one line; None for a torn or foreign line."""
    if not line.endswith(b"\n"):
        return None  # torn by a kill mid-append
    try:
        fields = json.loads(line)
        commit = Commit(**fields)
    except (ValueError, TypeError):  # not JSON, not an object, or other keys
        return None
    types_fit = (
        isinstance(commit.round, int)
        and isinstance(commit.checkpoint_sha256, str)
        and isinstance(commit.metrics_bytes, int)
        and isinstance(commit.metrics_sha256, str)
    )
    return commit if types_fit else None


def _lines(path: Path) -> list[tuple[bytes, Commit]]:
    return [(line, commit) for line in path.read_bytes().splitlines(keepends=True) if (commit := _parse(line))]


def read_commits(path: Path) -> dict[int, Commit] | None:
    """Each round's newest commit; None when the run has no record (written before fedsim kept one)."""
    if not path.is_file():
        return None
    return {commit.round: commit for _, commit in _lines(path)}


def keep_commits_through(path: Path, last_round: int, *, root: Path) -> None:
    """Rewrite the record with the lines of rounds up to ``last_round`` only, verbatim (a torn line goes too)."""
    if not path.is_file():
        return
    kept = b"".join(line for line, commit in _lines(path) if commit.round <= last_round)
    write_bytes_atomic(path, kept, durable=True, root=root)
