"""The report of a real sweep: its pages, its figures, the notebook API, and a real browser opening it."""

import base64
import io
import re

import pandas as pd
import pytest
from matplotlib import image as mpimg

import fedsim
from fedsim.cli import main
from fedsim.config import load_config
from fedsim.reporting import write_full_report
from fedsim.rundir.writer import RunStore


def _png_ok(data: bytes) -> bool:
    return data[:4] == b"\x89PNG" and len(data) > 1000


@pytest.mark.simulation
def test_the_report_renders_from_a_real_sweep(tiny_sweep):
    paths = write_full_report(tiny_sweep)
    report = tiny_sweep / "report"
    names = {path.name for path in paths}
    # one round each: no leakage curve (a table instead), the utility figure only for the runs' own summaries
    assert {
        "report.html",
        "report.md",
        "runs.csv",
        "utility_rounds.csv",
        "attacks.csv",
        "leakage_rounds.csv",
        "frontier.csv",
        "utility_rounds.png",
        "frontier.png",
    } == names
    for png in ("utility_rounds.png", "frontier.png"):
        assert _png_ok((report / png).read_bytes()), png
    page = (report / "report.html").read_text()
    figures = re.findall(r'<figure><img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(figures) >= 1 and all(_png_ok(base64.b64decode(image)) for image in figures)
    # per run, its strongest result on a client and on the aggregate, then both clients and the aggregate of round 1
    cards = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)" width="(\d+)" height="(\d+)"', page)
    assert len(cards) == 2 * (2 + 3)
    for data, width, height in cards:
        pixels = mpimg.imread(io.BytesIO(base64.b64decode(data)), format="png")
        assert pixels.shape[:2] == (int(height), int(width)) and pixels.std() > 0  # an image, not a blank
    assert '<img src="http' not in page and "01-defenses-noise/config.yaml" in page and "flwr" in page
    headings = re.findall(r"<h2>(.*?)</h2>", page)
    assert headings[:2] == ["Summary", "Reconstructions: every attacked client and the aggregate, per attacked round"]
    assert "strongest leakage, aggregate" in page and "(dlg, aggregate, round 1; " in page
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
        ["00-defenses-none", "complete", "none"],
        ["01-defenses-noise", "complete", "noise"],
    ]
    metrics = sweep.metrics
    assert list(metrics.columns[:3]) == ["run", "client.defenses", "event"]
    assert len(metrics) == sum(len(r.metrics) for r in sweep.runs.values())


CHROMIUM = next(
    (path for path in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if __import__("os").path.exists(path)), None
)
PROBE = (
    """<script>
window.__errors = [];
window.addEventListener("error", e => window.__errors.push(String(e.message || e.target && e.target.src)), true);
window.addEventListener("load", () => {
  const sizes = Array.from(document.images).map(i => ["""
    """i.getBoundingClientRect().width, i.getBoundingClientRect().height]);
  const galleries = Array.from(document.querySelectorAll(".gallery[data-round]")).map(g => ({
    run: g.dataset.run, round: Number(g.dataset.round),
    cards: Array.from(g.querySelectorAll("figure.card")).map(c => ({
      target: c.dataset.target, verdict: c.dataset.verdict, caption: c.querySelector("figcaption").innerText,
      image: [c.querySelector("img").getBoundingClientRect().width, c.querySelector("img").naturalWidth]}))}));
  const page = document.body.getBoundingClientRect();
  const tables = Array.from(document.querySelectorAll(".table-box")).map(box => ({
    left: box.getBoundingClientRect().left, right: box.getBoundingClientRect().right, wide: box.scrollWidth,
    shown: box.clientWidth, pinned: getComputedStyle(box.querySelector("td, th")).position}));
  const probe = document.createElement("pre");
  probe.id = "probe";
  probe.textContent = JSON.stringify({errors: window.__errors, images: sizes, width: document.body.scrollWidth,
                                      viewport: window.innerWidth, page: [page.left, page.right],
                                      galleries: galleries, tables: tables});
  document.body.appendChild(probe);
});
</script>"""
)


def _open_in_chromium(page: str, tmp_path, width: int) -> dict:
    """Open ``page`` in headless Chromium ``width`` px wide; what the probe saw once it loaded."""
    import json
    import subprocess

    probed = tmp_path / "report.html"
    probed.write_text(page.replace("<head>", "<head>" + PROBE, 1))
    dom = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--window-size={width},900",
            "--virtual-time-budget=10000",
            "--dump-dom",
            probed.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return json.loads(re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S).group(1).replace("&quot;", '"'))


@pytest.mark.simulation
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium (Debian's chromium package) is not installed")
def test_the_report_opens_in_a_real_browser_without_errors_and_every_image_is_visible(tiny_sweep, tmp_path):
    run_dir = tiny_sweep / "00-defenses-none"
    assert main(["report", str(run_dir)]) == 0
    result = _open_in_chromium((run_dir / "report" / "report.html").read_text(), tmp_path, 1280)
    assert result["errors"] == []
    assert result["images"] and all(width > 0 and height > 0 for width, height in result["images"])
    assert result["width"] <= result["viewport"]  # nothing wider than the page: tables scroll inside it


@pytest.mark.simulation
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium (Debian's chromium package) is not installed")
def test_the_browser_shows_every_attacked_target_of_every_attacked_round_scored_and_no_table_overflows(
    tiny_sweep, tmp_path
):
    write_full_report(tiny_sweep)
    # narrower than the wide tables: they must scroll inside their own boxes, the page itself never
    result = _open_in_chromium((tiny_sweep / "report" / "report.html").read_text(), tmp_path, 800)
    assert result["errors"] == [] and result["width"] <= result["viewport"]
    attacked = {
        (run_dir.name, row["round"], row["target"])
        for run_dir in sorted(tiny_sweep.glob("0*"))
        for row in RunStore(run_dir).rows()
        if row["event"] == "attack" and row.get("status") == "ok"
    }
    shown = {
        (gallery["run"], gallery["round"], card["target"])
        for gallery in result["galleries"]
        for card in gallery["cards"]
    }
    assert {target for _, _, target in attacked} == {"client:0", "client:1", "aggregate"}
    assert shown == attacked and sum(len(gallery["cards"]) for gallery in result["galleries"]) == len(attacked)
    for gallery in result["galleries"]:
        assert [card["target"] for card in gallery["cards"]][-1] == "aggregate"  # after the clients
        for card in gallery["cards"]:
            caption, (shown_width, natural_width) = card["caption"], card["image"]
            assert re.search(r"PSNR (exact|\d+\.\d dB), SSIM -?\d\.\d{3}", caption), caption
            assert "floor SSIM " in caption and card["verdict"] in ("leaks", "at floor") and card["verdict"] in caption
            assert shown_width == natural_width > 0  # each image at its own pixel size, never stretched
    left, right = result["page"]
    assert result["tables"] and any(table["wide"] > table["shown"] for table in result["tables"])  # some scroll
    for table in result["tables"]:
        assert left - 1 <= table["left"] and table["right"] <= right + 1, table  # each box inside the page
        assert table["pinned"] == "sticky"  # the key column stays in view while the rest scrolls
