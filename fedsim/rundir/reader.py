"""The run directory's reader: runs and sweeps as pandas DataFrames, for notebooks and reports.

``fedsim.load_run(path)`` (and ``fedsim.load_sweep(path)``, ``fedsim.rundir.sweep_reader``):

    run = fedsim.load_run("runs/quickstart-20261122-101500")
    run.config.client.lr                        # the resolved ExperimentConfig
    run.metrics.query("event == 'eval'")        # one row per metrics.jsonl line, columns as recorded
    run.verdicts()                              # each target: the attacker's pick, p-value, verdict; the oracle
    run.images()                                # one row per reconstructed image: round, client, psnr, ssim, ...
    run.privacy()                               # epsilon_example and epsilon_client spent by each round

    sweep = fedsim.load_sweep("runs/defense-frontier-sweep-20261123-101500")
    sweep.points                                # one row per point: run, status, the value label of every grid key
    sweep.metrics                               # every run's rows, with `run` and the grid keys as columns

Reports are built on the same loaders, so a figure and a notebook read the same numbers. What a run wrote is
``fedsim.rundir.writer``'s, where it lies ``fedsim.rundir.layout``'s.

Importing this module is light (``fedsim`` exposes ``Run`` and ``load_run`` from it, and the command line
imports ``fedsim``): pandas, the config and the writer are imported when a run is loaded, not before.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedsim.rundir.layout import CONFIG_FILE, ENVIRONMENT_FILE, METRICS_FILE, SUMMARY_FILE
from fedsim.rundir.privacy import PRIVACY_COLUMNS, privacy_by_round

if TYPE_CHECKING:
    import pandas as pd

    from fedsim.config import ExperimentConfig

#: columns of ``Run.strongest``: how its pick was made, and over how many attacks
SELECTION = "selection"
SELECTED_OVER = "selected_over"


def ground_truth_selection(attacks: int | str) -> str:
    """The label of a best-over-attacks figure: picked by a score against the ground truth (an oracle).

    Parameters
    ----------
    attacks
        How many attacks the pick compared, or a range such as ``"2-4"`` over several picks.

    Returns
    -------
    str
        ``"ground-truth selection over N attacks"``.
    """
    return f"ground-truth selection over {attacks} attack{'' if attacks == 1 else 's'}"


@dataclass(frozen=True)
class Run:
    """One run directory: its config, metrics (one row per event) and, once finished, its summary
    (``summary.json``: final scores, failures, ``epsilon_example`` and ``epsilon_client``, leakage).

    Attributes
    ----------
    path
        The run directory.
    config
        The run's validated config (``config.yaml``).
    metrics
        One row per line of ``metrics.jsonl`` (``event``, ``round``, then the event's fields).
    summary
        ``summary.json`` once the run finished; None before.
    environment
        ``environment.json``: versions, device, the command that started the run; None where absent.
    labels
        Grid key -> value label, for a point of a sweep (empty otherwise).

    Examples
    --------
    >>> run = fedsim.load_run("runs/demo-20261125-171437")   # or fedsim.run(...)   # doctest: +SKIP
    >>> run.config.federation.rounds, run.events("eval")["accuracy"].iloc[-1]      # doctest: +SKIP
    (20, 0.736)
    >>> run.images().query("verdict == 'leaks'").groupby("client")["psnr"].median()  # doctest: +SKIP
    """

    path: Path
    config: ExperimentConfig
    metrics: pd.DataFrame
    summary: dict[str, Any] | None
    environment: dict[str, Any] | None
    labels: dict[str, str] = field(default_factory=dict)  # grid key -> value label, for a point of a sweep

    @property
    def name(self) -> str:
        return self.path.name

    def strongest(self, metric: str = "ssim_mean", per: str = "target") -> pd.DataFrame:
        """The strongest attack result, over the attacks, their restarts (a row holds an attack's best restart,
        picked by its own objective) and the attacked rounds: one row per target (``per="target"``), per round
        and target (``"round"``), or the one of the whole run (``"run"``), with the attack that achieved it.

        Targets are ``client:<id>`` or ``aggregate``. The pick is an oracle: it ranks the attacks by ``metric``,
        scored against the ground truth that no attacker sees. Every row says so: ``selection`` reads
        "ground-truth selection over N attacks" and ``selected_over`` is N, the attacks with a result on that
        target (round, run) the pick compared. Each attack's own figure is its row in ``events("attack")``.

        Parameters
        ----------
        metric
            A per-target column of the attack rows; higher is stronger except for ``mse_mean`` and
            ``lpips_mean``.
        per
            ``"target"``, ``"round"`` (per round and target) or ``"run"``.

        Returns
        -------
        pandas.DataFrame
            ``round``, ``target``, ``attack``, ``metric``, ``selection``, ``selected_over``, then the row's other
            columns.

        Raises
        ------
        ValueError
            ``per`` is none of the above.
        """
        import pandas as pd

        groups = {"target": ["target"], "round": ["round", "target"], "run": []}
        if per not in groups:
            raise ValueError(f"per = {per!r}; allowed: {', '.join(groups)}")
        attacks = self.events("attack")
        if attacks.empty or metric not in attacks:
            return pd.DataFrame(columns=["round", "target", "attack", metric, SELECTION, SELECTED_OVER])
        ok = attacks[(attacks.get("status", "ok") == "ok") & attacks[metric].notna()]
        ok = ok.sort_values(metric, ascending=metric in ("mse_mean", "lpips_mean"), kind="stable")
        best = ok.drop_duplicates(subset=groups[per]) if groups[per] else ok.head(1)
        # the pick compares the attacks' scores against the ground truth, which no attacker has: say so, and
        # over how many attacks, on every row
        if groups[per]:
            compared = ok.groupby(groups[per])["attack"].nunique().rename(SELECTED_OVER)
            best = best.join(compared, on=groups[per])
        else:
            best = best.assign(**{SELECTED_OVER: ok["attack"].nunique()})
        best = best.assign(**{SELECTION: [ground_truth_selection(int(n)) for n in best[SELECTED_OVER]]})
        first = ["round", "target", "attack", metric, SELECTION, SELECTED_OVER]
        return (
            best[first + [c for c in best.columns if c not in first]]
            .sort_values(groups[per] or ["round"])
            .reset_index(drop=True)
        )

    def attacker_pick(self, per: str = "target") -> pd.DataFrame:
        """The result the attacker itself would report, ranked as the attacker ranks (``adversary.ranking``): results
        of attacks built for a defense in force first, then the lowest ``gradient_match`` (1 - cosine between the
        update its reconstruction would produce and the observed one), a yardstick computed from what the attacker sees,
        never from the ground truth. Only results that carry the yardstick compete (the optimisation attacks of
        an ``attacks: strongest`` portfolio); its scores (``ssim_mean``, ``psnr``, ...) are read as any row's,
        and ``saturation`` says whether the pick's budget saturated.

        Parameters
        ----------
        per
            ``"target"`` (one row per target) or ``"round"`` (per round and target).

        Returns
        -------
        pandas.DataFrame
            ``round``, ``target``, ``attack``, ``gradient_match``, then the row's other columns; empty where no
            row carries the yardstick.

        Raises
        ------
        ValueError
            ``per`` is neither.
        """
        import pandas as pd

        groups = {"target": ["target"], "round": ["round", "target"]}
        if per not in groups:
            raise ValueError(f"per = {per!r}; allowed: {', '.join(groups)}")
        attacks = self.events("attack")
        if attacks.empty or "gradient_match" not in attacks:
            return pd.DataFrame(columns=["round", "target", "attack", "gradient_match"])
        ok = attacks[(attacks.get("status", "ok") == "ok") & attacks["gradient_match"].notna()]
        from adversary.ranking import row_rank

        ranks = [row_rank(row) for row in ok.to_dict("records")]
        order = sorted(range(len(ok)), key=lambda i: ranks[i])  # stable: ties keep the rows' order
        best = ok.iloc[order].drop_duplicates(subset=groups[per])
        first = ["round", "target", "attack", "gradient_match"]
        return best[first + [c for c in best.columns if c not in first]].sort_values(groups[per]).reset_index(drop=True)

    def verdicts(self) -> pd.DataFrame:
        """One row per attacked round and target: the verdict of the result the attacker itself would report, and
        the oracle beside it (``fedsim.judge.verdict``).

        ``attack``, ``ssim_mean``, ``floor_ssim`` (the SSIM above which a score beats guesses made without the
        update at the test's level, ``fedsim.judge.floor``), ``floor_source`` (the guess family setting it),
        ``p_value`` and ``verdict`` (``leaks`` when the p-value is at most the level, else ``at floor``) are the
        attacker's pick's over ``selected_over`` results (``adversary.ranking``: attacks built for a defense in
        force first, then the lowest gradient match) (``selection`` says how it was
        picked). ``oracle_attack``, ``oracle_ssim``, ``oracle_floor_ssim``, ``oracle_p_value`` and
        ``oracle_verdict`` are the best result by SSIM against the ground truth, tested against the best of as many
        guesses: an upper bound, which decides no verdict. Rows written before calibrated verdicts read as
        ``unknown``: their floor was no test.

        Examples
        --------
        >>> run = fedsim.load_run("runs/demo-20261125-171437")  # doctest: +SKIP
        >>> run.verdicts().groupby("round")["verdict"].value_counts()  # doctest: +SKIP
        """
        import pandas as pd

        from fedsim.judge.floor import UNKNOWN
        from fedsim.judge.verdict import judge_target

        columns = [
            "round",
            "target",
            "attack",
            "ssim_mean",
            "floor_ssim",
            "floor_source",
            "p_value",
            "verdict",
            "selection",
            "selected_over",
            "oracle_attack",
            "oracle_ssim",
            "oracle_floor_ssim",
            "oracle_p_value",
            "oracle_verdict",
        ]
        attacks = self.events("attack")
        if attacks.empty or "target" not in attacks:
            return pd.DataFrame(columns=columns)
        rows = []
        for (server_round, target), group in attacks.groupby(["round", "target"], sort=True):
            records = group.to_dict("records")
            judged = judge_target(records)
            if judged is not None:
                fields = judged.to_row()
                fields["floor_source"] = judged.pick.get("floor_source")
                rows.append({"round": server_round, "target": target, **fields})
            elif ok := [row for row in records if row.get("status", "ok") in ("ok", None) or pd.isna(row["status"])]:
                # an older row without the scores a verdict reads: listed, with no number and an unknown verdict
                rows.append({"round": server_round, "target": target, "attack": ok[0]["attack"], "verdict": UNKNOWN})
        return pd.DataFrame(rows, columns=columns)

    def images(self) -> pd.DataFrame:
        """One row per reconstructed image of every scored attack result: ``round``, ``target``, ``client``
        (the attacked client's id, pandas' ``Int64``; ``<NA>`` for the aggregate), ``attack``, ``image`` (the
        image's index in the target's batch; ``<NA>`` for a result an older fedsim scored only as a mean, which
        stands as one row), ``psnr`` (dB; an exact copy at the 100 dB cap, ``fedsim.judge.scoring.PSNR_CAP_DB``),
        ``ssim``, ``lpips`` (NaN where not measured) and ``verdict`` (the result's: ``leaks``, ``at floor``, or
        ``unknown`` for rows written before floors). Failed attacks have no image and no row.

        Plain numbers in plain columns, so that pandas does the rest.

        Examples
        --------
        >>> run = fedsim.load_run("runs/demo-20261125-171437")                # doctest: +SKIP
        >>> run.images().groupby(["round", "client"], dropna=False)["ssim"].max()  # doctest: +SKIP
        round  client
        1      0         0.999995
               1         0.999999
               <NA>      0.812043
        """
        import math

        import pandas as pd

        from fedsim.judge.scoring import PSNR_CAP_DB
        from fedsim.judge.verdict import verdict_of

        columns = ["round", "target", "client", "attack", "image", "psnr", "ssim", "lpips", "verdict"]
        attacks = self.events("attack")
        if attacks.empty or "target" not in attacks:
            return _typed_images(pd.DataFrame(columns=columns))
        if "status" in attacks:
            attacks = attacks[attacks["status"] == "ok"]
        rows = []
        for row in attacks.to_dict("records"):
            client = _client_of(str(row["target"]))
            scores = {metric: row.get(metric) for metric in ("psnr", "ssim", "lpips")}
            images = scores["ssim"] if isinstance(scores["ssim"], list) else None
            if images is None:  # an older row: its means stand for one image
                exact = row.get("psnr_exact") or 0
                psnr = row.get("psnr_mean")
                per_image = [
                    (
                        pd.NA,
                        PSNR_CAP_DB if (psnr is None or pd.isna(psnr)) and exact > 0 else psnr,
                        row.get("ssim_mean"),
                        row.get("lpips_mean"),
                    )
                ]
            else:
                count = len(images)
                psnrs = scores["psnr"] if isinstance(scores["psnr"], list) else [None] * count
                lpips = scores["lpips"] if isinstance(scores["lpips"], list) else [math.nan] * count
                order = row.get("truth_index")
                indices = order if isinstance(order, list) and len(order) == count else list(range(count))
                # a None PSNR is an exact copy, as rows store it
                per_image = [
                    (index, PSNR_CAP_DB if psnr is None else psnr, ssim, lp)
                    for index, psnr, ssim, lp in zip(indices, psnrs, images, lpips, strict=True)
                ]
            for index, psnr, ssim, lp in per_image:
                rows.append(
                    {
                        "round": row["round"],
                        "target": row["target"],
                        "client": client,
                        "attack": row["attack"],
                        "image": index,
                        "psnr": psnr,
                        "ssim": ssim,
                        "lpips": lp,
                        "verdict": verdict_of(row),
                    }
                )
        return _typed_images(pd.DataFrame(rows, columns=columns))

    def privacy(self) -> pd.DataFrame:
        """The privacy spent by the end of each round that reported some: ``round``, ``epsilon_example`` and
        ``delta_example`` (DP-SGD: add/remove one sample of a client, the largest client's), ``epsilon_client``
        and ``delta_client`` (``strategy.dp``: add/remove one client); NaN where a mechanism is not in force,
        no rows for a run without DP. The rule is ``fedsim.rundir.privacy``'s, the same as ``summary.json``'s.

        Examples
        --------
        >>> run = fedsim.load_run("runs/dpsgd-20261122-101500")  # doctest: +SKIP
        >>> run.privacy()["epsilon_example"].iloc[-1]             # doctest: +SKIP
        7.98
        """
        import pandas as pd

        columns = ["round", *PRIVACY_COLUMNS]
        spent = privacy_by_round(self.metrics.to_dict("records")) if not self.metrics.empty else {}
        table = pd.DataFrame([{"round": server_round, **values} for server_round, values in spent.items()])
        return table.reindex(columns=columns).astype({"round": int, **dict.fromkeys(PRIVACY_COLUMNS, float)})

    def events(self, event: str) -> pd.DataFrame:
        """The rows of one event, without all-empty columns.

        Parameters
        ----------
        event
            ``eval``, ``fit``, ``client_eval``, ``attack`` (or any other event a run wrote).

        Returns
        -------
        pandas.DataFrame
            Those rows of ``metrics``, renumbered from 0.
        """
        if "event" not in self.metrics:
            return self.metrics
        return self.metrics[self.metrics["event"] == event].dropna(axis="columns", how="all").reset_index(drop=True)


def _client_of(target: str) -> int | None:
    """``client:3`` -> 3; None for the aggregate (and any target that names no client)."""
    match = re.fullmatch(r"client:(\d+)", target)
    return int(match.group(1)) if match else None


def _typed_images(table: pd.DataFrame) -> pd.DataFrame:
    """Run.images' column types: integer ids (``Int64``, ``<NA>`` where none) and float scores."""
    return table.astype(
        {
            "round": "int64",
            "client": "Int64",
            "image": "Int64",
            "psnr": "float64",
            "ssim": "float64",
            "lpips": "float64",
        }
    )


def is_run_dir(path: Path) -> bool:
    return (Path(path) / METRICS_FILE).is_file() and (Path(path) / CONFIG_FILE).is_file()


def load_run(path: str | Path, labels: dict[str, str] | None = None) -> Run:
    """Load a run directory.

    ``metrics`` holds one row per line of ``metrics.jsonl``; its ``client`` column is pandas' ``Int64``
    (integers, ``<NA>`` on rows of no client), not floats.

    Parameters
    ----------
    path
        The run directory (``output.dir/<name>-<timestamp>``).
    labels
        Grid key -> value label, when the run is a point of a sweep.

    Returns
    -------
    Run
        The run, read now (a run still going is read as far as it got).

    Raises
    ------
    FileNotFoundError
        ``path`` is no run directory (one line).

    Examples
    --------
    >>> run = fedsim.load_run("runs/demo-20261125-171437")    # doctest: +SKIP
    >>> run.events("eval")[["round", "accuracy"]].tail(1)     # doctest: +SKIP
        round  accuracy
    20     20     0.736
    """
    import pandas as pd

    from fedsim.config import load_config
    from fedsim.rundir.writer import RunStore

    path = Path(path)
    if not is_run_dir(path):
        raise FileNotFoundError(f"'{path}' is not a fedsim run directory (no {METRICS_FILE} and {CONFIG_FILE})")
    rows = RunStore(path).rows()
    metrics = pd.DataFrame.from_records(rows)
    if not metrics.empty:
        metrics = metrics[["event", "round"] + [c for c in metrics.columns if c not in ("event", "round")]]
    if "client" in metrics:  # NaN on the server's rows made it float: client ids are integers
        with contextlib.suppress(TypeError, ValueError):  # a row naming its client otherwise: kept as recorded
            metrics["client"] = metrics["client"].astype("Int64")
    return Run(
        path=path,
        config=load_config(path / CONFIG_FILE),
        metrics=metrics,
        summary=_read_json(path / SUMMARY_FILE),
        environment=_read_json(path / ENVIRONMENT_FILE),
        labels=dict(labels or {}),
    )


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
