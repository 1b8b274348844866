"""Running the command line on bad input: the one line it prints."""

from fedsim.cli import main


def one_line_error(capsys, *argv) -> str:
    assert main(list(argv)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]
