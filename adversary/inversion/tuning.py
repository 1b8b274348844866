"""Attack hyper-parameters tuned where they are used: on public images, in the run's own setting.

An attack's regularizer weights, step size and init scale are published for one data set, model and defense.
Elsewhere they can make the attack ignore the data: with ``noise`` sigma 0.1 on an MNIST LeNet, ``ig-noise``'s
TV term at its published weight is ~18x its data term at the start, and every TV weight from 1 to 1e5 gives the
same reconstruction. So before an attack runs in a setting, the attacker tunes it on problems of its own
(``PublicProblems``): the updates the run's clients would send had they trained on images of the data set's
public split, built by the engine with the clients' own training and defenses, at the round's global model.
Optuna's TPE sampler searches the attack's ``search_space`` for the settings whose reconstructions of those
public images reach the highest mean SSIM. The attacker holds those images, so scoring them is its own business;
a client's images are never used. The first trial is the attack's own settings, so tuning never returns
settings that did worse on the public problems than the defaults.

A result is cached per setting (``TuningCache``: one JSON file per key; the key hashes the setting as the engine
describes it (data set, model, defenses and their strengths, local training, threat model) with the attack's
options and the tuning budget), recorded in every row the tuned attack produces (``Tuning.to_row``), and reused
by later rounds, runs and sweep points of the same setting.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import torch

from adversary.inversion.options import AttackOptions, OptimizationOptions
from adversary.inversion.run import run_attack
from adversary.view import AttackerView, Reconstruction
from fedsim.core.atomic import write_json_atomic

logger = logging.getLogger("fedsim")

#: bumped when what a tuning computes changes, so that older cache entries are not reused
TUNING_VERSION = 1
# A regularizer weight is searched from its default / 10^4 to x 10: published weights were chosen against clean
# updates, and a noisier or smaller data term needs a far weaker prior, rarely a stronger one.
REGULARIZER_DOWN, REGULARIZER_UP = 1e4, 10.0
LR_SPAN = 10.0  # a step size from its default / 10 to x 10 (L-BFGS: to x 1, larger steps diverge)
INIT_SPAN = 10.0  # an init scale from its default / 10 to x 10


@dataclass(frozen=True)
class SearchRange:
    """One hyper-parameter's interval, searched on a log scale (all of them are scales)."""

    low: float
    high: float


def search_space(options: AttackOptions) -> dict[str, SearchRange]:
    """What tuning searches for ``options``: every regularizer weight in use, the step size and the init scale
    (keys: ``lr``, ``init_scale``, ``regularizers.<name>.weight``); empty for an attack with nothing to tune
    (closed-form and malicious-server attacks)."""
    if not isinstance(options, OptimizationOptions):
        return {}
    space: dict[str, SearchRange] = {}
    for entry in options.regularizers:
        if entry.weight > 0:
            weight = float(entry.weight)
            space[f"regularizers.{entry.name}.weight"] = SearchRange(weight / REGULARIZER_DOWN, weight * REGULARIZER_UP)
    lr = float(options.lr)
    space["lr"] = SearchRange(lr / LR_SPAN, lr if options.optimizer == "lbfgs" else lr * LR_SPAN)
    if options.init != "zeros":
        scale = float(options.init_scale)
        space["init_scale"] = SearchRange(scale / INIT_SPAN, scale * INIT_SPAN)
    return space


def current_values(options: AttackOptions) -> dict[str, float]:
    """The values ``options`` runs with, keyed as in ``search_space``."""
    values: dict[str, float] = {}
    for key in search_space(options):
        if key.startswith("regularizers."):
            values[key] = options.weight_of(key.split(".")[1])  # type: ignore[attr-defined]
        else:
            values[key] = float(getattr(options, key))
    return values


def with_params(options: AttackOptions, params: Mapping[str, float]) -> AttackOptions:
    """``options`` with the tuned ``params`` (keys as in ``search_space``) in place of its own values."""
    update: dict[str, Any] = {key: float(value) for key, value in params.items() if "." not in key}
    weights = {key.split(".")[1]: float(value) for key, value in params.items() if key.startswith("regularizers.")}
    if weights:
        update["regularizers"] = [
            entry.model_copy(update={"weight": weights[entry.name]}) if entry.name in weights else entry
            for entry in options.regularizers  # type: ignore[attr-defined]
        ]
    return options.model_copy(update=update)


#: (reconstruction, its [0, 1] public images, their labels, normalised -> [0, 1]) -> a score, higher is better
PublicScore = Callable[[Reconstruction, torch.Tensor, torch.Tensor, Callable[[torch.Tensor], torch.Tensor]], float]


@dataclass(frozen=True)
class PublicProblems:
    """Tuning problems the attacker made itself: views of updates computed from public images it holds, and
    those images ([0, 1], one (N, C, H, W) tensor per view) with their labels.

    ``score`` rates one reconstruction against its public images (higher is better). The attacker knows these
    images, so it may score against them; the caller passes the run's own SSIM (``fedsim.judge.scoring.
    public_ssim``), so that a tuning picks what the run's scoring rewards without the attacker's side importing
    the judge."""

    views: list[AttackerView]
    images: list[torch.Tensor]
    labels: list[torch.Tensor]
    mean: tuple[float, ...]  # the public normalisation, to map reconstructions back to [0, 1]
    std: tuple[float, ...]
    score: PublicScore

    def to_image_space(self, images: torch.Tensor) -> torch.Tensor:
        mean = torch.tensor(self.mean, dtype=images.dtype).view(1, -1, 1, 1)
        std = torch.tensor(self.std, dtype=images.dtype).view(1, -1, 1, 1)
        return images * std + mean

    def mean_ssim(self, reconstructions: Sequence[Reconstruction]) -> float:
        """Mean SSIM of ``reconstructions`` against the public images, scored as a run scores its targets."""
        scores = [
            self.score(rec, images, labels, self.to_image_space)
            for rec, images, labels in zip(reconstructions, self.images, self.labels, strict=True)
        ]
        return float(sum(scores) / len(scores))


@dataclass(frozen=True)
class TuningTask:
    """What a worker needs to tune an attack before running it: the public problems, the budget, the setting's
    description (for the cache key) and where the cache lives (None: no cache)."""

    problems: PublicProblems
    trials: int
    seed: int
    setting: Mapping[str, Any]  # JSON-serialisable description of the setting, from the engine
    max_iterations: int | None = None  # per trial; None: the attack's own iterations
    cache_dir: str | None = None
    tuned_round: int = 0  # the round whose global model the public problems were trained from


@dataclass(frozen=True)
class Tuning:
    """What tuning chose for one attack in one setting, and how well it did on the public problems."""

    key: str
    params: dict[str, float]  # the chosen values (search_space keys)
    defaults: dict[str, float]  # the attack's own values
    ssim_default: float  # mean SSIM of the attack's own settings on the public problems
    ssim_tuned: float  # ... and of the chosen ones (>= ssim_default: the defaults are trial 0)
    trials: int
    problems: int
    seconds: float
    tuned_round: int
    cached: bool = False  # read from the cache rather than tuned in this job

    def to_row(self) -> dict[str, Any]:
        """The fields an attack row carries about the tuning behind it."""
        return {
            "tuned": True,
            "tuning_params": dict(self.params),
            "tuning_ssim_default": self.ssim_default,
            "tuning_ssim_tuned": self.ssim_tuned,
            "tuning_trials": self.trials,
            "tuning_key": self.key,
            "tuning_cached": self.cached,
        }


@dataclass
class TuningCache:
    """Tunings by key, one JSON file each in ``folder`` (written atomically: concurrent workers at worst tune twice)."""

    folder: Path | None  # None: kept in memory only, for the rounds of one worker
    _memory: dict[str, Tuning] = field(default_factory=dict)

    def path(self, key: str) -> Path:
        assert self.folder is not None
        return self.folder / f"{key}.json"

    def get(self, key: str) -> Tuning | None:
        known = self._memory.get(key)
        if known is not None or self.folder is None:
            return known
        try:
            record = json.loads(self.path(key).read_text())
            tuning = Tuning(**{**record["tuning"], "cached": True})
        except (OSError, ValueError, KeyError, TypeError):
            return None  # absent, or unreadable (a newer format): tune again
        self._memory[key] = tuning
        return tuning

    def put(self, tuning: Tuning, setting: Mapping[str, Any]) -> None:
        self._memory[tuning.key] = tuning
        if self.folder is None:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path(tuning.key), {"setting": setting, "tuning": asdict(tuning)})


def tuning_key(options: AttackOptions, task: TuningTask) -> str:
    """The cache key: the setting, the attack's options (less what does not change its answer) and the budget."""
    attack = options.model_dump(mode="json", exclude={"time_limit", "log_every", "deterministic"})
    description = {
        "version": TUNING_VERSION,
        "setting": task.setting,
        "attack": attack,
        "trials": task.trials,
        "problems": len(task.problems.views),
        "max_iterations": task.max_iterations,
        "seed": task.seed,
    }
    return hashlib.sha256(json.dumps(description, sort_keys=True, default=str).encode()).hexdigest()[:24]


def tune(options: AttackOptions, task: TuningTask, device: torch.device) -> Tuning | None:
    """``options`` tuned on ``task``'s public problems (or the cached tuning of the same setting); None when the
    attack has nothing to tune."""
    space = search_space(options)
    if not space or task.trials < 1:
        return None
    key = tuning_key(options, task)
    cache = _cache(task.cache_dir)
    known = cache.get(key)
    if known is not None:
        return known
    import optuna  # only where an attack is tuned: it is a heavy import

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    problems = task.problems
    budget = {} if task.max_iterations is None else {"iterations": min(options.iterations, task.max_iterations)}  # type: ignore[attr-defined]
    defaults = current_values(options)

    def objective(trial: optuna.Trial) -> float:
        params = {name: trial.suggest_float(name, r.low, r.high, log=True) for name, r in space.items()}
        trial_options = with_params(options, params).model_copy(update=budget)
        value = problems.mean_ssim(run_attack(trial_options, problems.views, task.seed, device))
        return value if math.isfinite(value) else -1.0  # a diverged trial scores below any image

    started = time.perf_counter()
    # Half the trials spread by a scrambled Sobol sequence (random start-up points of a few trials clump), the rest
    # where TPE expects the best.
    startup = max(1, task.trials // 2)
    with warnings.catch_warnings():  # both samplers are marked experimental; their results are what we report
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sobol = optuna.samplers.QMCSampler(seed=task.seed, scramble=True)
        study = optuna.create_study(direction="maximize", sampler=sobol)
        study.enqueue_trial(defaults)  # trial 0: the attack's own settings
        study.optimize(objective, n_trials=startup, catch=(RuntimeError, ValueError))
        study.sampler = optuna.samplers.TPESampler(seed=task.seed, n_startup_trials=0, multivariate=True)
        study.optimize(objective, n_trials=task.trials - startup, catch=(RuntimeError, ValueError))
    finished = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not finished:
        return None
    default_trial = study.trials[0]
    ssim_default = default_trial.value if default_trial.value is not None else -1.0
    best = max(finished, key=lambda t: cast(float, t.value))  # a finished trial has its value
    tuning = Tuning(
        key=key,
        params={name: float(value) for name, value in best.params.items()},
        defaults=defaults,
        ssim_default=float(ssim_default),
        ssim_tuned=float(cast(float, best.value)),
        trials=len(study.trials),
        problems=len(problems.views),
        seconds=time.perf_counter() - started,
        tuned_round=task.tuned_round,
    )
    logger.info(
        "tuning: %s on %d public problem(s), %d trials (%.0f s): SSIM %.3f with its own settings, %.3f with %s",
        options.label,
        tuning.problems,
        tuning.trials,
        tuning.seconds,
        tuning.ssim_default,
        tuning.ssim_tuned,
        ", ".join(f"{name} {value:.3g}" for name, value in tuning.params.items()),
    )
    cache.put(tuning, {"description": task.setting, "attack": options.label})
    return tuning


_CACHES: dict[str, TuningCache] = {}


def _cache(folder: str | None) -> TuningCache:
    return _CACHES.setdefault(folder or "", TuningCache(Path(folder) if folder else None))


def tuned(options: AttackOptions, task: TuningTask | None, device: torch.device) -> tuple[AttackOptions, Tuning | None]:
    """``options`` with their tuned values where ``task`` asks for tuning, and the tuning behind them."""
    if task is None:
        return options, None
    try:
        tuning = tune(options, task, device)
    except Exception as error:  # tuning is an improvement: a failure leaves the attack at its own settings
        logger.warning(
            "tuning: %s could not be tuned (%s: %s); it runs with its own settings",
            options.label,
            type(error).__name__,
            error,
        )
        return options, None
    if tuning is None:
        return options, None
    return with_params(options, tuning.params), tuning
