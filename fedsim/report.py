"""`fedsim report RUN_DIR`: utility over rounds as a PNG, the run's defenses, and a per-round table
(Markdown and CSV) with the privacy spent (epsilon) where a DP mechanism is on."""

from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # reports are written headless, from the CLI or CI
import matplotlib.pyplot as plt  # noqa: E402

from fedsim.config import ExperimentConfig, load_config  # noqa: E402
from fedsim.results import CONFIG_FILE, RunStore  # noqa: E402


class ReportError(ValueError):
    """The folder cannot be reported on (not a run, or nothing evaluated yet)."""


TABLE_COLUMNS = (
    "round", "loss", "accuracy", "precision", "recall", "specificity", "f1", "mcc", "clients_ok", "clients_failed",
    "epsilon",
)


def round_epsilon(rows: list[dict[str, object]], server_round: int) -> float | str:
    """Privacy spent by the end of a round: the largest client epsilon (dpsgd) or the aggregate's (strategy.dp)."""
    spent = [
        float(value)  # type: ignore[arg-type]
        for row in rows
        if row.get("round") == server_round
        for key, value in row.items()
        if key == "dp_epsilon" or (row.get("event") == "fit" and key.endswith(".epsilon"))
        if value is not None
    ]
    return max(spent) if spent else ""


def round_table(store: RunStore) -> list[dict[str, object]]:
    rows = store.rows()
    return [
        {c: row.get(c, "") for c in TABLE_COLUMNS} | {"epsilon": round_epsilon(rows, row["round"])}
        for row in rows
        if row["event"] == "eval"
    ]


def defense_lines(config: ExperimentConfig) -> list[str]:
    """The run's defenses as Markdown bullets, the configuration-level ones (local steps, dropout) included."""
    client = config.client
    lines = [
        f"- `{defense.name}`: " + ", ".join(f"{key}={value}" for key, value in defense.model_dump(exclude={"name"}).items())
        for defense in client.defenses
    ] or ["- no client defense"]
    steps = f"{client.local_steps} step(s)" if client.local_steps is not None else f"{client.local_epochs} epoch(s)"
    lines.append(f"- local training: {steps} per round (lr {client.lr}, batch {client.batch_size}, {client.optimizer})")
    lines.append(f"- model dropout: {config.model.dropout}")
    if config.strategy.dp is not None:
        lines.append("- central DP (`strategy.dp`): " + ", ".join(f"{k}={v}" for k, v in config.strategy.dp.model_dump().items()))
    return lines


def plot_utility(table: list[dict[str, object]], title: str, path: Path) -> None:
    rounds = [row["round"] for row in table]
    fig, acc_axis = plt.subplots(figsize=(6, 3.6), dpi=120)
    acc_axis.plot(rounds, [row["accuracy"] for row in table], marker="o", color="tab:blue", label="test accuracy")
    acc_axis.set_xlabel("round")
    acc_axis.set_ylabel("test accuracy", color="tab:blue")
    acc_axis.set_ylim(0, 1)
    loss_axis = acc_axis.twinx()
    loss_axis.plot(rounds, [row["loss"] for row in table], marker="s", color="tab:red", label="test loss")
    loss_axis.set_ylabel("test loss", color="tab:red")
    acc_axis.set_title(title)
    acc_axis.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _markdown(table: list[dict[str, object]]) -> str:
    def cell(value: object) -> str:
        return f"{value:.4f}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(TABLE_COLUMNS) + " |", "|" + "---|" * len(TABLE_COLUMNS)]
    lines += ["| " + " | ".join(cell(row[c]) for c in TABLE_COLUMNS) + " |" for row in table]
    return "\n".join(lines) + "\n"


def write_report(run_dir: Path) -> list[Path]:
    store = RunStore(Path(run_dir))
    if not store.metrics_path.is_file():
        raise ReportError(f"report: '{run_dir}' is not a fedsim run directory (no metrics.jsonl)")
    table = round_table(store)
    if not table:
        raise ReportError(f"report: '{run_dir}' has no evaluated round yet")
    out = store.run_dir / "report"
    out.mkdir(exist_ok=True)
    png, md, csv_path = out / "utility.png", out / "summary.md", out / "rounds.csv"
    plot_utility(table, store.run_dir.name, png)
    with open(csv_path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=TABLE_COLUMNS)
        writer.writeheader()
        writer.writerows(table)
    defenses = "\n".join(defense_lines(load_config(store.run_dir / CONFIG_FILE)))
    md.write_text(
        f"# {store.run_dir.name}\n\n![utility over rounds](utility.png)\n\n## Defenses\n\n{defenses}\n\n"
        f"## Rounds\n\n{_markdown(table)}"
    )
    return [png, md, csv_path]
