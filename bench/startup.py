"""How long the command line takes to start: each quick command's wall time, and what importing costs.

Each command runs in a fresh interpreter, as the ``fedsim`` entry point runs it (``fedsim.cli.main`` with the
command's arguments), ``--repeats`` times after one warm-up run that fills the operating system's file cache; the table
gives the median and the range. Beside the commands, the import alone: ``import fedsim.cli`` (what ``--help``
pays) and the config with every plugin registry (``import fedsim.config``, what ``list``, ``validate``,
``config-schema`` and ``sweep --dry-run`` pay), each in a fresh interpreter, and which heavy packages each
command leaves imported (torch, Flower, Ray, pandas, opacus, torchvision, matplotlib). Nothing is trained.

    .venv/bin/python -m bench.startup [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench.common import REPO

#: the commands that should answer in seconds: none trains, none starts Ray
COMMANDS = {
    "fedsim --help": ["--help"],
    "fedsim list": ["list"],
    "fedsim validate configs/demo.yaml": ["validate", "configs/demo.yaml"],
    "fedsim config-schema": ["config-schema"],
    "fedsim sweep --dry-run (001-defense-frontier)": [
        "sweep",
        "configs/papers/001-defense-frontier.yaml",
        "--dry-run",
        "--out",
        "{tmp}/dry-run",
    ],
}
#: imports alone, each in a fresh interpreter
IMPORTS = {"import fedsim.cli": "import fedsim.cli", "import fedsim.config": "import fedsim.config"}
#: packages that take seconds to import; which of them a command pulls in is the table's last column
HEAVY = ("torch", "flwr", "ray", "pandas", "opacus", "torchvision", "matplotlib", "scipy")

#: runs a command as the ``fedsim`` entry point does, then names the heavy packages it left imported
PROBE = """
import sys
sys.argv = ["fedsim", *sys.argv[1:]]
from fedsim.cli import main
try:
    code = main()
finally:  # --help leaves by SystemExit
    print("\\nimported:", ",".join(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)
sys.exit(code)
"""


def timed(argv: list[str]) -> tuple[float, str]:
    """Wall seconds of one run of ``argv`` from the repository root, and its stderr; fails on a non-zero exit."""
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return seconds, done.stderr


def measure(argv: list[str], repeats: int) -> tuple[list[float], str]:
    timed(argv)  # warm-up: the file cache, not the interpreter, is what a second run shares
    runs = [timed(argv) for _ in range(repeats)]
    return [seconds for seconds, _ in runs], runs[-1][1]


def imported(stderr: str) -> str:
    line = next((line for line in reversed(stderr.splitlines()) if line.startswith("imported:")), "imported:")
    return line.removeprefix("imported:").strip().replace(",", ", ") or "-"


def row(label: str, seconds: list[float], heavy: str) -> str:
    median = statistics.median(seconds)
    return f"| {label} | {median:.2f} | {min(seconds):.2f}-{max(seconds):.2f} | {heavy} |"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per command, after one warm-up")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats = {args.repeats}; allowed: 1 or more")
    probe = PROBE.format(heavy=HEAVY)
    lines = ["| command | median (s) | range (s) | heavy packages imported |", "| --- | --- | --- | --- |"]
    with tempfile.TemporaryDirectory() as tmp:
        for label, command in COMMANDS.items():
            command = [part.format(tmp=tmp) for part in command]
            seconds, stderr = measure([sys.executable, "-c", probe, *command], args.repeats)
            lines.append(row(label, seconds, imported(stderr)))
            print(lines[-1], flush=True)
    for label, statement in IMPORTS.items():
        names = f"','.join(m for m in {HEAVY!r} if m in sys.modules)"
        check = f"{statement}; import sys; print('imported:', {names}, file=sys.stderr)"
        seconds, stderr = measure([sys.executable, "-c", check], args.repeats)
        lines.append(row(label, seconds, imported(stderr)))
        print(lines[-1], flush=True)
    print(f"\n{args.repeats} timed run(s) each after a warm-up, in a fresh interpreter, on {_cpus()} CPU(s):\n")
    print("\n".join(lines))


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


if __name__ == "__main__":
    main()
