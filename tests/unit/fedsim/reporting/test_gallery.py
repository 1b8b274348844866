"""The gallery: a card per attacked target and round, scored, with floor and verdict, titles as text."""

import math

import pandas as pd
import torch
from synthetic_runs import _synthetic_run

import fedsim
from fedsim.judge.images import TITLE_BAND, save_grid
from fedsim.judge.verdict import judge_target
from fedsim.reporting.gallery import round_galleries, score_lines, strongest_cards, title_band
from fedsim.reporting.tables import attack_results
from fedsim.rundir.layout import grid_file
from fedsim.rundir.sweep_reader import Sweep
from fedsim.rundir.writer import RunStore


def _grid(path, images, title):
    originals = torch.rand(images, 1, 8, 8)
    return save_grid(path, originals, originals.flip(0), title)


def test_the_title_band_drawn_into_a_grid_is_found_and_only_then(tmp_path):
    for images in (1, 4, 16, 20):  # one image, a row, a full row, and a wrapped second block
        assert title_band(_grid(tmp_path / "titled.png", images, "round 1 client:0 dlg: 20.0 dB"), images) == TITLE_BAND
        assert title_band(_grid(tmp_path / "bare.png", images, None), images) == 0
    titled = _grid(tmp_path / "titled.png", 4, "a title")
    assert title_band(titled, 3) == 0  # a grid whose size does not fit the image count is shown as it is
    assert title_band(titled, math.nan) == 0  # an older row without per-image scores


def _attack(store, server_round, target, attack, ssim, verdict, lpips=None, match=None):
    p_value = 0.01 if verdict == "leaks" else 0.5
    store.append(
        {
            "round": server_round,
            "event": "attack",
            "tap": "mitm",
            "target": target,
            "attack": attack,
            "status": "ok",
            "psnr": [20.0, 22.0],
            "ssim": [ssim, ssim],
            "psnr_mean": 21.0,
            "ssim_mean": ssim,
            "lpips_mean": lpips,
            "floor_ssim": 0.5,
            "floor_psnr": 12.0,
            "floor_ssim_best_of": [0.5, 0.55],
            "p_value": p_value,
            "p_values": {"random-public": p_value},
            "gradient_match": match,
            "verdict": verdict,
        }
    )
    _grid(store.run_dir / "reconstructions" / grid_file(server_round, target, attack), 2, f"round {server_round}")


def _attacked_run(tmp_path):
    run_dir = _synthetic_run(tmp_path, "run")
    store = RunStore(run_dir)
    for target in ("client:10", "aggregate", "client:2"):
        _attack(store, 2, target, "dlg", 0.4, "at floor")
    # stronger than everything of round 1 (client:0 at 0.9, the aggregate at 0.45)
    _attack(store, 2, "client:2", "ig", 0.95, "leaks", lpips=0.25, match=0.01)  # the attacker's pick
    _attack(store, 2, "aggregate", "ig", 0.6, "leaks", match=0.02)
    return fedsim.load_run(run_dir)


def test_every_attacked_round_gets_a_card_per_target_clients_in_order_then_the_aggregate(tmp_path):
    run = _attacked_run(tmp_path)
    attacks = attack_results(Sweep(run.path.parent, {run.name: run}, {}, {}))
    galleries = round_galleries(run, attacks)
    # round 1 of the synthetic run saved a grid for client:0 only (its other targets have none to show)
    assert [(g.round, [c.tags["target"] for c in g.cards]) for g in galleries] == [
        (1, ["client:0"]),
        (2, ["client:2", "client:10", "aggregate"]),
    ]
    # every attacked target is counted, those without a grid named
    assert galleries[0].text() == "3 target(s) attacked: 3 without a floor. No saved grid for client:1, aggregate."
    assert galleries[1].text() == "3 target(s) attacked: 2 leaks, 1 at floor."
    client_2 = galleries[1].cards[0]
    # the attacker's pick's grid, its scores, test and the target's verdict; the oracle with its best-of-2 floor
    # (here the same attack), and the other attack listed under it
    assert client_2.image.name == grid_file(2, "client:2", "ig") and client_2.title == "client 2, ig"
    assert client_2.lines == (
        "PSNR 21.0 dB, SSIM 0.950, LPIPS 0.250",
        "floor SSIM 0.500, p 0.010: leaks",
        "oracle (upper bound, best of 2 by the truth): ig SSIM 0.950, floor 0.550, p 0.020",
        "also dlg: SSIM 0.400",
    )
    assert client_2.crop_top == TITLE_BAND and client_2.tags["verdict"] == "leaks"
    # one attack: no oracle line, no LPIPS
    assert galleries[1].cards[1].lines == ("PSNR 21.0 dB, SSIM 0.400", "floor SSIM 0.500, p 0.500: at floor")
    # the strongest results on top name their round
    strongest = strongest_cards(run, attacks)
    assert [card.title for card in strongest] == ["client 2, ig, round 2", "aggregate, ig, round 2"]


def test_an_exact_reconstruction_and_a_row_without_a_test_read_as_such():
    best = {"attack": "dlg", "psnr": 100.0, "ssim": 1.0, "lpips": math.nan, "floor_ssim": math.nan}
    verdict = judge_target([best], score="ssim")
    assert score_lines(pd.Series(best), pd.DataFrame(), verdict) == (
        "PSNR exact, SSIM 1.000",
        "no test recorded (older fedsim)",
    )
