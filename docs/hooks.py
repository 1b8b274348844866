"""MkDocs hooks: the pages generated from the code, so that none can go stale.

- ``reference/cli.md``: the ``<!-- cli-reference -->`` marker becomes every ``fedsim`` command's ``--help``,
  walked from ``fedsim.cli.build_parser()`` when the site is built.
- ``reference/config.md``: its ``config-schema`` block is committed (GitHub shows it too) and must equal
  ``fedsim config-schema --markdown``; a stale block fails the build (and ``tests/test_plugins.py``).
"""

from __future__ import annotations

import argparse
import os

from mkdocs.exceptions import PluginError

CLI_MARKER = "<!-- cli-reference -->"
SCHEMA_START, SCHEMA_END = "<!-- config-schema:start -->\n", "<!-- config-schema:end -->"
#: help text is wrapped at this width whatever terminal builds the site, so every build is the same
HELP_WIDTH = "100"


def _commands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parser and every sub-command's parser below it, depth first, in the order they were added."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
                found.extend(_commands(sub))
    return found


def cli_markdown() -> str:
    """One section per command: its name as a heading and its ``--help`` as a code block."""
    from fedsim.cli import build_parser

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_WIDTH
    try:
        sections = [f"## `{command.prog}`\n\n```text\n{command.format_help().rstrip()}\n```\n"
                    for command in _commands(build_parser())]
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
    return "\n".join(sections)


def check_config_reference(markdown: str) -> None:
    """Fail the build when the committed config reference differs from the schema the code composes."""
    from fedsim.config.schema import schema_markdown

    if SCHEMA_START not in markdown or SCHEMA_END not in markdown:
        raise PluginError("docs/reference/config.md: the config-schema markers are missing")
    block = markdown[markdown.index(SCHEMA_START) + len(SCHEMA_START) : markdown.index(SCHEMA_END)]
    if block != "\n" + schema_markdown() + "\n":
        raise PluginError(
            "docs/reference/config.md is stale: regenerate the block between its config-schema markers "
            "with `fedsim config-schema --markdown`"
        )


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri == "reference/cli.md":
        if CLI_MARKER not in markdown:
            raise PluginError(f"docs/reference/cli.md: the {CLI_MARKER} marker is missing")
        return markdown.replace(CLI_MARKER, cli_markdown())
    if page.file.src_uri == "reference/config.md":
        check_config_reference(markdown)
    return markdown
