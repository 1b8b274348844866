"""A small sweep base config, written to a file, and the command line run on it."""

from pathlib import Path

import yaml
from tiny_configs import tiny_raw

from fedsim.cli import main

BASE = tiny_raw(name="g", seed=0, federation={"num_clients": 4, "rounds": 2})


def write(tmp_path: Path, raw: dict, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw))
    return path


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err
