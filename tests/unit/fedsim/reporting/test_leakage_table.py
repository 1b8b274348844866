"""The leakage table a run prints: each target's attacker's pick, its test and verdict, and the oracle beside."""

from tiny_configs import tiny_config

from fedsim.reporting.leakage_table import leakage_rows, print_leakage_table
from fedsim.rundir.writer import RunStore


def test_the_table_shows_each_targets_pick_next_to_accuracy(tmp_path):
    store = RunStore.create(tiny_config(output={"dir": str(tmp_path), "run_name": "r"}), "cpu")
    for server_round, accuracy in ((0, 0.1), (1, 0.2), (2, 0.3), (3, 0.4)):
        store.append({"round": server_round, "event": "eval", "accuracy": accuracy})
    attack = {"event": "attack", "status": "ok", "round": 2}
    store.append({**attack, "target": "client:1", "attack": "dlg", "psnr_mean": 12.0, "ssim_mean": 0.3})
    store.append({**attack, "target": "client:1", "attack": "ig", "psnr_mean": 20.0, "ssim_mean": 0.6})
    store.append({**attack, "target": "aggregate", "attack": "dlg", "psnr_mean": None, "ssim_mean": 1.0})
    store.append({**attack, "target": "client:0", "attack": "dlg", "status": "failed"})
    targets, table = leakage_rows(store.run_dir)
    assert targets == ["client:1", "aggregate"]
    assert [line["round"] for line in table] == [0, 2, 3]  # the start, the attacked rounds, the last
    # rows without a test (an older fedsim): no floor, no p-value, verdict unknown
    assert table[1] == {
        "round": 2,
        "accuracy": 0.3,
        "epsilon_example": None,  # no DP in this run
        "epsilon_client": None,
        "client:1": "20.0/0.60",
        "aggregate": "exact/1.00",
        "floor": {"client:1": "—", "aggregate": "—"},
        "p": {"client:1": "—", "aggregate": "—"},
        "verdict": {"client:1": "unknown", "aggregate": "unknown"},
        "oracle": {"client:1": "0.60/—"},  # two attacks on client:1: the oracle beside, without a floor
    }


def test_the_verdict_is_the_attackers_pick_and_the_oracle_only_stands_beside_it(tmp_path):
    store = RunStore.create(tiny_config(output={"dir": str(tmp_path), "run_name": "r"}), "cpu")
    store.append({"round": 1, "event": "eval", "accuracy": 0.2})
    attack = {"event": "attack", "status": "ok", "round": 1, "floor_ssim": 0.31, "floor_level": 0.05}
    best_of = {"floor_ssim_best_of": [0.31, 0.36]}
    # client:0: dlg matches the update best (the attacker's pick) and stays at its floor; ig scores higher against
    # the truth, which the attacker cannot know: the oracle, read against the best of two guesses
    store.append(
        {
            **attack,
            **best_of,
            "target": "client:0",
            "attack": "dlg",
            "psnr_mean": 9.0,
            "ssim_mean": 0.2,
            "gradient_match": 0.01,
            "p_value": 0.4,
            "p_values": {"random-public": 0.4},
            "verdict": "at floor",
        }
    )
    store.append(
        {
            **attack,
            **best_of,
            "target": "client:0",
            "attack": "ig",
            "psnr_mean": 10.0,
            "ssim_mean": 0.5,
            "gradient_match": 0.3,
            "p_value": 0.01,
            "p_values": {"random-public": 0.01},
            "verdict": "leaks",
        }
    )
    store.append(
        {
            **attack,
            "target": "client:1",
            "attack": "ig",
            "psnr_mean": 19.5,
            "ssim_mean": 0.8,
            "gradient_match": 0.001,
            "p_value": 0.004,
            "verdict": "leaks",
        }
    )
    _, table = leakage_rows(store.run_dir)
    cells = {
        target: (table[0][target], *(table[0][line].get(target) for line in ("floor", "p", "verdict", "oracle")))
        for target in ("client:0", "client:1")
    }
    assert cells["client:0"] == ("9.0/0.20", "0.31", "0.400", "at floor", "0.50/0.36")
    assert cells["client:1"] == ("19.5/0.80", "0.31", "0.004", "leaks", None)


def test_the_printed_table_fits_80_columns_with_a_floor_a_p_value_and_a_verdict_line_per_attacked_round(tmp_path):
    from rich.console import Console

    from fedsim.reporting.leakage_table import print_leakage_table

    store = RunStore.create(tiny_config(output={"dir": str(tmp_path), "run_name": "r"}), "cpu")
    store.append({"round": 1, "event": "eval", "accuracy": 0.2})
    attack = {"event": "attack", "status": "ok", "round": 1, "attack": "dlg", "psnr_mean": 12.5, "ssim_mean": 0.5}
    for target in ("client:0", "client:1", "client:2", "client:3", "aggregate"):
        store.append({**attack, "target": target, "floor_ssim": 0.61, "p_value": 0.2, "verdict": "at floor"})
    console = Console(width=80, record=True)
    print_leakage_table(store.run_dir, console)
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    found = {line.split()[0]: line.split() for line in lines if line.split()[:1] in (["floor"], ["p"], ["verdict"])}
    assert found["floor"] == ["floor", *["0.61"] * 5] and found["p"] == ["p", *["0.200"] * 5]
    assert found["verdict"] == ["verdict", *["at", "floor"] * 5]


def test_a_table_of_unsaturated_or_unadapted_leakage_says_it_is_a_lower_bound(tmp_path):
    from fedsim.reporting.leakage_table import bound_note

    store = RunStore.create(tiny_config(output={"dir": str(tmp_path), "run_name": "r"}), "cpu")
    attack = {"event": "attack", "status": "ok", "round": 1, "target": "client:0", "ssim_mean": 0.3}
    store.append({**attack, "attack": "dlg", "saturation": "saturated"})
    store.append({**attack, "attack": "ig", "saturation": "not leading"})
    assert bound_note(store.run_dir) == ""
    store.append({**attack, "attack": "ig-dip", "saturation": "capped", "lower_bound": True})
    assert bound_note(store.run_dir) == "a lower bound: not saturated (ig-dip capped by adversary.budget)"


def test_leakage_under_a_defense_no_attack_adapts_to_is_a_lower_bound(tmp_path):
    from fedsim.reporting.leakage_table import bound_note

    store = RunStore.create(tiny_config(output={"dir": str(tmp_path), "run_name": "r"}), "cpu")
    store.append(
        {
            "event": "attack",
            "status": "ok",
            "round": 1,
            "target": "client:0",
            "attack": "dlg",
            "ssim_mean": 0.1,
            "lower_bound": True,
        }
    )
    assert "no running attack adapts to" in bound_note(store.run_dir)


def test_a_dp_run_prints_each_epsilon_in_its_own_column_with_its_delta_under_the_table(tmp_path):
    from rich.console import Console

    store = RunStore.create(tiny_config(output={"dir": str(tmp_path), "run_name": "r"}), "cpu")
    for server_round in (0, 1, 2):
        central = {"dp_epsilon": 0.5 * server_round, "dp_delta": 1e-3} if server_round else {}
        store.append({"round": server_round, "event": "eval", "accuracy": 0.1 * server_round, **central})
        if server_round:
            for client, epsilon in enumerate((1.0, 3.0)):
                fit = {"round": server_round, "event": "fit", "client": client, "status": "ok"}
                store.append({**fit, "defense.dpsgd.epsilon": epsilon * server_round, "defense.dpsgd.delta": 1e-5})
    _, table = leakage_rows(store.run_dir)
    assert [(line["epsilon_example"], line["epsilon_client"]) for line in table] == [(None, None), (6.0, 1.0)]
    console = Console(width=80, record=True)
    print_leakage_table(store.run_dir, console)
    text = console.export_text()
    header = next(line for line in text.splitlines() if "round" in line and "accuracy" in line)
    assert header.split() == ["round", "accuracy", "ε", "ex", "ε", "cl"]  # one column each, never merged
    assert "ε ex: epsilon_example 6.00 (δ=1e-05), example-level: add/remove one sample of a client" in text
    assert "ε cl: epsilon_client 1.00 (δ=1e-03), client-level: add/remove one client" in text


def test_a_run_without_dp_prints_no_epsilon_column(tmp_path):
    from rich.console import Console

    store = RunStore.create(tiny_config(output={"dir": str(tmp_path), "run_name": "r"}), "cpu")
    store.append({"round": 1, "event": "eval", "accuracy": 0.2})
    console = Console(width=80, record=True)
    print_leakage_table(store.run_dir, console)
    assert "ε" not in console.export_text() and "epsilon" not in console.export_text()


def test_a_target_whose_attack_ran_no_iteration_shows_that_status_without_floor_or_verdict_and_why(tmp_path):
    from rich.console import Console

    store = RunStore.create(tiny_config(output={"dir": str(tmp_path), "run_name": "r"}), "cpu")
    store.append({"round": 1, "event": "eval", "accuracy": 0.2})
    scored = {"event": "attack", "status": "ok", "round": 1, "attack": "ig", "psnr_mean": 12.0, "ssim_mean": 0.5}
    store.append({**scored, "target": "client:0", "floor_ssim": 0.3, "p_value": 0.01, "verdict": "leaks"})
    why = "time_limit = 2 s ran out before ig's first iteration finished: nothing to score"
    unrun = {"event": "attack", "status": "no-iterations", "round": 1, "attack": "ig", "error": why}
    store.append({**unrun, "target": "client:1"})
    store.append({**unrun, "target": "aggregate"})
    targets, table = leakage_rows(store.run_dir)
    assert targets == ["client:0", "client:1", "aggregate"]
    assert (table[0]["client:1"], table[0]["aggregate"]) == ("no-iterations", "no-iterations")
    assert table[0]["verdict"] == {"client:0": "leaks"} and table[0]["floor"] == {"client:0": "0.30"}
    console = Console(width=80, record=True)
    print_leakage_table(store.run_dir, console)
    text = console.export_text()
    assert f"no-iterations: round 1 client:1, round 1 aggregate: {why}" in text
    # the row's verdict line (the title's "verdict at 5%" aside): none for the targets that ran no iteration
    verdict_lines = [line.split() for line in text.splitlines() if line.split()[:2] in (["verdict", "leaks"],)]
    assert verdict_lines == [["verdict", "leaks"]]


def test_a_text_run_prints_its_text_scores_and_each_original_beside_its_recovery_under_the_table(tmp_path):
    from rich.console import Console

    store = RunStore.create(tiny_config(output={"dir": str(tmp_path), "run_name": "r"}), "cpu")
    store.append({"round": 1, "event": "eval", "accuracy": 0.2})
    texts = [{"original": "the cat sat on the mat", "recovered": "the cat sat on the mat"}]
    scores = {"exact_mean": 1.0, "token_accuracy_mean": 1.0, "rougeL_mean": 1.0, "floor_rougeL": 0.31}
    store.append(
        {"event": "attack", "status": "ok", "round": 1, "attack": "dager", "target": "client:0", "modality": "text"}
        | scores
        | {"p_value": 0.01, "floor_level": 0.05, "verdict": "leaks", "texts": texts}
    )
    console = Console(width=120, record=True)
    print_leakage_table(store.run_dir, console)
    text = console.export_text()

    assert "round 1: text recovered; floor, p-value and verdict at 5%" in text
    assert "0.310" in text and "leaks" in text
    assert text.count("the cat sat on the mat") == 2  # the original, and its recovery beside it
