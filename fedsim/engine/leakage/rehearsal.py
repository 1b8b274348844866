"""The attacker's rehearsal: the run's clients, trained on public images, for tuning the attacks
(``adversary.inversion.tuning``).

To tune an attack for a round, the attacker needs problems like the round's targets whose answers it knows. It
takes images of the data set's public split (the test split, which no client trains on), normalises them the
public way, and trains them exactly as a client of the run would: the client's own training path
(``clients.client_app.fit_locally``: its optimizer, local steps, training-level defenses such as DP-SGD, then its
update-level defenses), from the round's global model. Each rehearsed update becomes a view like the target's
(same round, tap, knowledge, sample count), with the public images as its known answer.

Only per-client targets are rehearsed: an aggregate's make-up (who contributed how much) has no public twin, so
attacks on the aggregate run with their own settings. Central DP's clipping and noise (``strategy.dp``) happen
in client mods and the strategy, outside ``fit_locally``, and are not rehearsed either.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from adversary.inversion.options import AttackOptions
from adversary.inversion.tuning import PublicProblems, TuningTask, search_space
from adversary.taps import AGGREGATE
from adversary.view import AttackerView
from clients.client_app import ClientSpec, fit_locally
from clients.defenses.base import DefenseConfig
from fedsim.config import AdversaryConfig
from fedsim.config.adversary import AttackTuning
from fedsim.core.sections import Section
from fedsim.core.seeding import derive_seed
from fedsim.engine.lifecycle.federation import Federation
from fedsim.judge.scoring import public_ssim


def tuned_attacks(adversary: AdversaryConfig, defenses: Iterable[DefenseConfig]) -> set[str]:
    """Labels of the attacks ``adversary.tuning.select`` selects among the run's (resolved) attacks, given the
    client defenses in force."""
    which = adversary.tuning.select
    if which == "none":
        return set()
    names = {defense.name for defense in defenses}
    return {
        options.label
        for options in adversary.attacks
        if search_space(options) and (which == "all" or names & set(options.adapts_to))
    }


def setting_description(data: Section, model: Section, client: Section, adversary: AdversaryConfig) -> dict[str, Any]:
    """What a tuning depends on besides the attack: data set, model, the clients' training and defenses, the
    threat model. The run's seed is left out: a tuning carries over to other seeds of the same setting."""
    return {
        "data": data.model_dump(mode="json", exclude={"partitioner"}),
        "model": model.model_dump(mode="json"),
        "client": client.model_dump(mode="json"),
        "tap": adversary.tap,
        "knows": adversary.knows.model_dump(mode="json"),
    }


class PublicRehearsal:
    """Builds the tuning task of an attack on a group of targets: public problems rehearsed like the targets."""

    def __init__(
        self,
        tuning: AttackTuning,
        attacks: set[str],
        setting: dict[str, Any],
        client: ClientSpec,
        federation: Federation,
    ) -> None:
        """``attacks``: the labels of the attacks tuned (``tuned_attacks``); ``setting``: what a tuning depends on
        (``setting_description``); ``client``: what the run's clients are handed."""
        self.tuning = tuning
        self.attacks = attacks
        # Not the run's seed: the problems, the rehearsed training and the search are the same for every seed of a
        # setting, so that a tuning cached for one seed is exactly what another seed would compute.
        self.seed = derive_seed(0, "tuning")
        self.setting = setting
        self.cache_dir = str(Path(tuning.cache).expanduser()) if tuning.cache is not None else None
        dataset = federation.dataset
        self.public_images = torch.from_numpy(dataset.x_test)  # [0, 1]
        self.public_labels = torch.from_numpy(dataset.y_test)
        self.stats = federation.test_stats
        self._workdir = tempfile.TemporaryDirectory(prefix="fedsim-rehearsal-")  # stateful defenses keep state here
        # no audit canaries in the rehearsal: they belong to the audited run's training, not to the attacker's
        self.client = replace(
            client,
            run_dir=Path(self._workdir.name),
            ground_truth=False,
            seed=derive_seed(0, "rehearsal"),
            example_canaries=None,
        )
        self._problems: dict[tuple[int, int, bool], PublicProblems] = {}

    def task(self, options: AttackOptions, views: list[AttackerView]) -> TuningTask | None:
        """The tuning task of ``options`` on ``views`` (one batchable group), or None where it is not tuned."""
        if options.label not in self.attacks or not views or any(view.target == AGGREGATE for view in views):
            return None
        template = views[0]
        return TuningTask(
            problems=self.problems_like(template),
            trials=self.tuning.trials,
            seed=self.seed,
            setting={**self.setting, "round": template.round, "num_samples": template.num_samples},
            max_iterations=self.tuning.max_iterations,
            cache_dir=self.cache_dir,
            tuned_round=template.round,
        )

    def problems_like(self, template: AttackerView) -> PublicProblems:
        """``adversary.tuning.problems`` public problems shaped like ``template`` (built once per round and shape)."""
        key = (template.round, template.num_samples, template.labels is not None)
        if key not in self._problems:
            # an earlier round's problems are not asked for again: keep one round's models in memory, not all
            self._problems = {known: value for known, value in self._problems.items() if known[0] == template.round}
            self._problems[key] = self._rehearse(template)
        return self._problems[key]

    def _rehearse(self, template: AttackerView) -> PublicProblems:
        count, size = self.tuning.problems, template.num_samples
        # the same public images in every round: a tuning differs between rounds by the model only
        rng = np.random.default_rng(self.seed)
        available = len(self.public_labels)
        chosen = rng.choice(available, size=count * size, replace=count * size > available)
        partitions = tuple(np.arange(k * size, (k + 1) * size) for k in range(count))
        client = replace(self.client, partitions=partitions, stats=(self.stats,) * count)
        views, images, labels = [], [], []
        for k in range(count):
            ids = torch.from_numpy(chosen[k * size : (k + 1) * size])
            x, y = self.public_images[ids], self.public_labels[ids]
            fit = fit_locally(client, k, template.round, template.global_state, data=(self.stats.normalize(x), y))
            views.append(
                replace(
                    template,
                    target=f"public:{k}",
                    observed_state={name: value.detach().cpu() for name, value in fit.weights.items()},
                    labels=y.clone() if template.labels is not None else None,
                )
            )
            images.append(x)
            labels.append(y)
        return PublicProblems(views, images, labels, tuple(self.stats.mean), tuple(self.stats.std), public_ssim)
