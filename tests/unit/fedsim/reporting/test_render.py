"""Rendering cells and markdown tables."""

import math

import pandas as pd

from fedsim.reporting.render import cell, markdown_table


def test_cells_and_markdown_tables():
    assert [cell(v) for v in (0.5, math.nan, math.inf, None, 12345.0, 3)] == ["0.5000", "", "inf", "", "1.234e+04", "3"]
    assert markdown_table(pd.DataFrame({"a": ["x|y"], "b": [1.0]})) == "| a | b |\n|---|---|\n| x\\|y | 1.0000 |\n"
