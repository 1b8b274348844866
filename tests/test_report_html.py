"""Reports of runs and sweeps: the frontier computation, the HTML/Markdown/CSV report, the notebook API."""

import base64
import math
import re

import numpy as np
import pandas as pd
import pytest
from PIL import Image

import fedsim
from adversary.scoring import PSNR_CAP_DB
from fedsim.cli import main
from fedsim.config import load_config, parse_config
from fedsim.reporting import write_full_report
from fedsim.reporting.frontier import baselines, frontier_table, pareto_front
from fedsim.reporting.render import cell, markdown_table
from fedsim.reporting.run_summary import round_table
from fedsim.reporting.tables import attack_results, grid_file, leakage_rounds, utility_rounds
from fedsim.rundir.writer import RunStore

# ------------------------------------------------------------------------------------ the frontier


def test_the_pareto_front_keeps_exactly_the_undominated_points():
    table = pd.DataFrame({
        "run": ["none", "weak", "good", "strong", "bad", "twin", "unattacked"],
        "leak": [1.00, 0.80, 0.10, 0.01, 0.50, 0.10, math.nan],
        "drop": [0.00, 0.00, 0.01, 0.20, 0.30, 0.01, 0.00],
    })  # fmt: skip
    front = pareto_front(table, {"leak": "min", "drop": "min"})
    # none is dominated by weak (same drop, less leakage); bad by good; the twins tie and both stay;
    # a run without a leakage value is never on the front
    assert table["run"][front].tolist() == ["weak", "good", "strong", "twin"]


def test_the_pareto_front_respects_the_sense_of_each_objective():
    table = pd.DataFrame({"lpips": [0.1, 0.6, 0.5], "drop": [0.0, 0.1, 0.2]})
    assert pareto_front(table, {"lpips": "max", "drop": "min"}).tolist() == [True, True, False]


def _config(**client):
    return parse_config({"client": client})


def test_every_run_is_measured_against_the_undefended_run_with_otherwise_equal_settings():
    configs = {
        "none": _config(),
        "noise": _config(defenses=[{"name": "noise", "sigma": 0.1}]),
        "none-lr": _config(lr=0.5),
        "noise-lr": _config(lr=0.5, defenses=[{"name": "noise", "sigma": 0.1}]),
        "prune-momentum": _config(momentum=0.9, defenses=[{"name": "prune", "ratio": 0.5}]),
    }
    assert baselines(configs) == {
        "none": "none", "noise": "none", "none-lr": "none-lr", "noise-lr": "none-lr", "prune-momentum": None,
    }  # fmt: skip


def test_the_frontier_table_picks_the_strongest_attack_and_the_utility_loss():
    utility = pd.DataFrame({
        "run": ["none", "noise", "prune", "dp"],
        "final_accuracy": [0.90, 0.89, 0.60, 0.70],
        "final_train_loss": [0.30, 0.32, 0.90, 0.80],
    })  # fmt: skip
    attacks = pd.DataFrame({
        "run": ["none", "none", "noise", "noise", "prune", "dp"],
        "psnr": [30.0, math.inf, 12.0, 15.0, 20.0, 9.0],
        "ssim": [0.95, 0.99, 0.20, 0.10, 0.60, 0.05],
        "lpips": [0.10, 0.02, 0.50, 0.40, 0.30, math.nan],
    })  # fmt: skip
    reference = {"none": "none", "noise": "none", "prune": "none", "dp": "none"}
    table = frontier_table(utility, attacks, reference).set_index("run")
    assert table.loc["none", "best_psnr"] == math.inf and table.loc["none", "best_ssim"] == 0.99
    assert table.loc["noise", "best_ssim"] == 0.20 and table.loc["noise", "best_lpips"] == 0.40  # strongest = lowest
    assert table.loc["prune", "accuracy_drop"] == pytest.approx(0.30)
    assert table.loc["noise", "train_loss_increase"] == pytest.approx(0.02)
    # SSIM: noise (0.20 at 0.01) and dp (0.05 at 0.20) and none (0.99 at 0) are undominated; prune is not
    assert table.index[table["pareto_ssim"]].tolist() == ["none", "noise", "dp"]
    # LPIPS: dp has none, so it is off that front
    assert not table.loc["dp", "pareto_lpips"] and table.loc["noise", "pareto_lpips"]


def test_without_an_undefended_run_there_is_no_utility_loss():
    utility = pd.DataFrame({"run": ["a"], "final_accuracy": [0.5], "final_train_loss": [1.0]})
    attacks = pd.DataFrame({"run": ["a"], "psnr": [10.0], "ssim": [0.3], "lpips": [0.4]})
    table = frontier_table(utility, attacks, {"a": None})
    assert math.isnan(table.loc[0, "accuracy_drop"]) and not table.loc[0, "pareto_ssim"]


# ------------------------------------------------------------------------ rendering and small tables


def test_cells_and_markdown_tables():
    assert [cell(v) for v in (0.5, math.nan, math.inf, None, 12345.0, 3)] == ["0.5000", "", "inf", "", "1.234e+04", "3"]
    assert markdown_table(pd.DataFrame({"a": ["x|y"], "b": [1.0]})) == "| a | b |\n|---|---|\n| x\\|y | 1.0000 |\n"


def _synthetic_run(root, name, *, defenses=(), epsilons=None, ssim=0.9, accuracy=0.8):
    config = parse_config({"name": name, "client": {"defenses": list(defenses)}})
    store = RunStore.create(config, "cpu", root / name)
    for r in (0, 1, 2):
        store.append({"round": r, "event": "eval", "loss": 2.0 - r * 0.5, "accuracy": accuracy * r / 2})
        if r:
            for client in (0, 1):
                fit = {"round": r, "event": "fit", "client": client, "status": "ok", "train_loss": 1.0 / r}
                if epsilons:
                    fit["defense.dpsgd.epsilon"] = epsilons[client] * r
                store.append(fit)
    for target, psnr, exact in (("client:0", None, 1), ("client:1", 20.0, 0), ("aggregate", 10.0, 0)):
        store.append({"round": 1, "event": "attack", "tap": "mitm", "target": target, "attack": "dlg", "status": "ok",
                      "batch_size": 1, "psnr_mean": psnr, "psnr_exact": exact, "ssim_mean": ssim if target != "aggregate"
                      else ssim / 2, "lpips_mean": None, "label_accuracy": 1.0})  # fmt: skip
    store.append({"round": 2, "event": "attack", "tap": "mitm", "target": "client:0", "attack": "dlg", "status": "failed",
                  "error": "RuntimeError: boom"})  # fmt: skip
    grid = store.run_dir / "reconstructions"
    grid.mkdir()
    Image.fromarray(np.full((8, 16, 3), 128, dtype=np.uint8)).save(grid / grid_file(1, "client:0", "dlg"))
    store.write_json("summary.json", {"rounds_completed": 2})
    return store.run_dir


def test_the_strongest_attack_is_picked_per_target_per_round_and_per_run(tmp_path):
    run_dir = _synthetic_run(tmp_path, "none")
    store = RunStore(run_dir)
    for attack, target, server_round, ssim in (("ig", "client:0", 1, 0.95), ("ig-prune", "client:1", 2, 0.99),
                                               ("ig", "client:1", 1, 0.5)):  # fmt: skip
        store.append({"round": server_round, "event": "attack", "target": target, "attack": attack, "status": "ok",
                      "ssim_mean": ssim, "psnr_mean": 20.0})  # fmt: skip
    run = fedsim.load_run(run_dir)
    per_target = run.strongest().set_index("target")
    assert per_target.loc["client:0", "attack"] == "ig" and per_target.loc["client:0", "ssim_mean"] == 0.95
    assert per_target.loc["client:1", ["attack", "round"]].tolist() == ["ig-prune", 2]
    assert per_target.loc["aggregate", "attack"] == "dlg"
    per_round = run.strongest(per="round").set_index(["round", "target"])
    assert per_round.loc[(1, "client:1"), "attack"] == "dlg"  # dlg's 0.9 beats ig's 0.5 in round 1
    assert run.strongest(per="run")[["attack", "target"]].values.tolist() == [["ig-prune", "client:1"]]
    assert run.strongest("lpips_mean").empty  # no LPIPS recorded: nothing to rank
    with pytest.raises(ValueError, match="per = 'client'"):
        run.strongest(per="client")


def test_tables_from_a_folder_of_runs(tmp_path):
    _synthetic_run(tmp_path, "none")
    _synthetic_run(tmp_path, "dp", defenses=[{"name": "dpsgd", "noise_multiplier": 1.0}], epsilons=[0.5, 0.7], ssim=0.1)
    sweep = fedsim.load_sweep(tmp_path)
    rounds = utility_rounds(sweep).set_index(["run", "round"])
    assert rounds.loc[("dp", 2), "epsilon"] == pytest.approx(1.4) and math.isnan(rounds.loc[("dp", 0), "epsilon"])
    single = {row["round"]: row["epsilon"] for row in round_table(sweep.runs["dp"])}  # the single-run report's
    assert [rounds.loc[("dp", r), "epsilon"] for r in (1, 2)] == [single[r] for r in (1, 2)]
    assert rounds.loc[("none", 2), "train_loss"] == pytest.approx(0.5)
    attacks = attack_results(sweep)
    assert len(attacks) == 6  # the failed attack is left out
    assert attacks.set_index(["run", "target"]).loc[("none", "client:0"), "psnr"] == PSNR_CAP_DB  # every pair exact (an older row without psnr_mean): the cap
    leakage = leakage_rounds(attacks).set_index(["run", "kind"])
    assert leakage.loc[("none", "per-client"), "targets"] == 2 and leakage.loc[("none", "aggregate"), "ssim"] == 0.45


def test_report_of_a_folder_of_runs_with_dp_and_attacks(capsys, tmp_path):
    _synthetic_run(tmp_path, "none")
    _synthetic_run(tmp_path, "dp", defenses=[{"name": "dpsgd", "noise_multiplier": 1.0}], epsilons=[0.5, 0.7], ssim=0.1)
    assert main(["report", str(tmp_path)]) == 0
    report = tmp_path / "report"
    frontier = pd.read_csv(report / "frontier.csv").set_index("run")
    assert frontier.loc["dp", "baseline"] == "none" and frontier.loc["dp", "accuracy_drop"] == pytest.approx(0.0)
    assert frontier.loc["dp", "pareto_ssim"] and not frontier.loc["none", "pareto_ssim"]
    page = (report / "report.html").read_text()
    # utility and frontier figures (one attacked round: a leakage table, no curve), one grid per run
    assert page.count('src="data:image/png;base64,') == 2 + 2
    assert "epsilon" in (report / "report.md").read_text()
    assert not (report / "summary.md").exists()  # the single-run outputs only for a run directory


def test_a_folder_without_runs_is_one_line(capsys, tmp_path):
    code = main(["report", str(tmp_path)])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "no metrics.jsonl" in err


# ------------------------------------------------------------------------ real runs (Ray, slow)


def _png_ok(data: bytes) -> bool:
    return data[:4] == b"\x89PNG" and len(data) > 1000


@pytest.mark.simulation
def test_the_report_renders_from_a_real_sweep(tiny_sweep):
    paths = write_full_report(tiny_sweep)
    report = tiny_sweep / "report"
    names = {path.name for path in paths}
    # one round each: no leakage curve (a table instead), the utility figure only for the runs' own summaries
    assert {"report.html", "report.md", "runs.csv", "utility_rounds.csv", "attacks.csv", "leakage_rounds.csv",
            "frontier.csv", "utility_rounds.png", "frontier.png"} == names  # fmt: skip
    for png in ("utility_rounds.png", "frontier.png"):
        assert _png_ok((report / png).read_bytes()), png
    page = (report / "report.html").read_text()
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) >= 1 + 2 and all(_png_ok(base64.b64decode(image)) for image in images)
    assert "<img src=\"http" not in page and "01-defenses-noise/config.yaml" in page and "flwr" in page
    headings = re.findall(r"<h2>(.*?)</h2>", page)
    assert headings[:2] == ["Summary", "Reconstructions (strongest result per run and target kind)"]
    assert "strongest leakage, aggregate" in page and "(dlg, aggregate, round 1)" in page
    markdown = (report / "report.md").read_text()
    for png in ("frontier.png", "../00-defenses-none/reconstructions/"):
        assert png in markdown
    assert "utility_rounds.png" not in markdown and "leakage_rounds.png" not in markdown
    frontier = pd.read_csv(report / "frontier.csv").set_index("run")
    assert frontier.loc["01-defenses-noise", "baseline"] == "00-defenses-none"
    assert frontier.loc["00-defenses-none", "accuracy_drop"] == 0.0
    leakage = pd.read_csv(report / "leakage_rounds.csv")
    assert set(leakage["kind"]) == {"per-client", "aggregate"}


@pytest.mark.simulation
def test_the_report_of_a_real_run_keeps_the_single_run_outputs(capsys, tiny_sweep):
    run_dir = tiny_sweep / "00-defenses-none"
    assert main(["report", str(run_dir)]) == 0
    printed = capsys.readouterr().out.split()
    for name in ("utility.png", "summary.md", "rounds.csv", "report.html", "report.md", "frontier.csv"):
        assert str(run_dir / "report" / name) in printed


@pytest.mark.simulation
def test_the_notebook_api_round_trips_a_run(tiny_sweep):
    run_dir = tiny_sweep / "01-defenses-noise"
    run = fedsim.load_run(run_dir)
    rows = RunStore(run_dir).rows()
    assert run.config == load_config(run_dir / "config.yaml") and run.name == "01-defenses-noise"
    assert len(run.metrics) == len(rows) and run.summary["rounds_completed"] == 1
    for row, record in zip(rows, run.metrics.to_dict("records")):
        for key, value in row.items():
            same = record[key] == value or (value is None and pd.isna(record[key]))
            assert same or isinstance(value, list), (key, value, record[key])
    assert run.events("eval")["round"].tolist() == [0, 1]
    sweep = fedsim.load_sweep(tiny_sweep)
    assert sweep.points[["run", "status", "client.defenses"]].values.tolist() == [
        ["00-defenses-none", "complete", "none"], ["01-defenses-noise", "complete", "noise"]]  # fmt: skip
    metrics = sweep.metrics
    assert list(metrics.columns[:3]) == ["run", "client.defenses", "event"]
    assert len(metrics) == sum(len(r.metrics) for r in sweep.runs.values())


CHROMIUM = next((path for path in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if __import__("os").path.exists(path)), None)
PROBE = """<script>
window.__errors = [];
window.addEventListener("error", e => window.__errors.push(String(e.message || e.target && e.target.src)), true);
window.addEventListener("load", () => {
  const sizes = Array.from(document.images).map(i => [i.getBoundingClientRect().width, i.getBoundingClientRect().height]);
  const probe = document.createElement("pre");
  probe.id = "probe";
  probe.textContent = JSON.stringify({errors: window.__errors, images: sizes, width: document.body.scrollWidth,
                                      viewport: window.innerWidth});
  document.body.appendChild(probe);
});
</script>"""


@pytest.mark.simulation
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium (Debian's chromium package) is not installed")
def test_the_report_opens_in_a_real_browser_without_errors_and_every_image_is_visible(tiny_sweep, tmp_path):
    import json
    import subprocess

    run_dir = tiny_sweep / "00-defenses-none"
    assert main(["report", str(run_dir)]) == 0
    page = (run_dir / "report" / "report.html").read_text()
    probed = tmp_path / "report.html"
    probed.write_text(page.replace("<head>", "<head>" + PROBE, 1))
    dom = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,900",
         "--virtual-time-budget=10000", "--dump-dom", probed.as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    result = json.loads(re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S).group(1).replace("&quot;", '"'))
    assert result["errors"] == []
    assert result["images"] and all(width > 0 and height > 0 for width, height in result["images"])
    assert result["width"] <= result["viewport"]  # nothing wider than the page: tables scroll inside it
