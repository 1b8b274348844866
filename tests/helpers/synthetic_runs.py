"""Run directories written by hand: rows, configs and grids, without running anything."""

import numpy as np
from PIL import Image

from fedsim.config import parse_config
from fedsim.rundir.layout import grid_file
from fedsim.rundir.writer import RunStore


def _synthetic_run(root, name, *, defenses=(), epsilons=None, ssim=0.9, accuracy=0.8, seed=0):
    config = parse_config({"name": name, "seed": seed, "client": {"defenses": list(defenses)}})
    store = RunStore.create(config, "cpu", root / name)
    for r in (0, 1, 2):
        store.append({"round": r, "event": "eval", "loss": 2.0 - r * 0.5, "accuracy": accuracy * r / 2})
        if r:
            for client in (0, 1):
                fit = {"round": r, "event": "fit", "client": client, "status": "ok", "train_loss": 1.0 / r}
                if epsilons:
                    fit["defense.dpsgd.epsilon"] = epsilons[client] * r
                store.append(fit)
    for target, psnr, exact in (("client:0", None, 1), ("client:1", 20.0, 0), ("aggregate", 10.0, 0)):
        store.append(
            {
                "round": 1,
                "event": "attack",
                "tap": "mitm",
                "target": target,
                "attack": "dlg",
                "status": "ok",
                "batch_size": 1,
                "psnr_mean": psnr,
                "psnr_exact": exact,
                "ssim_mean": ssim if target != "aggregate" else ssim / 2,
                "lpips_mean": None,
                "label_accuracy": 1.0,
            }
        )
    store.append(
        {
            "round": 2,
            "event": "attack",
            "tap": "mitm",
            "target": "client:0",
            "attack": "dlg",
            "status": "failed",
            "error": "RuntimeError: boom",
        }
    )
    grid = store.run_dir / "reconstructions"
    grid.mkdir()
    Image.fromarray(np.full((8, 16, 3), 128, dtype=np.uint8)).save(grid / grid_file(1, "client:0", "dlg"))
    store.write_json("summary.json", {"rounds_completed": 2})
    return store.run_dir
