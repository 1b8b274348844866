"""``dager``: exact recovery of a batch of text from a causal transformer's update (Petrov et al., NeurIPS 2024).

DAGER, "Exact Gradient Inversion for Large Language Models". A linear layer y = x W applied to the n token
vectors x_1..x_n of a batch has the weight gradient X^T dY: its columns lie in the span of the x_i, and when
n is below the layer's input width that span is a proper subspace. A transformer's first attention projection
(GPT-2's ``c_attn`` of block 1) receives ``ln_1(wte[token] + wpe[position])``: a function of one token and its
position, which the attacker computes for every vocabulary entry from the public weights. So

1. **span**: the left singular vectors of the update of block 1's (and block 2's) projection, down to the
   widest drop of its spectrum (below it lies the float rounding of the update), are bases of the spans of
   the batch's layer inputs;
2. **layer-1 filter**: a (token, position) pair whose block-1 input lies within ``layer1_threshold``
   (relative distance) of the block-1 span was in the batch at that position;
3. **layer-2 greedy decoding**: in a causal model the block-2 input at position p is a function of tokens
   0..p only. Sequences grow one position at a time: every kept prefix is extended by every layer-1
   candidate of the next position, and an extension is kept when its block-2 input at p lies within
   ``layer2_threshold`` of the block-2 span. A prefix that no candidate extends is a finished sequence.

The update is ``w_t - w_{t+1}``, a multiple of the gradient after one SGD step (the span does not depend on the
learning rate); after several steps it is a sum of gradients at nearby weights, whose span the paper reports is
still close enough.

**LoRA** (only the adapters train: ``W + s B A``, A of shape (r, D), B of shape (out, r)). With
G = sum_i delta_i x_i^T the frozen layer's gradient, ``dL/dA = s B^T G`` has rows in the span of the x_i (what
the paper's span check reads), and ``dL/dB = s G A^T = s sum_i delta_i (A x_i)^T`` has rows in the span of the
projected inputs A x_i. DAGER reads ``lora_B``'s update and checks a candidate's A x against that span (r wide):
B starts at zero, so ``dL/dA`` is zero in the first round and, while B stays small, so small beside A's weights
that the float32 rounding of ``A_t - A_{t+1}`` buries it (measured: no drop in its spectrum after one round),
where B's update is as large as B itself. A (public, random at the start) keeps A x of distinct token vectors
apart as long as the batch holds fewer token vectors than r: the rank sets the batch DAGER can read.

**Known noise** (``update_noise``): SecAgg+ quantises every client's weights to a grid of step
``2 clipping_range / quantization_range`` with stochastic rounding, which leaves noise of a known standard
deviation in every entry of the aggregate (``step sqrt(K / 6) / sum of the clients' weight factors``; 7.8e-7 with
Flower's defaults and 4 clients). Its singular values reach about ``std (sqrt(m) + sqrt(n))`` for an m x n update,
above the weakest directions of a batch's span, so the spectrum shows no drop and the span reads as the whole
space. With the noise known the span is cut at ``NOISE_MARGIN`` times that edge and both thresholds widen to
``SLACK_SHARE`` of how far the noise can tilt the smallest kept direction (its edge over that singular value):
tokens whose directions sink below the noise are lost, and sequence ends, read from where no extension passes,
blur (a sequence runs on with another's tokens). Left unset, the noise is the view's (``AttackerView.update_noise``):
under ``fedsim run`` a SecAgg+ aggregate's, which the server derives from the protocol's public parameters and the
counts sent in clear.

The attacker needs no data and no prior; it knows the public architecture and weights, as any honest server.
Sequences are returned shortest distance first; when more are found than ``num_samples``, the closest are kept,
when fewer, the rest are empty (all of them when an update spans its layer's whole input space: the batch held
more tokens than the layer is wide, and the check tells nothing). ``objective``: the mean block-2 distance of the
returned sequences (1 when none).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from pydantic import Field
from torch import nn

from adversary.inversion.options import AttackOptions
from adversary.inversion.requirements import AttackSetting
from adversary.registry import ATTACKS
from adversary.view import AttackerView, Reconstruction

#: the smallest drop (natural log) between consecutive singular values that separates the batch from rounding
MIN_GAP = 2.3  # a factor of 10
#: with known noise in the update, singular values below this multiple of the noise's largest are not the batch's
NOISE_MARGIN = 2.0
#: the share of that bound a distance may reach (the bound is the worst case; on SecAgg+ aggregates of a small
#: GPT-2 the batch's own tokens stayed below a tenth of it at block 1, a half at block 2)
SLACK_SHARE = 0.5


class DagerOptions(AttackOptions):
    name: Literal["dager"] = Field("dager", description="exact text recovery from the span of attention updates")
    threat_model: ClassVar[str] = "honest"
    modality: ClassVar[str] = "text"
    requires: ClassVar[str] = "a causal text model (gpt2) with two blocks or more; client.optimizer: sgd"
    rank_tolerance: float = Field(
        1e-12,
        gt=0,
        lt=1,
        description="singular values of the update below this share of the largest are noise; "
        "above it the spectrum is cut at its largest relative drop",
    )
    layer1_threshold: float = Field(
        1e-3, gt=0, lt=1, description="largest relative distance of a (token, position) to the block-1 span"
    )
    layer2_threshold: float = Field(
        1e-3, gt=0, lt=1, description="largest relative distance of a prefix's block-2 input to the block-2 span"
    )
    update_noise: float | None = Field(
        None,
        ge=0,
        description="standard deviation of the noise known to be in each entry of the update; the span is cut "
        "where the noise's spectrum ends and the thresholds widen by how far that noise can tilt it (null = the "
        "noise the protocol is known to add: SecAgg+'s quantisation, from its public parameters, on its aggregate; "
        "float rounding only elsewhere)",
    )
    max_prefixes: int = Field(
        4096, ge=1, description="prefixes kept per position (the closest), bounding the search when spans are loose"
    )

    def refusal(self, setting: AttackSetting) -> str | None:
        refused = super().refusal(setting)
        if refused:
            return refused
        if getattr(setting.model, "architecture", None) != "gpt2":
            return f"dager decodes causal transformers (gpt2); {setting.model_name} is not one"
        if len(projections(setting.model)) < 2:
            return f"dager reads the first two blocks' attention updates; {setting.model_name} has one block"
        if setting.optimizer != "sgd":
            return (
                f"dager needs updates that are sums of gradients; client.optimizer = '{setting.optimizer}' rescales "
                "every entry on its own (allowed: sgd)"
            )
        return None


def projections(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The attention input projection (``c_attn``) of each block, by name in ``model``, in block order."""
    return [(name, module) for name, module in model.named_modules() if name.endswith("attn.c_attn")]


@dataclass(frozen=True)
class Span:
    """The span of one block's projection inputs as an update shows it: orthonormal columns ``basis`` in the space
    of ``probe`` x (``probe``: None for the inputs themselves; LoRA's A, (r, D), for their projections A x)."""

    basis: torch.Tensor
    probe: torch.Tensor | None = None
    slack: float = 0.0  # how far known noise can tilt the span: its largest singular value over the smallest kept

    def threshold(self, threshold: float) -> float:
        """``threshold`` widened to a share of the span's slack."""
        return max(threshold, SLACK_SHARE * self.slack)

    def distance(self, vectors: torch.Tensor) -> torch.Tensor:
        """Relative distance of each row of ``vectors`` (block inputs) to the span (1 = orthogonal)."""
        return distance(vectors if self.probe is None else vectors @ self.probe.T, self.basis)


def span_of(
    model: nn.Module,
    global_state,
    delta: dict[str, torch.Tensor],
    block: int,
    options: DagerOptions,
    noise: float | None = None,
) -> Span:
    """The span of block ``block``'s projection inputs read off its update: the weight's, or LoRA's B's;
    ``noise``: the known noise per entry of the update (None: float rounding only)."""
    name, _ = projections(model)[block]
    lora_b = f"{name}.lora_B.default.weight"
    if lora_b in delta:  # (out, r): rows in the span of A x_i
        update, probe = delta[lora_b].T, global_state[f"{name}.lora_A.default.weight"].double()
    else:  # Conv1D stores (in, out): columns in the input space
        update, probe = delta[f"{name}.weight"], None
    left, singular, _ = torch.linalg.svd(update.double(), full_matrices=False)
    if noise is None:
        return Span(left[:, : span_rank(singular, options.rank_tolerance)], probe)
    # i.i.d. noise of std s in an m x n matrix has singular values up to about s (sqrt(m) + sqrt(n))
    edge = noise * (update.shape[0] ** 0.5 + update.shape[1] ** 0.5)
    rank = int((singular > NOISE_MARGIN * edge).sum())
    slack = float(edge / singular[rank - 1]) if rank else 1.0
    return Span(left[:, :rank], probe, slack)


def span_rank(singular: torch.Tensor, tolerance: float) -> int:
    """The rank of an update with float rounding in it: its spectrum cut at the largest relative drop.

    The batch's directions and the rounding of ``w_t - w_{t+1}`` (float32: about 1e-7 of the largest singular
    value) are separated by the widest gap of the spectrum; values below ``tolerance`` of the largest never count.
    Without a drop of at least ``MIN_GAP`` the update fills its space (more tokens than the layer's width).
    """
    if singular.numel() == 0 or singular[0] == 0:
        return 0
    kept = singular[singular > tolerance * singular[0]]
    drops = torch.log(kept[:-1]) - torch.log(kept[1:])
    if len(kept) < len(singular):  # the drop from the last kept value to the first one below the tolerance
        below = singular[len(kept)].clamp(min=torch.finfo(singular.dtype).tiny)
        drops = torch.cat([drops, torch.log(kept[-1:] / below)])
    if len(drops) == 0 or drops.max() < MIN_GAP:
        return len(kept)
    return int(torch.argmax(drops)) + 1


def distance(vectors: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """Relative distance of each row of ``vectors`` to the span of ``basis``'s columns (1 = orthogonal)."""
    residual = vectors - (vectors @ basis) @ basis.T
    return residual.norm(dim=-1) / vectors.norm(dim=-1).clamp(min=torch.finfo(vectors.dtype).tiny)


class _Captured(Exception):
    """Stops a forward pass once the wanted block's input is captured (nothing later is needed)."""


def block_inputs(model: nn.Module, ids: torch.Tensor, block: int) -> torch.Tensor:
    """(B, L, D) inputs of block ``block``'s attention projection for token ids (B, L)."""
    _, module = projections(model)[block]
    captured: list[torch.Tensor] = []

    def hook(_module: nn.Module, args: tuple) -> None:
        captured.append(args[0])
        raise _Captured

    handle = module.register_forward_pre_hook(hook)
    try:
        model(ids)
    except _Captured:
        pass
    finally:
        handle.remove()
    return captured[0]


def layer1_candidates(model: nn.Module, span: Span, vocab: int, length: int, threshold: float) -> list:
    """Per position, the tokens whose block-1 input lies in the span: a row of one token repeated gives them all."""
    distances = []
    for start in range(0, vocab, 1024):
        ids = torch.arange(start, min(vocab, start + 1024))[:, None].expand(-1, length)
        distances.append(span.distance(block_inputs(model, ids, 0)))
    by_position = torch.cat(distances).T  # (L, V)
    return [torch.nonzero(row < threshold).flatten() for row in by_position]


def decode(
    model: nn.Module, span: Span, candidates: list[torch.Tensor], threshold: float, max_prefixes: int
) -> list[tuple[list[int], float]]:
    """Greedy layer-2 decoding: every finished sequence with its mean block-2 distance."""
    prefixes = torch.zeros(1, 0, dtype=torch.int64)
    scores = torch.zeros(1, dtype=torch.float64)
    finished: list[tuple[list[int], float]] = []
    for position, tokens in enumerate(candidates):
        if len(prefixes) == 0:
            break
        parents = torch.arange(len(prefixes)).repeat_interleave(len(tokens))
        extended = torch.cat([prefixes[parents], tokens.repeat(len(prefixes))[:, None]], dim=1)
        chunks = [chunk for chunk in extended.split(1024) if len(chunk)]
        gaps = torch.cat([span.distance(block_inputs(model, chunk, 1)[:, -1]) for chunk in chunks] or [scores[:0]])
        kept = torch.nonzero(gaps < threshold).flatten()
        kept = kept[torch.argsort(gaps[kept])][:max_prefixes]
        ended = set(range(len(prefixes))) - set(parents[kept].tolist())
        finished += [(prefixes[i].tolist(), float(scores[i]) / position) for i in sorted(ended) if position > 0]
        scores = scores[parents[kept]] + gaps[kept]
        prefixes = extended[kept]
    finished += [(row.tolist(), float(score) / prefixes.shape[1]) for row, score in zip(prefixes, scores)]
    return sorted(finished, key=lambda found: found[1])


def passes_anything(
    model: nn.Module, span: Span, block: int, vocab: int, length: int, threshold: float, generator
) -> bool:
    """Whether most inputs of random token sequences lie in the span: it is then the whole space the block's
    inputs live in (the batch held more tokens than the layer is wide), and the check tells nothing."""
    ids = torch.randint(vocab, (16, length), generator=generator)
    inputs = block_inputs(model, ids, block)
    return bool((span.distance(inputs.reshape(-1, inputs.shape[-1])) < threshold).double().mean() > 0.5)


def recover(view: AttackerView, options: DagerOptions, seed: int = 0) -> tuple[torch.Tensor, float]:
    """(num_samples, L) token ids padded with the model's padding id, and the mean block-2 distance."""
    model: Any = copy.deepcopy(view.model).double().eval()  # a TextModel (base(), pad_id)
    model.load_state_dict(
        {name: value.double() if value.is_floating_point() else value for name, value in view.global_state.items()}
    )
    delta = {name: value.double() for name, value in view.parameter_delta().items()}
    global_state = model.state_dict()
    length = view.input_shape[-1]
    noise = options.update_noise if options.update_noise is not None else view.update_noise
    with torch.no_grad():
        spans = [span_of(model, global_state, delta, block, options, noise) for block in (0, 1)]
        vocab = model.base().get_input_embeddings().num_embeddings
        thresholds = (spans[0].threshold(options.layer1_threshold), spans[1].threshold(options.layer2_threshold))
        generator = torch.Generator().manual_seed(seed)
        if any(passes_anything(model, spans[b], b, vocab, length, thresholds[b], generator) for b in (0, 1)):
            found = []
        else:
            candidates = layer1_candidates(model, spans[0], vocab, length, thresholds[0])
            found = decode(model, spans[1], candidates, thresholds[1], options.max_prefixes)[: view.num_samples]
    ids = torch.full((view.num_samples, length), model.pad_id, dtype=torch.int64)
    for row, (tokens, _) in enumerate(found):
        ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.int64)
    objective = sum(score for _, score in found) / len(found) if found else 1.0
    return ids, objective


def attack(views: Sequence[AttackerView], options: DagerOptions, seed: int, device: torch.device) -> list:
    """One reconstruction per view (``seed`` draws the random sequences that test a span; CPU only)."""
    results = []
    for view in views:
        start = time.perf_counter()
        ids, objective = recover(view, options, seed)
        results.append(
            Reconstruction(
                images=torch.zeros(len(ids), 0),
                labels=torch.full((len(ids),), -1, dtype=torch.int64),  # next-token targets are the sequences
                objective=objective,
                restart_objectives=(),
                iterations=0,
                seconds=time.perf_counter() - start,
                tokens=ids,
            )
        )
    return results


ATTACKS.register(
    "dager",
    help="DAGER (Petrov et al. 2024): exact text recovery from the span of a causal transformer's first two "
    "attention updates, decoded greedily token by token; per client or aggregated",
    config=DagerOptions,
)(attack)
