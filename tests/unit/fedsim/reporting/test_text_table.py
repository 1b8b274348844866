from rich.console import Console

from fedsim.reporting.text_table import recovered_beside_original, text_leakage_table


def rendered(table) -> str:
    console = Console(width=160, record=True)
    console.print(table)
    return console.export_text()


def test_the_table_shows_each_share_the_floor_and_the_verdict():
    row = {
        "target": "client:0",
        "attack": "dager",
        "exact_mean": 1.0,
        "token_accuracy_mean": 1.0,
        "rouge1_mean": 1.0,
        "rouge2_mean": 1.0,
        "rougeL_mean": 1.0,
        "floor_rougeL": 0.4125,
        "p_value": 0.01,
        "verdict": "leaks",
    }
    text = rendered(text_leakage_table([row]))
    assert "client:0" in text and "0.412" in text and "leaks" in text


def test_originals_stand_beside_their_recoveries():
    text = rendered(recovered_beside_original(["the cat sat"], ["the cat ran"]))
    assert "the cat sat" in text and "the cat ran" in text
