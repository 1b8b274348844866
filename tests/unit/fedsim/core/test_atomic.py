"""Atomic writes stay inside the directory they belong to: a symlink on the way out is refused in one line."""

import pytest

from fedsim.core.atomic import OutsideDirectory, append_line_durably, inside, write_text_atomic
from fedsim.core.errors import ConfigError


@pytest.fixture
def run_and_outside(tmp_path):
    run, outside = tmp_path / "run", tmp_path / "outside"
    run.mkdir()
    outside.mkdir()
    return run, outside


def test_a_symlinked_folder_on_the_way_is_refused_naming_the_link_and_its_target(run_and_outside):
    run, outside = run_and_outside
    (run / "report").symlink_to(outside)
    with pytest.raises(OutsideDirectory) as refused:
        write_text_atomic(run / "report" / "report.md", "leak", root=run)
    message = str(refused.value)
    assert "\n" not in message and f"'{run / 'report'}' is a symlink to '{outside}'" in message
    assert isinstance(refused.value, ConfigError)  # the CLI prints it as one line, exit 2
    assert list(outside.iterdir()) == []


def test_a_symlinked_file_pointing_outside_is_refused_and_the_outside_file_is_untouched(run_and_outside):
    run, outside = run_and_outside
    (outside / "victim").write_text("kept")
    (run / "metrics.jsonl").symlink_to(outside / "victim")
    with pytest.raises(OutsideDirectory, match="is a symlink to"):
        append_line_durably(run / "metrics.jsonl", "row\n", root=run)
    with pytest.raises(OutsideDirectory):
        write_text_atomic(run / "metrics.jsonl", "row\n", root=run)
    assert (outside / "victim").read_text() == "kept"


def test_paths_inside_are_accepted_also_through_a_symlink_that_stays_inside_and_a_symlinked_root(tmp_path):
    real = tmp_path / "real"
    (real / "folder").mkdir(parents=True)
    (real / "alias").symlink_to(real / "folder")
    linked_root = tmp_path / "linked"
    linked_root.symlink_to(real)
    assert inside(linked_root, linked_root / "alias" / "file") == linked_root / "alias" / "file"
    write_text_atomic(linked_root / "alias" / "file", "ok", root=linked_root)
    assert (real / "folder" / "file").read_text() == "ok"


def test_dot_dot_out_of_the_root_is_refused(run_and_outside):
    run, _ = run_and_outside
    with pytest.raises(OutsideDirectory, match="resolves to"):
        inside(run, run / ".." / "outside" / "x")
