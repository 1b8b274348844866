"""The Gradient Dropout table on paper 004's model: each attack alone, then the attacker's own pick."""

from bench.gradient_dropout import PICK, table_lines


def _row(seed: int, verdict: str, p_value: float, attack: str | None = None, matched: float | None = None) -> dict:
    """A row as ``attack_rows`` makes it: only the attacker's pick's rows say which attack they came from."""
    return {
        "seed": seed,
        **({"attack": attack} if attack else {}),
        "ssim": 0.5,
        "psnr": 15.0,
        "floor": 0.3,
        "p_value": p_value,
        "verdict": verdict,
        "matched": matched,
        "seconds": 1.0,
    }


def test_the_attackers_pick_follows_the_attacks_and_names_what_it_picked():
    rows = {
        ("p0.6", PICK): [_row(1, "at floor", 0.4, "ig"), _row(0, "leaks", 0.01, "ig-dropout")],
        ("p0.6", "ig-dropout"): [_row(0, "leaks", 0.01, matched=0.0003), _row(1, "at floor", 0.3, matched=0.0003)],
        ("p0.6", "ig"): [_row(0, "at floor", 0.5), _row(1, "at floor", 0.4)],
    }
    body = table_lines(rows)[2:]
    assert [line.split(" | ")[1] for line in body] == ["`ig`", "`ig-dropout`", f"{PICK}: `ig-dropout`, `ig`"]
    pick = body[-1].split(" | ")
    assert pick[5:7] == ["0.01, 0.4", "leaks, at floor"]  # seeds in order, each with its p-value
    assert body[1].split(" | ")[7] == "0.030 %, 0.030 % |"
