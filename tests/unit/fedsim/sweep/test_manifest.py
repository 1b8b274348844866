"""The sweep manifest: read back only with its points inside the sweep directory."""

import json

import pytest

from fedsim.config import ConfigError
from fedsim.sweep import read_manifest


def test_a_manifest_edited_to_point_outside_the_sweep_is_refused_naming_the_point(tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (tmp_path / "elsewhere").mkdir()
    points = [{"name": "01-seed-1", "run_dir": "../elsewhere", "labels": {}, "status": "complete"}]
    (sweep / "sweep.json").write_text(json.dumps({"grid": {}, "points": points}))
    with pytest.raises(ConfigError, match=r"point '01-seed-1' has run_dir '\.\./elsewhere'") as refused:
        read_manifest(sweep)
    assert str(tmp_path / "elsewhere") in str(refused.value) and "\n" not in str(refused.value)
