"""A malicious server (Robbing the Fed's imprint, ``rtf``) against aggregation, SecAgg+ and the client defenses.

The set-up of ``configs/malicious-server.yaml``: DLG's tanh LeNet behind a 128-bin brightness imprint block
calibrated on CIFAR-10 test images 0-255 (the server's public data), clients taking one SGD step (lr 0.1) on
their batch. Each client's update is computed exactly as a client computes it (its defenses applied to the
pseudo-gradient by fedsim's own defense code), then aggregated as the server receives it: FedAvg's weighted
mean, or SecAgg+'s sum of stochastically quantised weighted weights (Flower's own ``quantize`` /
``dequantize``) divided by the total weight, with the default settings (clipping range 8, 2^22 levels) or
those a malicious server may choose (range 1, 2^28 levels). The images are
CIFAR-10 training images from index 1,000 on, a fresh draw per repetition; nothing was tuned on them (the
block's settings are the defaults, chosen before any measurement). ``configs/malicious-server.yaml`` runs
one of these cases through fedsim's real Flower SecAgg+ federation.

Parts: ``scale`` (2 to 64 clients x 1 to 8 images, FedAvg and SecAgg+: fraction of images recovered at 40 dB
or better, mean capped PSNR and SSIM over all images, 95 % t-intervals over repetitions, and the rtf read-out
time per round), ``defenses`` (8 clients x 4 images under SecAgg+ with each update-level defense). Last line:
JSON.

    .venv/bin/python -m bench.malicious [--data-dir DIR] [--repeats 3] [--part scale|defenses|all]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from flwr.common.secure_aggregation.quantization import dequantize, quantize

from adversary.attacks.rtf import attack as rtf
from adversary.inversion.options import AttackOptions
from adversary.modifications import MODIFICATIONS
from adversary.modifications.base import PublicData
from adversary.scoring import score_reconstruction
from adversary.view import AttackerView, LocalTraining
from bench.common import CIFAR, add_data_dir, data_file, format_interval, interval
from clients.defenses import DEFENSES, DefenseContext
from fedsim.config import parse_config
from fedsim.models import build_model

LR = 0.1
#: SecAgg+ settings: Flower's / fedsim's defaults, and what a malicious server may choose instead (finer levels,
#: a range just wide enough for the model's weights; 2^28 levels x 8 clients still fits the 2^32 modulus)
SECAGG_DEFAULT = (8.0, 2**22)
SECAGG_CHOSEN = (1.0, 2**28)
DEFENSE_CASES = {
    "none": [],
    "clip 0.5 (global)": [{"name": "clip", "max_norm": 0.5}],
    "noise 0.01": [{"name": "noise", "sigma": 0.01}],
    "noise 0.1": [{"name": "noise", "sigma": 0.1}],
    "prune 0.9": [{"name": "prune", "ratio": 0.9}],
    "gradient_dropout p0.6": [{"name": "gradient_dropout", "p": 0.6, "sigma": 0.005}],
}


def imprinted_lenet(public: torch.Tensor) -> torch.nn.Module:
    model = build_model(parse_config({"model": {"name": "lenet", "activation": "tanh"}}).model, 3, 10, 32, seed=0)
    config = MODIFICATIONS.config("imprint")()
    return MODIFICATIONS.get("imprint")(config, model, (3, 32, 32), 10, PublicData(public, "test split 0-255"), seed=0)


def client_weights(model, state, images, labels, defenses, seed) -> dict[str, torch.Tensor]:
    """What one client sends: one SGD step, then its update-level defenses on the pseudo-gradient."""
    model.load_state_dict(state)
    loss = torch.nn.functional.cross_entropy(model(images), labels)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    update = {name: g.detach() for (name, _), g in zip(model.named_parameters(), grads, strict=True)}
    for position, entry in enumerate(parse_config({"client": {"defenses": defenses}}).client.defenses):
        context = DefenseContext(
            model=model, x=images, y=labels, lr=LR, generator=torch.Generator().manual_seed(seed * 100 + position)
        )
        update = DEFENSES.get(entry.name).apply(update, entry, context).update
    return {name: state[name] - LR * update[name] if name in update else state[name] for name in state}


def aggregate(
    sent: list[dict[str, torch.Tensor]], counts: list[int], secure: tuple[float, int] | None, rng_seed: int
) -> dict[str, torch.Tensor]:
    """FedAvg's weighted mean (``secure`` None) or SecAgg+'s with ``secure`` = (clipping range, levels)."""
    names, total = list(sent[0]), sum(counts)
    if secure is None:
        return {name: sum(s[name].double() * (n / total) for s, n in zip(sent, counts)).float() for name in names}
    # SecAgg+ as Flower 1.41 computes it (client: secaggplus_mod, server: SecAggPlusWorkflow's unmask): each
    # client scales its weights by q_k / T, q_k = round(n_k / max_n * T), and quantises them; the masks cancel in
    # the sum; the server dequantises the sum, removes (K - 1) clipping ranges and divides by sum_k q_k / T.
    np.random.seed(rng_seed)  # Flower's stochastic rounding draws from numpy's global generator
    clipping, levels = secure
    top = max(counts)
    ratios = [round(n / top * levels) for n in counts]
    summed = None
    for s, q in zip(sent, ratios):
        arrays = [s[name].double().numpy() * (q / levels) for name in names]
        quantised = [a.astype(np.int64) for a in quantize(arrays, clipping, levels)]
        summed = quantised if summed is None else [a + b for a, b in zip(summed, quantised)]
    values = dequantize(summed, clipping, levels)
    offset = -(len(sent) - 1) * clipping
    return {
        name: torch.from_numpy((v + offset) * levels / sum(ratios)).float().reshape(sent[0][name].shape)
        for name, v in zip(names, values)
    }


def one_case(model, state, x, y, clients, per_client, defenses, secure, seed) -> dict:
    rng = np.random.default_rng(seed)
    pick = 1000 + rng.choice(len(x) - 1000, clients * per_client, replace=False)
    images, labels = torch.from_numpy(x[pick]).float() / 255, torch.from_numpy(y[pick]).long()
    sent = [
        client_weights(
            model,
            state,
            images[c * per_client : (c + 1) * per_client],
            labels[c * per_client : (c + 1) * per_client],
            defenses,
            seed + c,
        )
        for c in range(clients)
    ]
    observed = aggregate(sent, [per_client] * clients, secure, seed)
    view = AttackerView(
        round=1,
        tap="server",
        target="aggregate",
        model=model,
        global_state=state,
        observed_state=observed,
        input_shape=(3, 32, 32),
        num_classes=10,
        num_samples=clients * per_client,
        local_training=LocalTraining(LR, 1, per_client),
    )
    started = time.perf_counter()
    (reconstruction,) = rtf([view], AttackOptions(name="rtf"), seed=0, device=torch.device("cpu"))
    seconds = time.perf_counter() - started
    score = score_reconstruction(reconstruction, images, labels, lambda t: t)
    return {
        "recovered": score.recovered_40db / len(images),
        "psnr": score.psnr_mean,
        "ssim": score.ssim_mean,
        "seconds": seconds,
    }


def shown(values: list[float]) -> str:
    """A column of the tables: mean ± 95 % t-interval half-width over the repetitions, 3 decimals."""
    return format_interval(interval(values), 3)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_dir(parser)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--part", choices=("scale", "defenses", "all"), default="all")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = np.load(data_file(args.data_dir, CIFAR))
    public = torch.from_numpy(data["x_test"][:256]).float() / 255
    model = imprinted_lenet(public)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    out: dict[str, dict] = {}
    if args.part in ("scale", "all"):
        print(
            "clients x images | aggregation | recovered (>= 40 dB) | PSNR (dB, capped) | SSIM | rtf seconds", flush=True
        )
        for clients in (2, 8, 32, 64):
            for per_client in (1, 4, 8):
                for name, secure in (("FedAvg", None), ("SecAgg+", SECAGG_DEFAULT)):
                    runs = [
                        one_case(model, state, data["x_train"], data["y_train"], clients, per_client, [], secure, seed)
                        for seed in range(args.repeats)
                    ]
                    key = f"{clients}x{per_client} {name}"
                    out[key] = {m: [r[m] for r in runs] for m in ("recovered", "psnr", "ssim", "seconds")}
                    print(
                        f"{clients:>3} x {per_client} | {name:<7} | {shown(out[key]['recovered'])} | "
                        f"{shown(out[key]['psnr'])} | {shown(out[key]['ssim'])} | {max(out[key]['seconds']):.3f}",
                        flush=True,
                    )
    if args.part in ("defenses", "all"):
        print(
            "defense (8 clients x 4 images) | aggregation | recovered (>= 40 dB) | PSNR (dB, capped) | SSIM", flush=True
        )
        for label, defenses in DEFENSE_CASES.items():
            for name, secure in (
                ("FedAvg", None),
                ("SecAgg+ defaults (8, 2^22)", SECAGG_DEFAULT),
                ("SecAgg+ server's choice (1, 2^28)", SECAGG_CHOSEN),
            ):
                runs = [
                    one_case(model, state, data["x_train"], data["y_train"], 8, 4, defenses, secure, seed)
                    for seed in range(args.repeats)
                ]
                out[f"defense {label} {name}"] = {m: [r[m] for r in runs] for m in ("recovered", "psnr", "ssim")}
                print(
                    f"{label:<22} | {name:<33} | {shown([r['recovered'] for r in runs])} | "
                    f"{shown([r['psnr'] for r in runs])} | {shown([r['ssim'] for r in runs])}",
                    flush=True,
                )
    print(json.dumps({k: {m: float(np.mean(v)) for m, v in d.items()} for k, d in out.items()}))


if __name__ == "__main__":
    main()
