"""Empirical privacy audit: the one-run lower bound on epsilon beside the accountant's, mechanism by mechanism.

Each case trains in process with fedsim's own client code (``clients.training.train_locally`` with the
``dpsgd`` session or an update-level defense, ``adversary.privacy_audit``'s canaries, scores and bound), on MNIST
(``mnist_test.npz``: 10,000 images, shuffled per seed; half for training, half held out), an MLP with one hidden
layer of 64 units (50,890 weights), SGD at lr 0.1, and reports the audit at 95 % confidence, delta 1e-5:

* ``dpsgd`` at accountant epsilon 1, 4, 8 (example level: add/remove one example of the host client): one
  client with 1,000 images trains 10 rounds of 10 Poisson-sampled steps (batch 100, C = 1; the noise multiplier
  reaches the target after the 100 steps). White-box: 5,000 Dirac gradient canaries (norm C, each included with
  probability 1/2 and then joining each step at the sampling rate), scored by the host's pseudo-gradient summed
  over the rounds (what the man in the middle sees). Black-box: 500 mislabelled held-out images, the included
  ones added to the host's data, scored by minus their loss under the final model. Both canary sets are in the
  same run (each audit's guesses are independent of the other set).
* central DP (``strategy.dp``, fixed-denominator estimator, server-side clipping at C = 1, client level: add/remove
  one client) at accountant epsilon 1, 4, 8 over 10 rounds (no amplification: every round a full Gaussian
  release): 10 clients of 500 images each take 5 local steps (batch 50) per round; 1,000 canary clients each send
  ``C u_j`` (a random unit direction) in every round they are included in. White-box: the cosine between each
  round's aggregate change and ``u_j``, summed over rounds; black-box: the cosine of the final model's change.
* no defense (the reference) and the defenses that claim no epsilon (``noise`` sigma 0.01, ``clip`` 0.5,
  ``prune`` 0.9, ``gradient_dropout`` p 0.6 sigma 0.005, ``soteria`` 0.8: the defense table's settings), example
  level, as ``dpsgd`` above but with plain shuffled batches and the defense on the update; a Dirac canary is a
  gradient of norm 10 added to the batch mean as one more example would be (without per-example clipping nothing
  bounds an example's gradient; the median per-example gradient norm of this model at initialisation is 11.8, so
  10 is no worst case). These get a measured epsilon and no guarantee.

Utility: each case is also trained without canaries (same seed); the table gives both final test accuracies
(the audited model is not the production model: the canaries are excluded from the latter).

An audit of m canaries cannot show more than m right guesses prove (the confidence split over the guess counts
tried): about 6.6 with 5,000 Dirac canaries, 5.3 with 1,000 canary clients and 4.7 with 500 canary examples, so
epsilon 8 cannot be reached by this audit size. Seeds 0-4 for dpsgd and the defenses, 0-2 for central DP; intervals
are 95 % bootstrap intervals over the seeds (``bench.common.interval``).

Every audit is read by two analyses of the same guesses: the epsilon-delta bound (Steinke et al. 2023) and the
f-DP bound for Gaussian DP (Mahloujifar et al. 2024, ``adversary.privacy_audit.fdp``); the central-DP rows also
get Andrew et al.'s one-shot estimate (``adversary.privacy_audit.one_shot``), an estimate and not a bound.

Results are appended per (case, seed) to ``OUT/audit.jsonl``; a rerun skips what is there (resume).

    nice -n 10 .venv/bin/python -m bench.audit [--data-dir DIR] [--out DIR] [--docs]
    nice -n 15 .venv/bin/python -m bench.audit --ideal [--seeds 5]
    nice -n 15 .venv/bin/python -m bench.audit --dpsgd [--seeds 5] [--data-dir DIR] [--out DIR]

``--docs`` writes the table into ``docs/results/privacy-audit.md`` and the README. ``--ideal`` audits the canary designs
of ``bench.audit_design`` on the idealised Gaussian mechanism (true epsilon known exactly; numpy only, minutes).
``--dpsgd`` runs the DP-SGD row at epsilon 4 alone (white-box, with canaries only; ``OUT/dpsgd-4.jsonl``) and sets
it beside the idealised mechanism with the same canary design, and beside Gaussian scores that separate as
DP-SGD's did.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from opacus.accountants.utils import get_noise_multiplier

from adversary.privacy_audit.bound import audit_guesses, ceiling
from adversary.privacy_audit.canaries import CanaryClients, CanaryExamples, DiracCanaries
from adversary.privacy_audit.one_shot import one_shot_estimate
from adversary.privacy_audit.scores import ClientCanaryScores, DiracScores, loss_scores
from bench.audit_design import DESIGNS, audit_design, gdp_mu, ideal_lines, separation_mu
from bench.common import (
    DOCS_PAGES,
    MNIST,
    REPO,
    add_data_dir,
    add_docs_flag,
    data_file,
    format_interval,
    interval,
    write_between_markers,
)
from clients.defenses.base import DefenseContext, TrainingContext
from clients.defenses.pipeline import apply_update_defenses, pseudo_gradient, weights_to_send
from clients.training import train_locally
from fedsim.config import parse_config
from fedsim.core.evaluation import evaluate
from fedsim.core.seeding import derive_seed
from fedsim.models.architectures.mlp import MLP
from strategies.dp import sensitivity
from strategies.privacy import AggregatePrivacyLedger

MARKER = "audit-table"
DELTA, CONFIDENCE, LR, CLIP = 1e-5, 0.95, 0.1, 1.0
#: a Dirac canary's gradient norm where nothing clips per example (below the model's median per-example norm at init)
UNCLIPPED_CANARY_NORM = 10.0
EPSILONS = (1.0, 4.0, 8.0)
DEFENSES: dict[str, dict[str, Any] | None] = {
    "none": None,  # the reference: plain training, nothing on the update
    "noise": {"name": "noise", "sigma": 0.01},
    "clip": {"name": "clip", "max_norm": 0.5},
    "prune": {"name": "prune", "ratio": 0.9},
    "gradient_dropout": {"name": "gradient_dropout", "p": 0.6, "sigma": 0.005},
    "soteria": {"name": "soteria", "ratio": 0.8},
}
# example level
HOST_IMAGES, HOST_BATCH, HOST_ROUNDS, HOST_STEPS, DIRAC, EXAMPLES = 1000, 100, 10, 10, 5000, 500
# client level
CLIENTS, CLIENT_IMAGES, CLIENT_BATCH, CLIENT_STEPS, CENTRAL_ROUNDS, CANARY_CLIENTS = 10, 500, 50, 5, 10, 1000


@dataclass
class Data:
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor


def mnist(path: Path, seed: int) -> Data:
    arrays = np.load(path)
    x = (torch.from_numpy(arrays["x"]).float().unsqueeze(1) / 255 - 0.1307) / 0.3081
    y = torch.from_numpy(arrays["y"].astype(np.int64))
    order = torch.from_numpy(np.random.default_rng(derive_seed(seed, "audit-bench-split")).permutation(len(x)))
    half = len(x) // 2
    return Data(x[order[:half]], y[order[:half]], x[order[half:]], y[order[half:]])


def mlp(seed: int) -> torch.nn.Module:
    torch.manual_seed(derive_seed(seed, "audit-bench-model"))
    return MLP(784, 10, [64])


def trainable(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in model.named_parameters()}


def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    return float(evaluate(model, x, y, 10)["accuracy"])


@dataclass
class Outcome:
    """One (case, seed): both audits, the accountant's epsilon, and the final accuracy with and without canaries."""

    white: dict[str, float] = field(default_factory=dict)
    black: dict[str, float] = field(default_factory=dict)
    epsilon: float | None = None
    accuracy: float = math.nan
    accuracy_without: float = math.nan
    white_scores: tuple[np.ndarray, np.ndarray] | None = None  # (scores, included) of the white-box canaries


def summary(result: Any, scores: np.ndarray, included: np.ndarray) -> dict[str, float]:
    """Both analyses' bounds, the epsilon-delta one's guesses, and how far the canary scores separate."""
    return {
        "bound": result.epsilon_lower,
        "guesses": result.guesses,
        "correct": result.correct,
        "fdp": result.fdp_epsilon_lower,
        "mu": result.gdp_mu_lower,
        "separation_mu": separation_mu(scores, included),
        # Andrew et al.'s estimate: the table shows it for the canary clients' cosines only
        "one_shot": one_shot_estimate(scores, included, DELTA).epsilon,
    }


def audited(scores: np.ndarray, included: np.ndarray) -> dict[str, float]:
    return summary(audit_guesses(scores, included, delta=DELTA, confidence=CONFIDENCE), scores, included)


def example_level(data: Data, seed: int, defense: dict[str, Any] | None, canaries: bool) -> Outcome:
    """One host client trained HOST_ROUNDS rounds under ``defense``, audited white-box and black-box."""
    outcome = Outcome()
    x, y = data.train_x[:HOST_IMAGES], data.train_y[:HOST_IMAGES]
    examples = CanaryExamples.draw(data.test_x, data.test_y, EXAMPLES, 10, seed)
    held_out = torch.ones(len(data.test_x), dtype=torch.bool)  # accuracy on the held-out images that are no canary
    held_out[torch.from_numpy(examples.source)] = False
    if canaries:
        extra_x, extra_y = examples.inserted()
        x, y = torch.cat([x, extra_x]), torch.cat([y, extra_y])
    model = mlp(seed)
    names = [name for name, _ in model.named_parameters()]
    training = defense if defense is not None and defense["name"] == "dpsgd" else None
    norm = CLIP if training else UNCLIPPED_CANARY_NORM
    dirac = DiracCanaries.draw(DIRAC, sum(p.numel() for p in model.parameters()), norm, seed)
    scores = DiracScores(dirac, names)
    cfg = parse_config(
        {
            "client": {
                "lr": LR,
                "batch_size": HOST_BATCH,
                "local_steps": HOST_STEPS,
                "defenses": [training] if training else [],
            }
        }
    ).client
    updates = [] if training or defense is None else parse_config({"client": {"defenses": [defense]}}).client.defenses
    with tempfile.TemporaryDirectory() as ledger:
        for server_round in range(1, HOST_ROUNDS + 1):
            global_params = trainable(model)
            result = train_locally(
                model,
                x,
                y,
                np.arange(len(x)),
                cfg,
                seed=derive_seed(seed, "audit-bench-train", server_round),
                context=TrainingContext(server_round, HOST_ROUNDS, Path(ledger)),
                canaries=dirac.inserter(HOST_BATCH / len(x), derive_seed(seed, "audit-bench-steps", server_round))
                if canaries
                else None,
            )
            if updates:
                sent = defended(model, global_params, updates, x, y, seed, server_round)
                model.load_state_dict(sent, strict=False)
            scores.observe(global_params, trainable(model), LR)
        if training:
            outcome.epsilon = result.defense_records["defense.dpsgd.epsilon"]
    outcome.accuracy = accuracy(model, data.test_x[held_out], data.test_y[held_out])
    if canaries:
        outcome.white = audited(scores.scores, dirac.included)
        outcome.white_scores = (scores.scores, dirac.included)
        outcome.black = audited(loss_scores(model, examples.x, examples.y), examples.included)
    return outcome


def defended(
    model: torch.nn.Module,
    global_params: dict[str, torch.Tensor],
    defenses: list[Any],
    x: torch.Tensor,
    y: torch.Tensor,
    seed: int,
    server_round: int,
) -> dict[str, torch.Tensor]:
    """What the client sends after its update-level defenses (as ``clients.client_app`` shapes it)."""
    reference = mlp(seed)
    reference.load_state_dict(global_params, strict=False)
    reference.train()

    def context_for(position: int) -> DefenseContext:
        generator = torch.Generator().manual_seed(derive_seed(seed, "defense", server_round, position))
        return DefenseContext(model=reference, x=x, y=y, lr=LR, generator=generator)

    update, _ = apply_update_defenses(defenses, pseudo_gradient(global_params, trainable(model), LR), context_for)
    return weights_to_send(global_params, update, LR)


def client_level(data: Data, seed: int, target_epsilon: float, canaries: bool) -> Outcome:
    """Central DP over CLIENTS clients with canary clients, audited from each round's aggregate and the final one."""
    outcome = Outcome()
    model = mlp(seed)
    names = [name for name, _ in model.named_parameters()]
    initial = trainable(model)
    dimension = sum(p.numel() for p in model.parameters())
    plan = CanaryClients.draw(CANARY_CLIENTS, dimension, CLIP, seed)
    inserted = plan.inserted_sum().float() if canaries else torch.zeros(dimension)
    white = ClientCanaryScores(plan, names)
    multiplier = float(
        get_noise_multiplier(target_epsilon=target_epsilon, target_delta=DELTA, sample_rate=1.0, steps=CENTRAL_ROUNDS)
    )
    noise_std = multiplier * sensitivity("fixed-denominator", CLIP, CLIENTS)
    ledger = AggregatePrivacyLedger(DELTA)
    cfg = parse_config({"client": {"lr": LR, "batch_size": CLIENT_BATCH, "local_steps": CLIENT_STEPS}}).client
    noise = torch.Generator().manual_seed(derive_seed(seed, "audit-bench-noise"))
    for server_round in range(1, CENTRAL_ROUNDS + 1):
        global_params = trainable(model)
        start = torch.cat([value.reshape(-1) for value in global_params.values()])
        total = inserted.clone()
        for client in range(CLIENTS):
            rows = slice(client * CLIENT_IMAGES, (client + 1) * CLIENT_IMAGES)
            model.load_state_dict(global_params, strict=False)
            train_locally(
                model,
                data.train_x[rows],
                data.train_y[rows],
                np.arange(CLIENT_IMAGES),
                cfg,
                seed=derive_seed(seed, "audit-bench-client", server_round, client),
            )
            change = torch.cat([value.detach().reshape(-1) for value in model.parameters()]) - start
            total += change * min(1.0, CLIP / max(float(change.norm()), 1e-12))  # server-side clipping
        released = start + total / CLIENTS + noise_std * torch.randn(dimension, generator=noise)
        ledger.release(multiplier, 1.0)
        offset, parameters = 0, dict(model.named_parameters())
        for name, value in global_params.items():
            parameters[name].data.copy_(released[offset : offset + value.numel()].view_as(value))
            offset += value.numel()
        if canaries:
            white.observe(global_params, trainable(model))
    outcome.epsilon = ledger.epsilon()
    outcome.accuracy = accuracy(model, data.test_x, data.test_y)
    if canaries:
        outcome.white = audited(white.scores, plan.included)
        final = ClientCanaryScores(plan, names)
        final.observe(initial, trainable(model))
        outcome.black = audited(final.scores, plan.included)
    return outcome


def cases() -> list[tuple[str, int, Callable[[Data, int, bool], Outcome]]]:
    """(label, seeds, run(data, seed, canaries)) of every row of the table."""
    rows: list[tuple[str, int, Callable[[Data, int, bool], Outcome]]] = []
    for epsilon in EPSILONS:
        dpsgd = {"name": "dpsgd", "target_epsilon": epsilon, "max_grad_norm": CLIP}
        rows.append((f"dpsgd eps={epsilon:g}", 5, lambda d, s, c, dpsgd=dpsgd: example_level(d, s, dpsgd, c)))
    for epsilon in EPSILONS:
        rows.append((f"central-dp eps={epsilon:g}", 3, lambda d, s, c, e=epsilon: client_level(d, s, e, c)))
    for label, defense in DEFENSES.items():
        rows.append((label, 5, lambda d, s, c, defense=defense: example_level(d, s, defense, c)))
    return rows


def run_all(path: Path, out: Path) -> dict[str, list[dict[str, Any]]]:
    out.mkdir(parents=True, exist_ok=True)
    log = out / "audit.jsonl"
    done = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    finished = {(row["case"], row["seed"]) for row in done}
    for label, seeds, run in cases():
        for seed in range(seeds):
            if (label, seed) in finished:
                continue
            data = mnist(path, seed)
            audited, production = run(data, seed, True), run(data, seed, False)
            row = {
                "case": label,
                "seed": seed,
                "epsilon": audited.epsilon,
                "white": audited.white,
                "black": audited.black,
                "accuracy": audited.accuracy,
                "accuracy_without": production.accuracy,
            }
            print(json.dumps(row), flush=True)
            with log.open("a") as handle:
                handle.write(json.dumps(row) + "\n")
            done.append(row)
    grouped: dict[str, list[dict[str, Any]]] = {}
    for row in done:
        grouped.setdefault(row["case"], []).append(row)
    return grouped


def table(grouped: dict[str, list[dict[str, Any]]]) -> list[str]:
    dirac, clients = ceiling(DIRAC, DELTA), ceiling(CANARY_CLIENTS, DELTA)
    lines = [
        "`nice -n 10 .venv/bin/python -m bench.audit --data-dir DIR --docs` (in process, MNIST, an MLP of 50,890 "
        "weights; set-up: the docstring of bench/audit.py). One-run lower bounds on epsilon at 95 % confidence, "
        "delta 1e-5, by two analyses of the same guesses: epsilon-delta (Steinke et al. 2023; assumes nothing) and "
        "f-DP (Mahloujifar et al. 2024; not mu-GDP, read as epsilon at delta, assumes a Gaussian trade-off curve: "
        "the defenses have none, read their epsilon-delta columns). "
        "5,000 Dirac canaries (white-box, example level), 500 canary examples (black-box), 1,000 canary clients "
        "(client level; black-box column: the final model's change). Mean over the seeds [95 % bootstrap interval "
        "over them]; ratio = white-box bound / accountant epsilon (epsilon-delta / f-DP); ceiling: what the design "
        f"reports when every guess is right ({dirac[0]:.2f} / {dirac[1]:.2f} with the Dirac canaries, "
        f"{clients[0]:.2f} / {clients[1]:.2f} with the canary clients). One-shot: Andrew et al.'s estimate from the "
        "canary clients' white-box cosines, an estimate and not a bound. Accuracy: final test accuracy of the "
        "audited model (with canaries) and of the same seed's run without them.",
        "",
        "| mechanism | adjacency | seeds | white-box canary norm | accountant epsilon | white-box bound: "
        "epsilon-delta | f-DP | ratio | black-box bound: epsilon-delta | f-DP | one-shot estimate | "
        "accuracy with canaries | without |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label, _, _ in cases():
        rows = grouped.get(label)
        if not rows:
            continue
        claimed = rows[0]["epsilon"]
        white, black = (
            {key: interval([row[side][key] for row in rows]) for key in ("bound", "fdp")} for side in ("white", "black")
        )
        ratio = f"{white['bound'].value / claimed:.2f} / {white['fdp'].value / claimed:.2f}" if claimed else "-"
        client = label.startswith("central")
        norm = CLIP if client or label.startswith("dpsgd") else UNCLIPPED_CANARY_NORM
        one_shot = format_interval(interval([row["white"]["one_shot"] for row in rows]), 2) if client else "-"
        lines.append(
            f"| {label.split(' ')[0]} | {'client' if client else 'example'} | {len(rows)} | {norm:g} | "
            f"{f'{claimed:.2f}' if claimed is not None else 'none'} | {format_interval(white['bound'], 2)} | "
            f"{format_interval(white['fdp'], 2)} | {ratio} | {format_interval(black['bound'], 2)} | "
            f"{format_interval(black['fdp'], 2)} | {one_shot} | "
            f"{format_interval(interval([row['accuracy'] for row in rows]), 3)} | "
            f"{format_interval(interval([row['accuracy_without'] for row in rows]), 3)} |"
        )
    return lines


def dpsgd_lines(path: Path, out: Path, seeds: int, epsilon: float = 4.0) -> list[str]:
    """DP-SGD at ``epsilon`` (the table's example-level set-up, with canaries only), white-box, both analyses, with
    the bench's guess counts and with few guesses (two designs fixed before the run, each at 95 %), beside the
    idealised mechanism at that epsilon and Gaussian scores that separate as DP-SGD's did, with the same design."""
    out.mkdir(parents=True, exist_ok=True)
    log = out / f"dpsgd-{epsilon:g}.jsonl"
    rows = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    dpsgd = {"name": "dpsgd", "target_epsilon": epsilon, "max_grad_norm": CLIP}
    designs = (DESIGNS[0], next(design for design in DESIGNS if design.label == "few guesses"))
    for seed in range(len(rows), seeds):
        outcome = example_level(mnist(path, seed), seed, dpsgd, True)
        assert outcome.white_scores is not None
        row = {"seed": seed, "epsilon": outcome.epsilon, "separation_mu": outcome.white["separation_mu"]}
        for design in designs:
            result = audit_guesses(*outcome.white_scores, delta=DELTA, fractions=design.fractions)
            row[design.label] = {"bound": result.epsilon_lower, "fdp": result.fdp_epsilon_lower}
        rows.append(row)
        print(json.dumps(row), flush=True)
        with log.open("a") as handle:
            handle.write(json.dumps(row) + "\n")
    claimed = float(np.mean([row["epsilon"] for row in rows]))
    separation = interval([row["separation_mu"] for row in rows])
    lines = [
        f"DP-SGD at accountant epsilon {claimed:.2f} (`--dpsgd`, white-box, {len(rows)} seeds, {DIRAC:,} Dirac "
        f"canaries of norm C; score separation {format_interval(separation, 2)}, against {gdp_mu(claimed, DELTA):.2f} "
        "for a Gaussian mechanism of that epsilon) beside the idealised mechanism and Gaussian scores separated as "
        "DP-SGD's, each with the same canary design. Ratio: bound / accountant epsilon.",
        "",
        "| guesses per side (fraction of m) | scores | epsilon-delta bound | ratio | f-DP bound | ratio |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for design in designs:
        fractions = ", ".join(f"{f:g}" for f in design.fractions)
        ideal = audit_design(design, claimed, DELTA, seeds)
        separated = audit_design(design, claimed, DELTA, seeds, mu=separation.value)
        measured = [
            ("DP-SGD", [row[design.label]["bound"] for row in rows], [row[design.label]["fdp"] for row in rows]),
            ("idealised mechanism", *([run[key] for run in ideal["runs"]] for key in ("epsilon_delta", "fdp"))),
            (
                f"Gaussian, separated as DP-SGD's (true epsilon {separated['true_epsilon']:.2f})",
                *([run[key] for run in separated["runs"]] for key in ("epsilon_delta", "fdp")),
            ),
        ]
        for label, bounds, fdps in measured:
            low, high = interval(bounds), interval(fdps)
            lines.append(
                f"| {fractions} | {label} | {format_interval(low, 2)} | {low.value / claimed:.2f} | "
                f"{format_interval(high, 2)} | {high.value / claimed:.2f} |"
            )
        lines.append(
            f"| {fractions} | ceiling (every guess right) | {ideal['ceiling_epsilon_delta']:.2f} | | "
            f"{ideal['ceiling_fdp']:.2f} | |"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_dir(parser)
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench-audit", help="results folder (resumed)")
    add_docs_flag(parser, MARKER)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--ideal", action="store_true", help="only the canary designs (python -m bench.audit_design)")
    mode.add_argument("--dpsgd", action="store_true", help="only DP-SGD at epsilon 4 against the idealised mechanism")
    parser.add_argument("--seeds", type=int, default=5, help="seeds of --ideal and --dpsgd")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.ideal or args.dpsgd:
        lines = (
            ideal_lines(args.seeds)
            if args.ideal
            else dpsgd_lines(data_file(args.data_dir, MNIST), args.out, args.seeds)
        )
        print("\n".join(lines))
        return
    grouped = run_all(data_file(args.data_dir, MNIST), args.out)
    lines = table(grouped)
    print("\n".join(lines))
    if args.docs:  # the results page and the README carry the same table
        write_between_markers(DOCS_PAGES[MARKER], MARKER, lines)
        write_between_markers(REPO / "README.md", MARKER, lines)


if __name__ == "__main__":
    main()
