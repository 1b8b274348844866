"""Attack throughput on paper 003's set-up: targets per hour batched against one at a time, and per iteration.

Paper 003's set-up (DLG's LeNet with its uniform init, one SGD step at lr 0.1 on one CIFAR-10 training image per
client, the attacker boxed to [0, 1] as a run boxes it): ``--targets`` one-image clients (training images 2000
onwards, no ground truth involved) attacked by ``--attack`` at ``--iterations``, one restart,

* batched: every target in one call, one vmapped problem (``run_attack`` batches compatible views);
* one at a time: one call per target.

Both on the CPU with one torch thread, timed in CPU seconds of this process (``time.process_time``: what other jobs
on shared cores take is not counted); targets per hour = 3600 / CPU seconds per target. With CUDA present, a GPU
column times the same calls in wall-clock seconds (synchronised).

Per iteration: the same attack on one image and on a batch of 8 (one target of 8 images is another problem: the
first 8 targets' images in one client's step), CPU milliseconds per iteration. Where breaching is installed (it is
not a fedsim dependency) and the attack is ``ig``, against breaching's Inverting Gradients on the same problem
(``bench.breaching_driver``: the same model; the client's update, given to breaching as the gradient it equals,
(w_t - w_{t+1}) / lr; the labels fedsim recovers from it; fedsim's start image; cosine matching plus fedsim's TV at
``ig``'s weight; the same step size, decay and box [0, 1]), ``--pairs`` alternated calls of each (fedsim,
breaching, fedsim, ...), the median of each and their ratio fedsim/breaching; both objectives at the common start
(equal when the problems are the same) and both PSNRs after ``--iterations`` (scored here, outside the attacks).
Without breaching, fedsim's time alone and one line saying that the ratio was not measured.
Ratios are of numbers from this one run.

    .venv/bin/python -m bench.throughput [--data-dir DIR] [--targets 32] [--attack ig] [--iterations 200] [--pairs 5]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from bench.common import CIFAR, add_data_dir, data_file
from bench.strongest import paper003_views
from fedsim.config import AttackOptions

FIRST_IMAGE = 2000  # training images no attack was tuned on


def load(data: Path, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    arrays = np.load(data)
    images = list(range(FIRST_IMAGE, FIRST_IMAGE + count))
    x = torch.from_numpy(arrays["x_train"][images].astype(np.float32) / 255.0)
    return x, torch.from_numpy(arrays["y_train"][images].astype(np.int64))


def timed(call: Callable[[], object], device: torch.device) -> float:
    """Seconds ``call`` took: CPU seconds of this process on the CPU, synchronised wall-clock seconds on CUDA."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        started = time.perf_counter()
        call()
        torch.cuda.synchronize(device)
        return time.perf_counter() - started
    started = time.process_time()
    call()
    return time.process_time() - started


def batched_against_one_at_a_time(views: list, options: AttackOptions, device: torch.device) -> dict:
    """Seconds per target with every target in one call, and with one call per target."""
    from adversary.inversion import run_attack

    run_attack(options.model_copy(update={"iterations": 2}), views[:2], 0, device)  # warm-up: first-call costs
    batched = timed(lambda: run_attack(options, views, 0, device), device)
    alone = sum(timed(lambda view=view: run_attack(options, [view], 0, device), device) for view in views)
    per_target = batched / len(views), alone / len(views)
    return {
        "batched_s_per_target": per_target[0],
        "one_at_a_time_s_per_target": per_target[1],
        "batched_targets_per_hour": 3600 / per_target[0],
        "one_at_a_time_targets_per_hour": 3600 / per_target[1],
        "speed_up": per_target[1] / per_target[0],
    }


def per_iteration(x: torch.Tensor, y: torch.Tensor, options: AttackOptions, batch: int) -> float:
    """fedsim's CPU seconds per iteration of ``options`` on one target of ``batch`` images (one client's step)."""
    from adversary.inversion import run_attack

    view = one_client(x[:batch], y[:batch])
    seconds = timed(lambda: run_attack(options, [view], 0, torch.device("cpu")), torch.device("cpu"))
    return seconds / int(options.iterations)


def one_client(x: torch.Tensor, y: torch.Tensor):
    """One client that takes paper 003's SGD step on all of ``x`` at once (a target of len(x) images)."""
    import dataclasses

    from adversary.view import LocalTraining

    (view,) = paper003_views(x[:1], y[:1])  # the model, its start and the box; the step is redone on all images
    model = view.model
    loss = torch.nn.functional.cross_entropy(model(x), y)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    params = dict(model.named_parameters())
    lr = view.local_training.lr
    observed = {
        key: (value - lr * grads[list(params).index(key)]).detach() if key in params else value.clone()
        for key, value in view.global_state.items()
    }
    return dataclasses.replace(
        view,
        observed_state=observed,
        num_samples=len(x),
        local_training=LocalTraining(lr=lr, local_steps=1, batch_size=len(x)),
    )


def per_iteration_rows(x: torch.Tensor, y: torch.Tensor, options: AttackOptions, pairs: int) -> dict:
    """Per iteration on one image and on a batch of 8: against breaching where it is installed, fedsim alone else."""
    from bench import breaching_driver

    against = breaching_driver.available() and options.name == "ig"
    rows: dict = {}
    for batch in (1, 8):
        if not against:
            seconds = per_iteration(x, y, options, batch)
            rows[batch] = {"fedsim_ms": 1000 * seconds}
            print(f"   per iteration, one target of {batch} image(s): fedsim {1000 * seconds:.2f} ms CPU", flush=True)
            continue
        row = rows[batch] = breaching_driver.compare(one_client(x[:batch], y[:batch]), x[:batch], options, pairs)
        print(
            f"   per iteration, one target of {batch} image(s), median of {pairs} alternated pairs: fedsim "
            f"{row['fedsim_ms']:.2f} ms CPU, breaching {row['breaching_ms']:.2f} ms: **{row['ratio']:.2f}x** "
            f"(fedsim/breaching); objective at the common start {row['fedsim_start_objective']:.6g} vs "
            f"{row['breaching_start_objective']:.6g} ({'same' if breaching_driver.same_start(row) else 'DIFFERENT'}), "
            f"lowest {row['fedsim_best_objective']:.4g} vs {row['breaching_best_objective']:.4g}; mean PSNR after "
            f"{row['iterations']} iterations {row['fedsim_psnr']:.2f} vs {row['breaching_psnr']:.2f} dB",
            flush=True,
        )
    if not breaching_driver.available():
        print("   breaching is not installed here: the per-iteration ratio against it was not measured")
    elif not against:
        print(f"   breaching's Inverting Gradients is compared with fedsim's ig only, not {options.label}: no ratio")
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_dir(parser)
    parser.add_argument("--targets", type=int, default=32)
    parser.add_argument("--attack", default="ig")
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--pairs", type=int, default=5, help="alternated fedsim/breaching calls per iteration row")
    parser.add_argument("--skip-cpu", action="store_true", help="the GPU column only (where CUDA is present)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    x, y = load(data_file(args.data_dir, CIFAR), args.targets)
    views = paper003_views(x, y)
    options = AttackOptions(name=args.attack, iterations=args.iterations)
    print(
        f"paper 003 set-up, {args.targets} one-image targets (CIFAR-10 training images {FIRST_IMAGE}-"
        f"{FIRST_IMAGE + args.targets - 1}), {options.label} at {args.iterations} iterations x 1 restart, boxed"
    )
    result: dict = {"targets": args.targets, "attack": options.label, "iterations": args.iterations}
    columns = ([] if args.skip_cpu else [torch.device("cpu")]) + (
        [torch.device("cuda")] if torch.cuda.is_available() else []
    )
    for device in columns:
        row = result[device.type] = batched_against_one_at_a_time(views, options, device)
        unit = "CPU s" if device.type == "cpu" else "GPU wall s"
        print(
            f"   {device.type}: batched {row['batched_s_per_target']:.3f} {unit}/target "
            f"({row['batched_targets_per_hour']:.0f} targets/hour), one at a time "
            f"{row['one_at_a_time_s_per_target']:.3f} ({row['one_at_a_time_targets_per_hour']:.0f} targets/hour): "
            f"batched {row['speed_up']:.2f}x",
            flush=True,
        )
    if not torch.cuda.is_available():
        print("   gpu: no CUDA device here, not measured")
    if not args.skip_cpu:
        result["per_iteration"] = per_iteration_rows(x, y, options, args.pairs)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
