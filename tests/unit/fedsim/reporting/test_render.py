"""Rendering cells, tables and galleries, in Markdown and HTML."""

import math

import numpy as np
import pandas as pd

from fedsim.reporting.render import (
    Card,
    Gallery,
    ReportSection,
    Table,
    cell,
    markdown_table,
    render_html,
    render_markdown,
)


def test_cells_and_markdown_tables():
    assert [cell(v) for v in (0.5, math.nan, math.inf, None, 12345.0, 3)] == ["0.5000", "", "inf", "", "1.234e+04", "3"]
    assert markdown_table(pd.DataFrame({"a": ["x|y"], "b": [1.0]})) == "| a | b |\n|---|---|\n| x\\|y | 1.0000 |\n"


def test_a_table_sits_in_its_own_scrolling_box_with_its_key_columns_pinned():
    frame = pd.DataFrame({"run": ["a"], "round": [1], "kind": ["aggregate"], "ssim": [0.5]})
    page = render_html("t", [ReportSection("s", [Table(frame, pinned=3), Table(frame.iloc[:, :2], pinned=5)])])
    assert page.count('<div class="table-box"><table data-pinned="3" ') == 1
    assert page.count('<table data-pinned="2" ') == 1  # never more than the table has
    assert "overflow-x: auto" in page and "position: sticky" in page


def test_a_gallery_card_shows_its_image_at_its_own_size_without_the_cropped_band_under_a_text_title(tmp_path):
    import base64
    import io
    import re

    from matplotlib import image as mpimg

    png = tmp_path / "grid.png"
    mpimg.imsave(png, np.linspace(0, 1, 40 * 30).reshape(40, 30), cmap="gray")
    card = Card(
        png, "client 0, dlg", ("PSNR 20.0 dB, SSIM 0.500", "floor SSIM 0.400: leaks"), 10, {"target": "client:0"}
    )
    page = render_html("t", [ReportSection("s", [Gallery((card,), {"round": "1"})])])
    assert '<div class="gallery" data-round="1"><figure class="card" data-target="client:0">' in page
    assert 'width="30" height="30"' in page and "image-rendering: pixelated" in page
    data = re.search(r'src="data:image/png;base64,([^"]+)"', page).group(1)
    assert mpimg.imread(io.BytesIO(base64.b64decode(data))).shape[:2] == (30, 30)
    assert '<span class="title">client 0, dlg</span><span class="line">PSNR 20.0 dB, SSIM 0.500</span>' in page
    markdown = render_markdown("t", [ReportSection("s", [Gallery((card,))])], tmp_path)
    assert "![client 0, dlg](grid.png)" in markdown and "PSNR 20.0 dB, SSIM 0.500; floor SSIM 0.400: leaks" in markdown
