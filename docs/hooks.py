"""MkDocs hooks: the pages generated from the code, so that none can go stale.

- ``reference/cli.md``: the ``<!-- cli-reference -->`` marker becomes every ``fedsim`` command's ``--help``,
  walked from ``fedsim.cli.build_parser()`` when the site is built.
- ``reference/config.md``: its ``config-schema`` block is committed (GitHub shows it too) and must equal
  ``fedsim config-schema --markdown``; a stale block fails the build (and ``tests/unit/fedsim/config/test_plugins.py``).
- ``README.md`` is not part of the site, but every relative link in it (to a file, and to a heading of a Markdown
  file) must resolve, or the build fails.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from markdown.extensions.toc import slugify
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
        sections = [
            f"## `{command.prog}`\n\n```text\n{command.format_help().rstrip()}\n```\n"
            for command in _commands(build_parser())
        ]
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


def readme_link_errors(readme: Path) -> list[str]:
    """The README's relative links that name no file, or a heading that its Markdown file does not have."""
    errors = []
    for target in re.findall(r"\]\(([^)\s]+)\)", readme.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        path, _, anchor = target.partition("#")
        linked = readme.parent / path if path else readme
        if not linked.exists():
            errors.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md":
            headings = re.findall(r"^#+\s+(.+?)\s*$", linked.read_text(), flags=re.MULTILINE)
            if anchor not in {slugify(heading, "-") for heading in headings}:
                errors.append(f"{target}: {path or 'README.md'} has no such heading")
    return errors


def on_pre_build(config) -> None:
    errors = readme_link_errors(Path(config.config_file_path).parent / "README.md")
    if errors:
        raise PluginError("README.md links that do not resolve: " + "; ".join(errors))


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri == "reference/cli.md":
        if CLI_MARKER not in markdown:
            raise PluginError(f"docs/reference/cli.md: the {CLI_MARKER} marker is missing")
        return markdown.replace(CLI_MARKER, cli_markdown())
    if page.file.src_uri == "reference/config.md":
        check_config_reference(markdown)
    return markdown
