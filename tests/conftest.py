"""Fixtures shared by test files: no LPIPS download, a TaskIdentity for Flower messages built outside a Flower run,
a small trained diffusion prior, and the digits the attack and scoring tests invert. Small configs:
tests/helpers/tiny_configs.py; the tiny real sweep the simulations share: tests/simulation/conftest.py."""

from __future__ import annotations

import os

import pytest


def pytest_configure(config):
    """Under pytest-xdist (``make test`` runs two workers) each worker keeps to one thread of its own, and so do
    the processes it starts: two workers with two intra-op threads each would fight over two cores."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(variable, "1")
        import torch

        torch.set_num_threads(1)


def pytest_itemcollected(item):
    """Under ``--dist loadgroup`` each test file runs on one worker (its module fixtures run once), and the tests
    that read the session's tiny sweep (tests/simulation/conftest.py) on one worker between them. (pytest-xdist 3.8
    writes the group into a node id that pytest 9 no longer reads, so the groups need pytest 8: pyproject.toml.)"""
    shares_the_sweep = "tiny_sweep" in getattr(item, "fixturenames", ())
    group = "tiny-sweep" if shares_the_sweep else item.path.relative_to(item.config.rootpath).as_posix()
    item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(autouse=True)
def fedsim_logger_restored():
    """Each test leaves the ``fedsim`` logger as it found it: the CLI's logging set-up (one handler of its own, no
    propagation) would otherwise hide every later test's log lines from ``caplog`` on the same worker."""
    import logging

    logger = logging.getLogger("fedsim")
    handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
    yield
    logger.handlers[:] = handlers
    logger.setLevel(level)
    logger.propagate = propagate


@pytest.fixture
def fedsim_log(caplog):
    """``caplog`` with fedsim's INFO lines (the logger propagates to caplog's root: ``fedsim_logger_restored``)."""
    import logging

    caplog.set_level(logging.INFO, "fedsim")
    return caplog


@pytest.fixture(autouse=True)
def no_lpips_download(monkeypatch):
    """Tests never fetch LPIPS' AlexNet (233 MB): in this process a download fails as it does offline."""
    from fedsim.judge import metrics

    monkeypatch.setattr(metrics, "download_alexnet", lambda path: "download skipped in tests")


@pytest.fixture
def task_identity(monkeypatch):
    """Messages are stamped with the run and node of the process; outside a Flower run there is none."""
    from fedsim.core.flower_private import stamp_task_identity

    stamp_task_identity(monkeypatch)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A diffusion prior trained for 3 steps on the digits no client holds (the test split), with its data;
    shared by the prior's unit tests and the simulation that attacks with it."""
    from adversary.priors.training import train_prior
    from fedsim.config import DataConfig
    from fedsim.data import load_dataset

    data = load_dataset(DataConfig(dataset="digits", image_size=8), seed=0)
    folder = tmp_path_factory.mktemp("prior")
    train_prior(data.x_test, folder, dataset="digits", split="test", steps=3, progress=False, checkpoint_every=2)
    return data, folder


@pytest.fixture(scope="module")
def digits():
    """scikit-learn's digits at the side the attack tests use (tests/helpers/digit_views.py), as tensors."""
    import torch
    from digit_views import SIDE

    from fedsim.config import DataConfig
    from fedsim.data import load_dataset

    data = load_dataset(DataConfig(dataset="digits", image_size=SIDE), seed=0)
    return torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
