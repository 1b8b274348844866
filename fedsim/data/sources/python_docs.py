"""``python-docs``: English sentences from the docstrings of the standard library, a text corpus that ships with Python.

Sentences of 4-12 plain lower-case words (letters only, commas dropped) from the docstrings of ``MODULES`` and
their classes and functions, read from their source files, sorted and deduplicated: the same corpus in every
process of one Python, needing no download, so the text demo and tests federate real English. The held-out test
split (``data.test_fraction``) is the public text an attacker may hold.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

from fedsim.data.registry import DATASETS
from fedsim.data.text import TextConfig, TextDataset, to_dataset

MODULES = [
    "argparse",
    "asyncio",
    "bisect",
    "calendar",
    "collections",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "email",
    "enum",
    "fractions",
    "functools",
    "gettext",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "http",
    "inspect",
    "itertools",
    "json",
    "locale",
    "logging",
    "mmap",
    "numbers",
    "operator",
    "pathlib",
    "pickle",
    "pprint",
    "random",
    "secrets",
    "selectors",
    "shutil",
    "signal",
    "socket",
    "sqlite3",
    "ssl",
    "statistics",
    "string",
    "subprocess",
    "tarfile",
    "textwrap",
    "threading",
    "typing",
    "unittest",
    "urllib",
    "weakref",
    "zipfile",
]

_WORD = re.compile(r"[A-Za-z][a-z]*,?")
_DOCUMENTED = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def python_doc_sentences(min_words: int = 4, max_words: int = 12) -> list[str]:
    """Sentences of ``min_words``-``max_words`` plain words from standard-library docstrings, sorted."""
    found: set[str] = set()
    for name in MODULES:
        for doc in source_docstrings(name):
            for sentence in re.split(r"(?<=[.!?])\s+", " ".join(doc.split())):
                words = sentence.rstrip(".!?").split()
                if min_words <= len(words) <= max_words and all(_WORD.fullmatch(word) for word in words):
                    found.add(" ".join(words).lower().replace(",", ""))
    return sorted(found)


def source_docstrings(name: str) -> list[str]:
    """The docstrings of a module's source file (module, classes, functions), read without importing it: what a
    process imported or patched (Ray, a test) cannot change them. Modules without a Python source give none."""
    spec = importlib.util.find_spec(name)
    origin = Path(spec.origin) if spec is not None and spec.origin else None
    if origin is None or origin.suffix != ".py" or not origin.is_file():
        return []
    tree = ast.parse(origin.read_text(encoding="utf-8"))
    nodes = [tree, *(node for node in ast.walk(tree) if isinstance(node, _DOCUMENTED))]
    return [doc for node in nodes if (doc := ast.get_docstring(node))]


@DATASETS.register(
    "python-docs",
    help="English sentences of the Python standard library's docstrings (ships with Python; next-token text)",
    config=TextConfig,
)
def load_python_docs(cfg: TextConfig) -> TextDataset:
    if cfg.task != "next-token":
        from fedsim.data.base import DataError

        raise DataError(f"data.task = '{cfg.task}': python-docs has no labels; it is next-token text")
    return to_dataset(cfg, (python_doc_sentences(), None), ([], None))
