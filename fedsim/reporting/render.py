"""One report, two renderings: Markdown (figures linked, next to the CSVs) and self-contained HTML
(figures embedded as base64 PNG), from the same list of sections, so the two never disagree."""

from __future__ import annotations

import base64
import html
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd


@dataclass(frozen=True)
class Text:
    text: str  # a paragraph; `code` spans are kept in both renderings


@dataclass(frozen=True)
class Image:
    path: Path
    caption: str
    kind: str = ""  # "reconstruction": shown large, pixels kept sharp


@dataclass(frozen=True)
class Table:
    frame: pd.DataFrame
    csv: str | None = None  # the CSV file holding the full table, linked under it


@dataclass(frozen=True)
class Code:
    text: str
    title: str  # shown as a collapsible summary in HTML, a bold line in Markdown
    language: str = ""


Block = Text | Image | Table | Code


@dataclass
class ReportSection:
    title: str
    blocks: list[Block] = field(default_factory=list)
    level: int = 2


def cell(value: object) -> str:
    """Floats with 4 significant decimals, NaN and None as empty, +inf as `inf`."""
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return f"{value:.4g}" if abs(value) >= 1000 or (value != 0 and abs(value) < 1e-3) else f"{value:.4f}"
    return str(value)


def markdown_table(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "_(empty)_\n"
    head = "| " + " | ".join(str(c) for c in frame.columns) + " |"
    rule = "|" + "---|" * len(frame.columns)
    body = ["| " + " | ".join(cell(v).replace("|", "\\|") for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body]) + "\n"


def render_markdown(title: str, sections: list[ReportSection], report_dir: Path) -> str:
    out = [f"# {title}\n"]
    for section in sections:
        out.append(f"{'#' * section.level} {section.title}\n")
        for block in section.blocks:
            if isinstance(block, Text):
                out.append(block.text + "\n")
            elif isinstance(block, Image):
                out.append(f"![{block.caption}]({_relative(block.path, report_dir)})\n\n_{block.caption}_\n")
            elif isinstance(block, Table):
                out.append(markdown_table(block.frame) + (f"\n([{block.csv}]({block.csv}))\n" if block.csv else ""))
            elif isinstance(block, Code):
                out.append(f"**{block.title}**\n\n```{block.language}\n{block.text.rstrip()}\n```\n")
    return "\n".join(out)


def render_html(title: str, sections: list[ReportSection]) -> str:
    body = []
    for section in sections:
        level = min(section.level, 6)
        body.append(f"<h{level}>{html.escape(section.title)}</h{level}>")
        for block in section.blocks:
            if isinstance(block, Text):
                body.append(f"<p>{_inline(block.text)}</p>")
            elif isinstance(block, Image):
                data = base64.b64encode(block.path.read_bytes()).decode()
                kind = f' class="{block.kind}"' if block.kind else ""
                body.append(
                    f'<figure{kind}><img src="data:image/png;base64,{data}" alt="{html.escape(block.caption)}">'
                    f"<figcaption>{html.escape(block.caption)}</figcaption></figure>"
                )
            elif isinstance(block, Table):
                frame = block.frame.map(cell) if not block.frame.empty else block.frame
                body.append(frame.to_html(index=False, escape=True, border=0, classes="table", na_rep=""))
                if block.csv:
                    body.append(f'<p class="csv">full table: <code>{html.escape(block.csv)}</code></p>')
            elif isinstance(block, Code):
                body.append(
                    f"<details><summary>{html.escape(block.title)}</summary>"
                    f"<pre><code>{html.escape(block.text)}</code></pre></details>"
                )
    return _PAGE.format(title=html.escape(title), body="\n".join(body))


def _inline(text: str) -> str:
    escaped = html.escape(text)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


def _relative(path: Path, start: Path) -> str:
    return Path(os.path.relpath(path.resolve(), start.resolve())).as_posix()


_PAGE = (
    """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 1150px; margin: 2em auto; padding: 0 1em; color: #222; }}
table {{ border-collapse: collapse; font-size: 0.82em; margin: 0.5em 0; display: block; """
    """max-width: 100%; overflow-x: auto; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; }}
th {{ background: #f4f4f4; }}
figure {{ margin: 1em 0; }} figure img {{ max-width: 100%; }}
figure.reconstruction img {{ width: 100%; max-width: 900px; image-rendering: pixelated; }}
.summary td:first-child {{ font-weight: 600; }}
figcaption {{ font-size: 0.85em; color: #555; }}
pre {{ background: #f7f7f7; padding: 0.6em; overflow-x: auto; font-size: 0.8em; }}
code {{ background: #f2f2f2; padding: 0 0.2em; }}
p.csv {{ font-size: 0.8em; color: #666; }}
</style></head>
<body><h1>{title}</h1>
{body}
</body></html>
"""
)
