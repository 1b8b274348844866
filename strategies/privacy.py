"""Client-level (epsilon, delta) of the global models a DP strategy releases, one release per round.

Flower 1.41's fixed-clipping wrappers can take an accountant of their own
(Flower's privacy-accounting module), but it cannot be used here: it needs the optional
``dp-accounting`` package (``flwr[dp]``, not installed), refuses strategies that override
``FedAvg.aggregate_train`` (ours does, for reproducible order and `min_fit_clients`), requires equal
client weights, accounts without sampling amplification only, and the adaptive wrappers have none.
So the epsilon comes from Opacus' RDP accountant (a declared dependency): every released aggregate is
one step of the (sub)sampled Gaussian mechanism with the round's effective noise multiplier.

Each release is accounted at ``noise std / sensitivity`` of the estimator (``strategies.dp``), under
add/remove-one-client adjacency. By default every round counts as a full Gaussian release (rate 1),
which is sound whatever the sampling and is what applies when the adversary knows who was sampled
(both taps do). Opacus analyses Poisson sampling; FedAvg samples a fixed number of clients without
replacement, so with ``amplification`` on (sampling secret from the adversary) the number is the
usual Poisson approximation, not a proof.
"""

from __future__ import annotations

import math

ACCOUNTANT = "opacus-rdp"


class AggregatePrivacyLedger:
    """Composes one sampled Gaussian release per round and reports the cumulative epsilon at ``delta``."""

    def __init__(self, delta: float) -> None:
        from opacus.accountants import RDPAccountant  # importing opacus takes seconds; only DP runs need it

        self.delta = delta
        self._rdp = RDPAccountant()
        self._unbounded = False  # a release without noise: no finite epsilon from then on
        self.releases = 0

    def release(self, noise_multiplier: float, sample_rate: float) -> None:
        """Account one released aggregate: noise std / per-client sensitivity, and the sampling rate."""
        if not 0 < sample_rate <= 1:
            raise ValueError(f"sample_rate = {sample_rate}: must be in (0, 1]")
        self.releases += 1
        if noise_multiplier <= 0:
            self._unbounded = True
            return
        self._rdp.step(noise_multiplier=noise_multiplier, sample_rate=sample_rate)

    def epsilon(self) -> float:
        """Cumulative epsilon at ``delta`` (0 before any release, infinite after a noiseless one)."""
        if self._unbounded:
            return math.inf
        if not self.releases:
            return 0.0
        return float(self._rdp.get_epsilon(delta=self.delta))
