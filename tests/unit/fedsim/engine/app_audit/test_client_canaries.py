"""Canary clients passed through the app's own LocalDpMod or server-side DP wrapper give a client-level lower bound on
epsilon (one release: one client's update present or absent) beside the epsilon the mechanism stands for; a claim its
noise cannot support is contradicted in one loud line, and the app's own objects and random state are untouched."""

from __future__ import annotations

import logging

import numpy as np
from flwr.clientapp.mod import LocalDpMod
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg

from adversary.privacy_audit.config import AuditConfig
from fedsim.engine.app_audit.client_canaries import client_level_audits

LAYOUT = {"w": (20, 10), "b": (10,)}
AUDIT = AuditConfig(canaries=200)


def test_a_local_dp_mod_whose_sensitivity_is_below_its_clip_is_contradicted_by_its_canary_clients(caplog):
    caplog.set_level(logging.INFO, "fedsim")
    mod = LocalDpMod(clipping_norm=1.0, sensitivity=1e-4, epsilon=0.5, delta=1e-5)
    np.random.seed(4)
    before = np.random.get_state()[1].copy()
    (fields,) = client_level_audits(AUDIT, 0, [mod], [], LAYOUT)

    assert np.array_equal(np.random.get_state()[1], before)  # the app's NumPy generator as it was
    assert (fields["mechanism"], fields["audit_adjacency"], fields["epsilon_client"]) == (
        "flower-localdp",
        "client",
        0.5,
    )
    assert fields["audit_delta"] == 1e-5 and fields["audit_canary_norm"] == 1.0
    assert fields["audit_epsilon_lower"] > 0.5  # its noise (std 4.8e-5) hides nothing of an update of norm 1
    loud = [r.getMessage() for r in caplog.records if "claim is contradicted" in r.getMessage()]
    assert loud == [
        "the app's flower-localdp claim is contradicted: the measured lower bound on epsilon "
        f"({fields['audit_epsilon_lower']:.2f} at 95% confidence, client level) exceeds the accountant's epsilon "
        "(0.50): DP is misconfigured or broken"
    ]
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("privacy audit, flower-localdp")]
    assert "client level, one release: one client's update present at the clipping norm or absent" in said[0]


def test_a_local_dp_mod_whose_sensitivity_is_its_clip_is_not_contradicted(caplog):
    mod = LocalDpMod(clipping_norm=1.0, sensitivity=1.0, epsilon=0.5, delta=1e-5)
    (fields,) = client_level_audits(AUDIT, 0, [mod], [], LAYOUT)
    assert fields["audit_epsilon_lower"] < 0.5
    assert not [r for r in caplog.records if "claim is contradicted" in r.getMessage()]


def test_canary_clients_pass_through_a_copy_of_the_apps_server_side_wrapper():
    weak, strong = (
        DifferentialPrivacyServerSideFixedClipping(
            FedAvg(), noise_multiplier=z, clipping_norm=1.0, num_sampled_clients=2
        )
        for z in (0.01, 5.0)
    )
    kept = weak.current_arrays
    fields_weak, fields_strong = client_level_audits(AUDIT, 0, [], [weak, strong], LAYOUT)
    assert weak.current_arrays is kept  # the app's own wrapper as the run left it
    assert fields_weak["mechanism"] == "DifferentialPrivacyServerSideFixedClipping"
    assert fields_weak["audit_epsilon_lower"] > 1.0  # noise 0.01 x clip / 2 hides nothing of one client's update
    assert fields_strong["audit_epsilon_lower"] < fields_strong["epsilon_client"] < 1.0  # 1/5-GDP: epsilon ~0.8
