"""The privacy a run spent, read from its metrics rows: two epsilons that answer different questions.

* ``epsilon_example`` (with ``delta_example``): example-level DP of a client's training, DP-SGD's guarantee
  (``client.defenses[dpsgd]``): adjacent datasets differ by adding or removing one sample of one client. Each
  client reports its cumulative epsilon in its ``fit`` rows (``defense.<name>.epsilon``, beside its
  ``.delta``); the run's figure is the largest client's, the worst case over the clients. A client that sits a
  round out keeps what it spent, so the figure by the end of a round is the largest reported up to it.
* ``epsilon_client`` (with ``delta_client``): client-level DP of the released global models, central DP's
  guarantee (``strategy.dp``): adjacent federations differ by adding or removing one whole client. The server
  reports it in the round's ``eval`` row (``dp_epsilon``, ``dp_delta``).

They are never merged into one number: one sample and one client are different neighbours, and a figure
that takes the larger of the two says neither. An ``epsilon_if_poisson`` (DP-SGD without Poisson batches,
which the accountants do not cover) is not a guarantee and is not read here.

One rule for every reader: ``summary.json`` (fedsim.engine.lifecycle.summary), ``Run.privacy()`` and the
reports' tables and figures.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

EPSILON_EXAMPLE = "epsilon_example"
DELTA_EXAMPLE = "delta_example"
EPSILON_CLIENT = "epsilon_client"
DELTA_CLIENT = "delta_client"
#: the four quantities, in the order tables show them
PRIVACY_COLUMNS = (EPSILON_EXAMPLE, DELTA_EXAMPLE, EPSILON_CLIENT, DELTA_CLIENT)

#: what each epsilon protects, in words for captions and the console
ADJACENCY = {
    EPSILON_EXAMPLE: "example-level: add/remove one sample of a client (DP-SGD)",
    EPSILON_CLIENT: "client-level: add/remove one client (strategy.dp)",
}

#: a defense's record key of its spent epsilon in ``fit`` rows (``defense.dpsgd.epsilon``)
DEFENSE_EPSILON_SUFFIX = ".epsilon"
CENTRAL_EPSILON, CENTRAL_DELTA = "dp_epsilon", "dp_delta"


def _number(value: Any) -> float | None:
    """A recorded value as a float; None where absent or NaN (a DataFrame's empty cell). Infinity stays: it is
    the epsilon of a release without noise."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def privacy_by_round(rows: Iterable[Mapping[str, Any]]) -> dict[int, dict[str, float | None]]:
    """Per round that reported any epsilon: ``epsilon_example``, ``delta_example``, ``epsilon_client`` and
    ``delta_client`` spent by the end of that round (None for a mechanism that is not in force), in round order.

    ``rows``: a run's metrics rows (``RunStore.rows()``, or a DataFrame's records, where NaN reads as absent).
    """
    example: dict[int, tuple[float, float | None]] = {}
    central: dict[int, tuple[float, float | None]] = {}
    for row in rows:
        event, server_round = row.get("event"), row.get("round")
        if server_round is None:
            continue
        server_round = int(server_round)
        if event == "fit":
            for key, value in row.items():
                spent = _number(value) if key.endswith(DEFENSE_EPSILON_SUFFIX) else None
                if spent is None:
                    continue
                delta = _number(row.get(key.removesuffix(DEFENSE_EPSILON_SUFFIX) + ".delta"))
                if server_round not in example or spent > example[server_round][0]:
                    example[server_round] = (spent, delta)
        elif event == "eval":
            spent = _number(row.get(CENTRAL_EPSILON))
            if spent is not None:
                central[server_round] = (spent, _number(row.get(CENTRAL_DELTA)))
    table: dict[int, dict[str, float | None]] = {}
    largest: tuple[float, float | None] | None = None
    for server_round in sorted(set(example) | set(central)):
        if server_round in example and (largest is None or example[server_round][0] >= largest[0]):
            largest = example[server_round]
        client = central.get(server_round)
        table[server_round] = {
            EPSILON_EXAMPLE: largest[0] if largest else None,
            DELTA_EXAMPLE: largest[1] if largest else None,
            EPSILON_CLIENT: client[0] if client else None,
            DELTA_CLIENT: client[1] if client else None,
        }
    return table


def privacy_spent(rows: Iterable[Mapping[str, Any]]) -> dict[str, float | None]:
    """The privacy the whole run spent: each epsilon (and its delta) by its last round that reported one;
    None for a mechanism that was not in force."""
    spent: dict[str, float | None] = dict.fromkeys(PRIVACY_COLUMNS)
    for values in privacy_by_round(rows).values():
        for epsilon, delta in ((EPSILON_EXAMPLE, DELTA_EXAMPLE), (EPSILON_CLIENT, DELTA_CLIENT)):
            if values[epsilon] is not None:
                spent[epsilon], spent[delta] = values[epsilon], values[delta]
    return spent


def epsilon_text(epsilon: float | None, delta: float | None) -> str:
    """``3.21 (δ=1e-05)``, ``inf (δ=1e-05)`` for a release without noise; ``-`` where not in force."""
    if epsilon is None:
        return "-"
    figure = "inf" if math.isinf(epsilon) else f"{epsilon:.2f}"
    return figure if delta is None else f"{figure} (δ={delta:.0e})"
