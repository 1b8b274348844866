"""The first run: `make run` runs the bundled demo, which attacks every client and the aggregate."""

from repository import REPO_ROOT

from fedsim.config import load_config


def test_make_run_runs_the_demo_with_its_report():
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "CONFIG ?= configs/demo.yaml" in makefile and "fedsim run $(CONFIG) --report" in makefile


def test_the_demo_attacks_every_client_and_the_aggregate_on_bundled_data():
    config = load_config(REPO_ROOT / "configs" / "demo.yaml")
    assert config.data.dataset == "digits" and config.adversary.targets == "both" and config.adversary.attacks
    assert config.adversary.clients == "all"
