"""A signal no run handles ends the command with one line and the shell's status: SIGTERM as Ctrl-C, and a stop
while the report of a complete run is written says the run is complete."""

from __future__ import annotations

import signal

import pytest
import yaml
from tiny_configs import tiny_raw

import fedsim.cli as cli
import fedsim.cli.report as cli_report
from fedsim.core.command_signals import sigterm_interrupts
from fedsim.core.errors import Interrupted


@pytest.fixture
def sigterm_restored():
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


def test_sigterm_outside_a_run_interrupts_as_ctrl_c_does(sigterm_restored):
    sigterm_interrupts()
    with pytest.raises(Interrupted) as interrupted:
        signal.raise_signal(signal.SIGTERM)  # was: the system default, the process killed without a line
    assert interrupted.value.signum == signal.SIGTERM


def test_a_sigterm_while_the_report_of_a_complete_run_is_written_says_the_run_is_complete(
    tmp_path, capsys, monkeypatch, sigterm_restored
):
    import fedsim.engine.run as runner

    run_dir = tmp_path / "runs" / "done"
    monkeypatch.setattr(runner, "run_experiment", lambda *args, **kwargs: run_dir)
    monkeypatch.setattr(cli_report, "print_report", lambda run: signal.raise_signal(signal.SIGTERM))
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(tiny_raw()))
    sigterm_interrupts()  # as the `fedsim` command does first

    code = cli.main(["run", str(config), "--report", "--quiet"])
    assert code == 143
    assert capsys.readouterr().err.strip() == (
        f"fedsim: interrupted while writing the report; the run is complete in {run_dir}: "
        f"`fedsim report {run_dir}` writes it"
    )  # was: "interrupted before the first round; nothing to resume" (Ctrl-C), or killed without a line (SIGTERM)
