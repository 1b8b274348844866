"""breaching's Inverting Gradients on a fedsim attacker view: the same problem as fedsim's ``ig``, timed beside it.

breaching (Geiping et al., MIT licence) is not a fedsim dependency; where it is installed (``pip install --no-deps
-e <its source>`` and ``hydra-core``), this module drives its optimization-based attacker
(``breaching.attacks.prepare_attack`` with its ``invertinggradients`` config, ``reconstruct(server_payload,
shared_data, ...)``) on the problem a fedsim ``AttackerView`` poses, with what fedsim's ``ig`` uses:

* the model and its global state (server payload), the box of ``view.input_bounds`` (breaching's ``boxed``, with
  the metadata's mean and std chosen so that its box is that one);
* the observed update in gradient units, ``(w_t - w_{t+1}) / lr`` (``adversary.inversion.targets.observed_target``:
  the update a one-step client sends is the equivalent of its gradient);
* the labels fedsim recovers from the update (``recover_labels``), given to breaching as known labels;
* fedsim's own start image (its first random start, projected into the box), passed as breaching's initial data;
* the loss: breaching's cosine gradient matching plus total variation at ``ig``'s weight. breaching's own TV term
  (a padded convolution, eps inside the absolute value) is replaced by fedsim's definition (means of the absolute
  neighbour differences), so that both minimise the same objective; breaching's signed Adam, step decay at 3/8,
  5/8 and 7/8, box projection after each step and best-iterate keeping are its own.

``compare`` alternates fedsim and breaching calls (fedsim, breaching, fedsim, ...) so that load on shared cores hits
both, after an untimed warm-up call of each, and reports CPU seconds (``time.process_time``) per iteration of whole
attack calls (fedsim's ``run_attack``; breaching's ``prepare_attack`` and ``reconstruct``, its config composed
beforehand), both objectives at the common start, each side's lowest objective, and each side's PSNR against the truth
(scored here, outside both attacks).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import statistics
import time
import warnings
from dataclasses import dataclass
from types import SimpleNamespace

import torch

from adversary.attacks import inverting_gradients
from adversary.inversion import run_attack
from adversary.inversion.labels import recover_labels
from adversary.inversion.options import AttackOptions, OptimizationOptions
from adversary.inversion.problem import BatchedProblem
from adversary.inversion.regularizers.tv import total_variation
from adversary.inversion.targets import observed_target
from adversary.view import AttackerView
from bench.common import paired_psnrs

CPU = torch.device("cpu")
SEED = 0  # fedsim's attack seed; its first restart's start is breaching's initial data


def available() -> bool:
    return importlib.util.find_spec("breaching") is not None


class FedsimTotalVariation(torch.nn.Module):
    """fedsim's TV term with its weight, in the place of breaching's regulariser (same call signature)."""

    def __init__(self, weight: float) -> None:
        super().__init__()
        self.weight = weight

    def initialize(self, *args, **kwargs) -> None:  # breaching initialises each regulariser per trial
        pass

    def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        return self.weight * total_variation(x)


@dataclass(frozen=True)
class SharedProblem:
    """What both attacks start from: the view, its labels, the start image and fedsim's objective there."""

    view: AttackerView
    labels: torch.Tensor  # (N,) int64, recovered by fedsim from the update
    start: torch.Tensor  # (N, C, H, W), fedsim's first start projected into the box
    start_objective: float  # fedsim's objective at ``start``


def comparable(options: AttackOptions) -> OptimizationOptions:
    """``options`` if breaching's attacker can be driven with them here: fedsim's ``ig`` with one restart, cosine
    matching, Adam and TV as its only regulariser."""
    if options.name != "ig" or not isinstance(options, OptimizationOptions):
        raise ValueError(f"name = {options.name!r}: the comparison with breaching takes 'ig' only")
    terms = sorted(entry.name for entry in options.regularizers if entry.weight > 0)
    settings = {
        "restarts": (int(options.restarts), 1),
        "loss": (options.loss, "cosine"),
        "optimizer": (options.optimizer, "adam"),
        "regularizers": (terms, ["tv"]),
    }
    for field, (value, allowed) in settings.items():
        if value != allowed:
            raise ValueError(f"{field} = {value!r}: the comparison with breaching takes {allowed!r} only")
    return options


def shared_problem(view: AttackerView, options: AttackOptions) -> SharedProblem:
    """fedsim's start for ``run_attack(options, [view], SEED)`` (target 0, restart 0) and its objective there."""
    options = comparable(options)
    problem = BatchedProblem.build(inverting_gradients.SPEC, options, [view], [0], CPU, torch.float32)
    v0 = problem.project(problem.initial(SEED, [0], [0]))
    objective, _ = problem.evaluate(v0)
    images, _ = problem.split(v0)
    return SharedProblem(view, recover_labels(view), images[0, 0].clone(), float(objective[0]))


def breaching_config(options: OptimizationOptions):
    """breaching's ``invertinggradients`` config at ``options``' iterations and step size, boxed, one trial."""
    with warnings.catch_warnings():  # it compiles with TorchScript on import, which torch now deprecates
        warnings.simplefilter("ignore")
        import breaching  # type: ignore[import-not-found]

    overrides = [
        f"optim.max_iterations={int(options.iterations)}",
        f"optim.step_size={float(options.lr)}",
        "optim.boxed=True",
        "optim.callback=1000000000",  # no progress lines inside the timed loop
        "restarts.num_trials=1",
        "init=randn",  # replaced by the shared start
        "impl.dtype=float",
    ]
    # its config loader prints a line and warns about Hydra's compatibility mode
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return breaching.get_attack_config("invertinggradients", overrides=overrides)


def breaching_inputs(problem: SharedProblem) -> tuple[list[dict], list[dict]]:
    """The server payload and the user's shared data breaching's ``reconstruct`` takes, from the view."""
    view = problem.view
    if view.input_bounds is None:
        raise ValueError("view.input_bounds = None: the comparison is boxed on both sides; give the view a box")
    low, high = (bound.detach().double().cpu() for bound in view.input_bounds)
    # breaching's box is [(0 - mean) / std, (1 - mean) / std]: this mean and std make it [low, high]
    metadata = SimpleNamespace(
        shape=tuple(view.input_shape),
        mean=(-low / (high - low)).tolist(),
        std=(1.0 / (high - low)).tolist(),
        modality="vision",
        boxed=True,
    )
    names = [name for name, _ in view.model.named_parameters()]
    buffers = [view.global_state[name] for name, _ in view.model.named_buffers()] or None
    payload = [dict(parameters=[view.global_state[name] for name in names], buffers=buffers, metadata=metadata)]
    shared = [
        dict(
            gradients=observed_target(view, names, CPU, torch.float32),
            buffers=None,
            metadata=dict(num_data_points=view.num_samples, labels=problem.labels.clone(), local_hyperparams=None),
        )
    ]
    return payload, shared


@dataclass(frozen=True)
class BreachingRun:
    images: torch.Tensor
    objectives: list[float]  # the objective breaching saw at each iteration, the start first


def run_breaching(problem: SharedProblem, config, tv_weight: float) -> BreachingRun:
    """One breaching attack from the shared start: its attacker built on the view's model, then ``reconstruct``."""
    import breaching

    logging.getLogger("breaching").setLevel(logging.WARNING)
    attacker = breaching.attacks.prepare_attack(
        problem.view.model, torch.nn.CrossEntropyLoss(), config, dict(dtype=torch.float32, device=CPU)
    )
    attacker.regularizers = [FedsimTotalVariation(tv_weight)]
    payload, shared = breaching_inputs(problem)
    output, stats = attacker.reconstruct(payload, shared, server_secrets={}, initial_data=problem.start.clone())
    return BreachingRun(output["data"].detach().cpu(), list(stats["Trial_0_Val"]))


def compare(view: AttackerView, truth: torch.Tensor, options: AttackOptions, pairs: int) -> dict:
    """``pairs`` alternated fedsim / breaching calls on ``view``: median CPU ms per iteration of each, the ratio,
    both objectives at the common start, each side's lowest objective and mean PSNR against ``truth``."""
    options = comparable(options)
    problem = shared_problem(view, options)
    config = breaching_config(options)
    iterations = int(options.iterations)
    # warm-up, untimed: first calls pay for lazy initialisation (TorchScript, allocator) on both sides
    run_attack(options.model_copy(update={"iterations": 2}), [view], SEED, CPU)
    run_breaching(problem, breaching_config(options.model_copy(update={"iterations": 2})), options.tv_weight)
    fedsim_ms: list[float] = []
    breaching_ms: list[float] = []
    for _ in range(pairs):
        started = time.process_time()
        (rec,) = run_attack(options, [view], SEED, CPU)
        fedsim_ms.append(1000 * (time.process_time() - started) / iterations)
        started = time.process_time()
        theirs = run_breaching(problem, config, options.tv_weight)
        breaching_ms.append(1000 * (time.process_time() - started) / iterations)
    ours_ms, their_ms = statistics.median(fedsim_ms), statistics.median(breaching_ms)
    return {
        "images": view.num_samples,
        "iterations": iterations,
        "fedsim_ms": ours_ms,
        "breaching_ms": their_ms,
        "ratio": ours_ms / their_ms,
        "fedsim_ms_each": fedsim_ms,
        "breaching_ms_each": breaching_ms,
        "fedsim_start_objective": problem.start_objective,
        "breaching_start_objective": theirs.objectives[0],
        "fedsim_best_objective": rec.objective,
        "breaching_best_objective": min(theirs.objectives),
        "fedsim_psnr": statistics.mean(paired_psnrs(rec.images, truth)),
        "breaching_psnr": statistics.mean(paired_psnrs(theirs.images, truth)),
    }


def same_start(row: dict, tolerance: float = 1e-5) -> bool:
    """Whether both attacks saw the same objective at the shared start (relative, float32 arithmetic)."""
    ours, theirs = row["fedsim_start_objective"], row["breaching_start_objective"]
    return abs(ours - theirs) <= tolerance * max(abs(ours), abs(theirs), 1e-30)
