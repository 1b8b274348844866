"""The report's figures: epsilon in a panel of its own, never on a second axis of the accuracy plot."""

import math

import pandas as pd
from matplotlib import image as mpimg

from fedsim.reporting.figures import DPI, frontier_key, utility_figure


def _rounds(epsilon: float) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run": ["dp"] * 3,
            "round": [1, 2, 3],
            "accuracy": [0.2, 0.4, 0.5],
            "loss": [2.0, 1.5, 1.2],
            "epsilon_example": [epsilon, 2 * epsilon, 3 * epsilon],
            "epsilon_client": [math.nan] * 3,
        }
    )


def test_a_dp_run_gets_a_third_panel_for_its_epsilon_and_a_run_without_dp_does_not(tmp_path):
    with_dp, without = tmp_path / "dp.png", tmp_path / "none.png"
    utility_figure(_rounds(0.5), {"dp": "dp"}, with_dp)
    utility_figure(_rounds(math.nan), {"dp": "dp"}, without)
    # 4.2 inches per panel at the figures' resolution: three panels where epsilon was spent, two otherwise
    assert mpimg.imread(with_dp).shape[1] == round(3 * 4.2 * DPI)
    assert mpimg.imread(without).shape[1] == round(2 * 4.2 * DPI)


def test_the_frontier_points_are_numbered_in_the_tables_order():
    frontier = pd.DataFrame({"run": ["00-none", "01-dp"]})
    assert frontier_key(frontier, {"00-none": "dp=none", "01-dp": "dp=on"}) == "1 = dp=none, 2 = dp=on"


def test_points_drawn_on_top_of_each_other_share_one_label():
    import matplotlib.pyplot as plt

    from fedsim.reporting.figures import _label_groups

    fig, axis = plt.subplots(figsize=(4, 4), dpi=100)
    xs, ys = pd.Series([0.0, 0.001, 0.5], index=["a", "b", "c"]), pd.Series([1.0, 1.0, 0.2], index=["a", "b", "c"])
    axis.scatter(xs, ys)
    assert list(_label_groups(axis, xs, ys, {"a": 1, "b": 2, "c": 3}).values()) == [["1", "2"], ["3"]]
    plt.close(fig)
