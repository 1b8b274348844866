"""bench.calibration judges guesses and degraded truths exactly as a run records its rows."""

from pathlib import Path

import torch

from bench.calibration import NULL_CASES, table, target_verdicts
from fedsim.config import load_config
from fedsim.data import load_dataset
from fedsim.judge.floor import AT_FLOOR, LEAKS, PublicSplit

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "defense-evaluation.yaml"


def test_every_case_gets_a_verdict_and_the_slightly_noisy_truth_leaks_where_the_black_image_does_not():
    config = load_config(CONFIG, ["data.dataset=digits", "data.image_size=8"])
    dataset = load_dataset(config.data, config.seed)
    public = PublicSplit(torch.from_numpy(dataset.x_test), torch.from_numpy(dataset.y_test))
    truth, labels = torch.from_numpy(dataset.x_train[:2]), torch.from_numpy(dataset.y_train[:2])
    verdicts = target_verdicts(truth, labels, public, seed=0)
    assert set(NULL_CASES) <= set(verdicts) and set(verdicts.values()) <= {LEAKS, AT_FLOOR}
    assert verdicts["truth + noise 0.1"] == LEAKS and verdicts["black image"] == AT_FLOOR
    assert verdicts["class means of its labels"] == AT_FLOOR  # a guess in the null never beats itself
    lines = table({("digits", 2): {case: [verdict] for case, verdict in verdicts.items()}})
    assert lines[0] == "| case | digits, 2 |" and any(line.startswith("| black image (null) | 0.0% ") for line in lines)


def test_a_guess_row_carries_the_attackers_yardstick_so_its_pick_is_the_attackers():
    from bench.calibration import scored_row
    from fedsim.judge.floor import public_floor
    from fedsim.judge.verdict import ATTACKER_PICK, judge_target

    public = PublicSplit(torch.rand(12, 1, 8, 8), torch.arange(12) % 3)
    truth, labels = torch.rand(2, 1, 8, 8), torch.tensor([0, 1])
    floor = public_floor(truth, labels, public, count=2, seed=0, draws=19)
    rows = [
        scored_row(public.images[i : i + 2], truth, labels, lambda _: floor, match=m) for i, m in ((0, 0.2), (2, 0.1))
    ]
    assert [row["gradient_match"] for row in rows] == [0.2, 0.1]
    judged = judge_target(rows)
    assert judged.selection == ATTACKER_PICK and judged.pick["gradient_match"] == 0.1
