"""One report, two renderings: Markdown (figures linked, next to the CSVs) and self-contained HTML
(figures embedded as base64 PNG), from the same list of sections, so the two never disagree.

In HTML every table sits in its own box that scrolls sideways when the table is wider than the page, its key
columns (``Table.pinned``, the first by default) pinned at the left edge while the rest scrolls; a gallery's
images are shown at their own pixel size, so that every image of a data set is drawn at one size, under a title
in the page's font.
"""

from __future__ import annotations

import base64
import html
import io
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


@dataclass(frozen=True)
class Table:
    frame: pd.DataFrame
    csv: str | None = None  # the CSV file holding the full table, linked under it
    pinned: int = 1  # the key columns, first ones, kept in view while a wide table scrolls sideways


@dataclass(frozen=True)
class Card:
    """One image of a gallery with its title and lines of text under it."""

    image: Path
    title: str
    lines: tuple[str, ...] = ()
    crop_top: int = 0  # px at the image's top left out in HTML (a title band the card's title replaces)
    tags: dict[str, str] = field(default_factory=dict)  # data-* attributes of the card (target, verdict, ...)


@dataclass(frozen=True)
class Gallery:
    """Cards side by side, wrapping onto further lines."""

    cards: tuple[Card, ...]
    tags: dict[str, str] = field(default_factory=dict)  # data-* attributes of the gallery (run, round)


@dataclass(frozen=True)
class Code:
    text: str
    title: str  # shown as a collapsible summary in HTML, a bold line in Markdown
    language: str = ""


Block = Text | Image | Table | Code | Gallery


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
            elif isinstance(block, Gallery):
                for card in block.cards:
                    lines = "; ".join(card.lines)
                    out.append(f"![{card.title}]({_relative(card.image, report_dir)})\n\n_{card.title}_: {lines}\n")
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
                body.append(
                    f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(block.caption)}">'
                    f"<figcaption>{_inline(block.caption)}</figcaption></figure>"
                )
            elif isinstance(block, Table):
                body.append(_html_table(block))
                if block.csv:
                    body.append(f'<p class="csv">full table: <code>{html.escape(block.csv)}</code></p>')
            elif isinstance(block, Code):
                body.append(
                    f"<details><summary>{html.escape(block.title)}</summary>"
                    f"<pre><code>{html.escape(block.text)}</code></pre></details>"
                )
            elif isinstance(block, Gallery):
                body.append(_html_gallery(block))
    return _PAGE.format(title=html.escape(title), body="\n".join(body), script=_PIN_SCRIPT)


def _html_table(block: Table) -> str:
    frame = block.frame.map(cell) if not block.frame.empty else block.frame
    table = frame.to_html(index=False, escape=True, border=0, classes="table", na_rep="")
    pinned = min(block.pinned, len(block.frame.columns))
    table = table.replace("<table ", f'<table data-pinned="{pinned}" ', 1)
    return f'<div class="table-box">{table}</div>'


def _data_attributes(tags: dict[str, str]) -> str:
    return "".join(f' data-{key}="{html.escape(value)}"' for key, value in tags.items())


def _png_data(card: Card) -> tuple[str, int, int]:
    """The card's image as base64 PNG, its top ``crop_top`` px left out, and its width and height in px."""
    from matplotlib import image as mpimg

    pixels = mpimg.imread(card.image)
    if card.crop_top:
        pixels = pixels[card.crop_top :]
    buffer = io.BytesIO()
    mpimg.imsave(buffer, pixels, format="png", cmap="gray" if pixels.ndim == 2 else None)
    height, width = pixels.shape[:2]
    return base64.b64encode(buffer.getvalue()).decode(), width, height


def _html_gallery(block: Gallery) -> str:
    cards = []
    for card in block.cards:
        data, width, height = _png_data(card)
        lines = "".join(f'<span class="line">{html.escape(line)}</span>' for line in card.lines)
        cards.append(
            f'<figure class="card"{_data_attributes(card.tags)}>'
            f'<div class="pixels"><img src="data:image/png;base64,{data}" width="{width}" height="{height}" '
            f'alt="{html.escape(card.title)}"></div>'
            f'<figcaption><span class="title">{html.escape(card.title)}</span>{lines}</figcaption></figure>'
        )
    return f'<div class="gallery"{_data_attributes(block.tags)}>{"".join(cards)}</div>'


def _inline(text: str) -> str:
    escaped = html.escape(text)
    strong = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", escaped)  # Markdown's bold, as the .md shows it
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", strong)


def _relative(path: Path, start: Path) -> str:
    return Path(os.path.relpath(path.resolve(), start.resolve())).as_posix()


_PAGE = (
    """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #222; }}
.table-box {{ max-width: 100%; overflow-x: auto; margin: 0.5em 0; }}
table {{ border-collapse: separate; border-spacing: 0; font-size: 0.82em; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; background: #fff; }}
th {{ background: #f4f4f4; }}
.table-box th.pinned, .table-box td.pinned {{ position: sticky; z-index: 1; }}
.table-box td.pinned {{ background: #fafafa; }}
.table-box td.pinned, .table-box th.pinned {{ white-space: nowrap; max-width: 16em; overflow: hidden; """
    """text-overflow: ellipsis; }}
.table-box td.pinned-last, .table-box th.pinned-last {{ box-shadow: inset -1px 0 0 #bbb; }}
figure {{ margin: 1em 0; }} figure img {{ max-width: 100%; }}
.gallery {{ display: flex; flex-wrap: wrap; gap: 0.6em; margin: 0.5em 0 1.2em; }}
.gallery figure.card {{ margin: 0; padding: 0.3em; border: 1px solid #ddd; border-left: 4px solid #bbb; """
    """max-width: 100%; box-sizing: border-box; }}
.gallery figure.card[data-verdict="leaks"] {{ border-left-color: #c0392b; }}
.gallery .pixels {{ overflow-x: auto; max-width: 100%; }}
.gallery .pixels img {{ display: block; max-width: none; image-rendering: pixelated; }}
.gallery figcaption {{ font-size: 0.85em; color: #333; }}
.gallery figcaption span {{ display: block; }}
.gallery figcaption .title {{ font-weight: 600; margin-top: 0.2em; }}
.summary td:first-child {{ font-weight: 600; }}
figcaption {{ font-size: 0.85em; color: #555; }}
pre {{ background: #f7f7f7; padding: 0.6em; overflow-x: auto; font-size: 0.8em; }}
code {{ background: #f2f2f2; padding: 0 0.2em; }}
p.csv {{ font-size: 0.8em; color: #666; }}
</style></head>
<body><h1>{title}</h1>
{body}
<script>{script}</script>
</body></html>
"""
)

# Pins the key columns of each table: the first `data-pinned` cells of every row stick at the left edge, each
# at the summed width of the pinned cells before it (CSS alone cannot know those widths).
_PIN_SCRIPT = """
for (const table of document.querySelectorAll("table[data-pinned]")) {
  const pinned = Number(table.dataset.pinned);
  for (const row of table.rows) {
    let left = 0;
    for (const cell of Array.from(row.cells).slice(0, pinned)) {
      cell.classList.add("pinned");
      cell.title = cell.textContent;  // the whole key, where a long one is cut short
      if (cell.cellIndex === pinned - 1) cell.classList.add("pinned-last");
      cell.style.left = left + "px";
      left += cell.getBoundingClientRect().width;
    }
  }
}
"""
