"""A SecAgg+ config in one call, and the rows of one event (and round) of a run."""

from __future__ import annotations

from fedsim.config import parse_config
from fedsim.rundir.writer import RunStore


def secagg_config(num_clients: int = 5, rounds: int = 1, failures=(), timeout: float = 30.0, **secagg):
    return parse_config(
        {
            "seed": 4,
            "federation": {
                "num_clients": num_clients,
                "rounds": rounds,
                "failures": list(failures),
                "round_timeout": timeout,
            },
            "strategy": {"name": "secagg+", "secagg": secagg},
        }
    )


def rows(store: RunStore, event: str, server_round: int | None = None) -> list[dict]:
    return [r for r in store.rows() if r["event"] == event and (server_round is None or r["round"] == server_round)]
