"""Where the repository's own files are, for tests that read them (bundled configs, README, pyproject)."""

from pathlib import Path

#: the repository root: tests/helpers/paths.py is two folders below it
REPO_ROOT = Path(__file__).resolve().parents[2]
