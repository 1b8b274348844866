"""``tag``: text recovered by gradient matching over relaxed tokens (Deng et al., EMNLP Findings 2021).

TAG, "Gradient Attack on Transformer-based Language Models", extends DLG to transformers: dummy inputs and
dummy labels are optimised together until the update they produce matches the observed one under TAG's
distance, ``||g' - g||_2^2 + alpha ||g' - g||_1`` (the L1 term, weight ``l1_weight``, is what TAG adds to DLG),
and each dummy position is then decoded to the closest token.

A causal language model's targets are its inputs shifted by one (``fedsim.data.text``), so the dummy inputs and
labels are one object here: every position holds logits over the vocabulary; its softmax is the relaxed token,
its embedding the softmax-weighted mix of the word embeddings (the input), and the same distribution is the
previous position's soft label. A sequence of n tokens carries n + 1 such positions: the last is the target
after the last token (the tokenizer's end of sequence, which the attacker is not told). Decoding takes the most
likely token of each input position, the vocabulary entry closest to the relaxed one. The padding id (public:
the model is built with it) is never a candidate.

What the attacker reads off the update, as DAGER does: the tokens per sequence are the rows of the position
embeddings that moved (padding is masked out of attention and of the loss, so rows past the longest sequence
keep their weights; the full length where the position embeddings are not trained); every sequence of a batch
gets that length. Only the parameters whose update is not zero are matched (LoRA adapters, frozen embeddings).
Without the clients' learning rate (``adversary.knows.local_training``) both updates are matched at unit norm.

Restarts are batched with ``torch.func.vmap`` and each starts from its own seeded point, so a restart gives the
same result in whichever share of the restarts it runs. The chosen restart is the one whose decoded tokens'
update matches best (``objective``: that distance). Defaults follow TAG's setting as breaching runs it (Adam,
step 0.05, 1000 iterations, alpha 0.1 here on unit-free logits); not tuned for fedsim's models.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from pydantic import Field
from torch import nn
from torch.func import functional_call, grad, grad_and_value, vmap

from adversary.inversion.options import AttackOptions
from adversary.inversion.requirements import AttackSetting
from adversary.registry import ATTACKS
from adversary.view import AttackerView, Reconstruction

#: added to the padding id's logit: it never takes part in a relaxed token
EXCLUDED = -1e9


class TagOptions(AttackOptions):
    name: Literal["tag"] = Field("tag", description="TAG: text by gradient matching over relaxed tokens")
    threat_model: ClassVar[str] = "honest"
    modality: ClassVar[str] = "text"
    requires: ClassVar[str] = "a causal text model (gpt2) trained on next-token prediction"
    iterations: int = Field(1000, ge=1, description="Adam steps per restart")
    restarts: int = Field(4, ge=1, description="independent random starts, batched; the best-matching one wins")
    first_restart: int = Field(0, ge=0, description="index of the first restart run (each has its own fixed start)")
    lr: float = Field(0.05, gt=0, description="Adam step size on the token logits")
    l1_weight: float = Field(0.1, ge=0, description="TAG's alpha: weight of the L1 distance beside the squared L2")
    init_scale: float = Field(1.0, gt=0, description="standard deviation of the initial token logits")

    def refusal(self, setting: AttackSetting) -> str | None:
        return super().refusal(setting) or text_refusal(self.name, setting)


def text_refusal(name: str, setting: AttackSetting) -> str | None:
    """Why an attack on relaxed next-token sequences cannot run on ``setting``'s model, or None."""
    model = setting.model
    if getattr(model, "architecture", None) != "gpt2":
        return f"{name} relaxes the tokens of causal transformers (gpt2); {setting.model_name} is not one"
    if getattr(model, "task", "next-token") != "next-token":
        return f"{name} inverts next-token training, whose labels are the inputs; model.task = '{model.task}'"
    return None


@dataclass(frozen=True)
class TextTarget:
    """One update as the relaxed-token attacks see it: the network at the global weights and what to match."""

    network: nn.Module  # the transformers model (under any LoRA wrapper), eval mode, eager attention
    params: dict[str, torch.Tensor]  # every parameter of ``network`` at the global weights, detached
    matched: tuple[str, ...]  # the parameters whose update is not zero
    observed: tuple[torch.Tensor, ...]  # their gradient as the attacker estimates it (unit norm: scale_free)
    embedding: str  # the word embedding matrix in ``params``
    sequences: int
    length: int  # tokens per sequence
    pad_id: int
    scale_free: bool

    @property
    def vocab(self) -> int:
        return self.params[self.embedding].shape[0]

    def token_mask(self) -> torch.Tensor:
        """(V,) added to every position's logits: the padding id excluded."""
        mask = torch.zeros(self.vocab, dtype=self.params[self.embedding].dtype)
        mask[self.pad_id] = EXCLUDED
        return mask


def text_target(view: AttackerView) -> TextTarget:
    """The network at ``view``'s global weights, the parameters that moved and their gradient, the batch's shape."""
    network = copy.deepcopy(view.model.network).float().eval()
    network.config._attn_implementation = "eager"  # double backward under vmap
    network.load_state_dict(
        {name.removeprefix("network."): value.float() for name, value in view.global_state.items()}, strict=False
    )
    params = {name: value.detach() for name, value in network.named_parameters()}
    delta = {name.removeprefix("network."): value.float() for name, value in view.parameter_delta().items()}
    matched = tuple(name for name in params if name in delta and bool(delta[name].abs().max() > 0))
    if not matched:
        raise ValueError(f"{view.target}: the update is zero, there is nothing to match")
    training = view.local_training
    if training is not None:
        scale = 1.0 / (training.lr * max(1, training.local_steps))
    else:
        scale = 1.0 / float(torch.sqrt(sum(delta[name].square().sum() for name in matched)))
    weight = network.get_input_embeddings().weight
    embedding = next(name for name, value in network.named_parameters() if value is weight)
    return TextTarget(
        network=network,
        params=params,
        matched=matched,
        observed=tuple(delta[name] * scale for name in matched),
        embedding=embedding,
        sequences=view.num_samples,
        length=sequence_length(delta, matched, view.input_shape[-1]),
        pad_id=int(view.model.pad_id),
        scale_free=training is None,
    )


def sequence_length(delta: dict[str, torch.Tensor], matched: tuple[str, ...], longest: int) -> int:
    """The batch's longest sequence: the last row of the position embeddings that moved (``longest`` when they
    were not trained, or every row moved)."""
    positions = next((name for name in matched if name.endswith("wpe.weight")), None)
    if positions is None:
        return longest
    moved = torch.nonzero(delta[positions].abs().amax(dim=1) > 0).flatten()
    return min(longest, int(moved.max()) + 1) if len(moved) else longest


def next_token_loss(target: TextTarget, params: dict[str, torch.Tensor], probs: torch.Tensor) -> torch.Tensor:
    """The clients' mean cross-entropy for relaxed sequences ``probs`` (B, n + 1, V): positions 0..n-1 are the
    inputs (embedded through ``params``' word embeddings, so their lookup gradient is part of the update),
    positions 1..n the soft labels."""
    embeds = probs[:, :-1] @ params[target.embedding]
    logits = functional_call(target.network, params, (), {"inputs_embeds": embeds}).logits
    return -(probs[:, 1:] * torch.log_softmax(logits, dim=-1)).sum(-1).mean()


def simulated_update(target: TextTarget, probs: torch.Tensor) -> list[torch.Tensor]:
    """The gradient of the matched parameters that relaxed sequences ``probs`` produce (vmappable)."""
    free = {name: target.params[name] for name in target.matched}
    grads = grad(lambda moving: next_token_loss(target, {**target.params, **moving}, probs))(free)
    return [grads[name] for name in target.matched]


def update_distance(target: TextTarget, dummy: list[torch.Tensor], loss: str, l1_weight: float) -> torch.Tensor:
    """``cosine``: 1 - cosine of the two updates; ``tag``: squared L2 plus ``l1_weight`` times L1 (unit-norm
    updates when the learning rate is unknown)."""
    if loss == "cosine" or target.scale_free:
        dummy_norm = torch.sqrt(sum(d.square().sum() for d in dummy)).clamp(min=1e-30)
    if loss == "cosine":
        observed_norm = torch.sqrt(sum(o.square().sum() for o in target.observed))
        dot = sum((d * o).sum() for d, o in zip(dummy, target.observed, strict=True))
        return 1 - dot / (dummy_norm * observed_norm)
    if target.scale_free:
        dummy = [d / dummy_norm for d in dummy]
    gaps = [d - o for d, o in zip(dummy, target.observed, strict=True)]
    return sum(g.square().sum() for g in gaps) + l1_weight * sum(g.abs().sum() for g in gaps)


def initial_logits(target: TextTarget, restarts: Sequence[int], seed: int, scale: float) -> torch.Tensor:
    """(R, B, n + 1, V) starting logits, restart r drawn from its own generator."""
    shape = (target.sequences, target.length + 1, target.vocab)
    starts = [torch.randn(shape, generator=torch.Generator().manual_seed(seed * 100_003 + r)) for r in restarts]
    return torch.stack(starts) * scale


def optimise(
    logits: torch.Tensor,
    objective: Callable[[torch.Tensor], torch.Tensor],
    iterations: int,
    lr: float,
    every: int = 0,
    discrete: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """Adam on the (R, ...) logits of R restarts at once; ``discrete`` replaces them every ``every`` steps."""
    logits = logits.clone()
    optimizer = torch.optim.Adam([logits], lr=lr)
    step = vmap(grad_and_value(objective))
    for iteration in range(1, iterations + 1):
        logits.grad, _ = step(logits)
        optimizer.step()
        if discrete is not None and every and iteration % every == 0 and iteration < iterations:
            with torch.no_grad():
                logits.copy_(discrete(logits))
    return logits.detach()


def decoded(target: TextTarget, logits: torch.Tensor) -> torch.Tensor:
    """(..., B, n) the most likely token of each input position."""
    return (logits[..., :-1, :] + target.token_mask()).argmax(dim=-1)


def decoded_distance(target: TextTarget, logits: torch.Tensor, loss: str, l1_weight: float) -> torch.Tensor:
    """(R,) the update distance of each restart's decoded tokens (the last, unknown target stays relaxed)."""
    mask = target.token_mask()

    def one(restart_logits: torch.Tensor) -> torch.Tensor:
        tokens = torch.nn.functional.one_hot(decoded(target, restart_logits), target.vocab).to(mask.dtype)
        probs = torch.cat([tokens, torch.softmax(restart_logits[:, -1:] + mask, dim=-1)], dim=1)
        return update_distance(target, simulated_update(target, probs), loss, l1_weight)

    with torch.no_grad():
        return vmap(one)(logits)


def reconstruction(view: AttackerView, target: TextTarget, ids: torch.Tensor, distances, iterations, start) -> list:
    """The chosen restart's (B, n) tokens padded to the view's length, as a ``Reconstruction``."""
    tokens = torch.full((view.num_samples, view.input_shape[-1]), target.pad_id, dtype=torch.int64)
    tokens[:, : ids.shape[1]] = ids
    return Reconstruction(
        images=torch.zeros(view.num_samples, 0),
        labels=torch.full((view.num_samples,), -1, dtype=torch.int64),
        objective=float(distances.min()),
        restart_objectives=tuple(float(d) for d in distances),
        iterations=iterations,
        seconds=time.perf_counter() - start,
        tokens=tokens,
    )


def recover(view: AttackerView, options: TagOptions, seed: int) -> Reconstruction:
    start = time.perf_counter()
    target = text_target(view)
    mask = target.token_mask()

    def objective(logits: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(logits + mask, dim=-1)
        return update_distance(target, simulated_update(target, probs), "tag", options.l1_weight)

    restarts = range(options.first_restart, options.first_restart + options.restarts)
    logits = initial_logits(target, restarts, seed, options.init_scale)
    logits = optimise(logits, objective, options.iterations, options.lr)
    distances = decoded_distance(target, logits, "tag", options.l1_weight)
    best = int(torch.argmin(distances))
    return reconstruction(view, target, decoded(target, logits[best]), distances, options.iterations, start)


def attack(views: Sequence[AttackerView], options: TagOptions, seed: int, device: torch.device) -> list:
    """One reconstruction per view (CPU: the relaxed vocabulary of a small model)."""
    return [recover(view, options, seed) for view in views]


ATTACKS.register(
    "tag",
    help="TAG (Deng et al. 2021): text by matching the update (L2 + L1) over relaxed tokens, decoded to the "
    "closest vocabulary entries; per client or aggregated",
    config=TagOptions,
)(attack)
