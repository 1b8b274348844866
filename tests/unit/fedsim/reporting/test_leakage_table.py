"""The leakage table a run prints: each target's strongest attack and verdict next to the accuracy of the round."""

from tiny_configs import tiny_config

from fedsim.reporting.leakage_table import leakage_rows, print_leakage_table
from fedsim.rundir.writer import RunStore


def test_the_table_shows_each_targets_strongest_attack_next_to_accuracy(tmp_path):
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
    # rows without floor fields (an older fedsim): no floor, verdict unknown
    assert table[1] == {
        "round": 2,
        "accuracy": 0.3,
        "epsilon_example": None,  # no DP in this run
        "epsilon_client": None,
        "client:1": "20.0/0.60",
        "aggregate": "exact/1.00",
        "floor": {"client:1": "—", "aggregate": "—"},
        "verdict": {"client:1": "unknown", "aggregate": "unknown"},
    }


def test_each_target_shows_its_floor_and_leaks_when_any_attack_scored_above_it(tmp_path):
    store = RunStore.create(tiny_config(output={"dir": str(tmp_path), "run_name": "r"}), "cpu")
    store.append({"round": 1, "event": "eval", "accuracy": 0.2})
    attack = {"event": "attack", "status": "ok", "round": 1}
    at_floor = {**attack, "verdict": "at floor", "floor_ssim": 0.31}
    store.append({**at_floor, "target": "client:0", "attack": "dlg", "psnr_mean": 9.0, "ssim_mean": 0.2})
    store.append({**at_floor, "target": "client:0", "attack": "ig", "psnr_mean": 10.0, "ssim_mean": 0.3})
    # guesses as large as rtf's candidates set another floor: below ig's SSIM, rtf may still leak, and is shown
    store.append(
        {**at_floor, "target": "client:1", "attack": "ig", "psnr_mean": 9.5, "ssim_mean": 0.5, "floor_ssim": 0.55}
    )
    store.append(
        {
            **attack,
            "target": "client:1",
            "attack": "rtf",
            "psnr_mean": 9.0,
            "ssim_mean": 0.45,
            "verdict": "leaks",
            "floor_ssim": 0.4,
        }
    )
    _, table = leakage_rows(store.run_dir)
    assert (table[0]["client:0"], table[0]["floor"]["client:0"], table[0]["verdict"]["client:0"]) == (
        "10.0/0.30",
        "0.31",
        "at floor",
    )
    assert (table[0]["client:1"], table[0]["floor"]["client:1"], table[0]["verdict"]["client:1"]) == (
        "9.0/0.45",
        "0.40",
        "leaks",
    )


def test_the_printed_table_fits_80_columns_with_a_floor_and_a_verdict_line_per_attacked_round(tmp_path):
    from rich.console import Console

    from fedsim.reporting.leakage_table import print_leakage_table

    store = RunStore.create(tiny_config(output={"dir": str(tmp_path), "run_name": "r"}), "cpu")
    store.append({"round": 1, "event": "eval", "accuracy": 0.2})
    attack = {"event": "attack", "status": "ok", "round": 1, "attack": "dlg", "psnr_mean": 12.5, "ssim_mean": 0.5}
    for target in ("client:0", "client:1", "client:2", "client:3", "aggregate"):
        store.append({**attack, "target": target, "floor_ssim": 0.61, "verdict": "at floor"})
    console = Console(width=80, record=True)
    print_leakage_table(store.run_dir, console)
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    floor_line, verdict_line = (line.split() for line in lines if line.split()[:1] in (["floor"], ["verdict"]))
    assert floor_line == ["floor", *["0.61"] * 5] and verdict_line == ["verdict", *["at", "floor"] * 5]


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
    store.append({**scored, "target": "client:0", "floor_ssim": 0.3, "verdict": "leaks"})
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
    verdict_line = next(line.split() for line in text.splitlines() if line.split()[:1] == ["verdict"])
    assert verdict_line == ["verdict", "leaks"]  # none for the targets that ran no iteration
