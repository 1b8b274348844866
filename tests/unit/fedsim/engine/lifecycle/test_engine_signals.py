"""The simulation engine and stop signals: a stop asked for before the federation starts stops it before it
starts, and SIGTERM is the run's again once Ray is shut down (Flower's simulation, Ray: stand-ins)."""

from __future__ import annotations

import os
import signal
import sys
import types

import flwr.simulation
import pytest
from tiny_configs import tiny_config

import fedsim.engine.lifecycle.simulation as runner
from fedsim.core.stopping import StopRequested, StopSignal, stop_on_signals
from fedsim.engine.assembly import server_settings_of


class _NoProtocol:
    def server_app(self, server, federation):
        return "server app"

    def client_app(self, client):
        return "client app"


@pytest.fixture
def started(monkeypatch):
    """What the engine started, in order: Ray (`ray`), the federation (`simulation`), Ray's shutdown (`stop`)."""
    calls: list[str] = []
    monkeypatch.setattr(runner, "start_ray", lambda init_args: calls.append("ray"))
    monkeypatch.setattr(flwr.simulation, "run_simulation", lambda **simulation: calls.append("simulation"))
    real_stop_ray = runner.stop_ray
    monkeypatch.setattr(runner, "stop_ray", lambda: (calls.append("stop"), real_stop_ray()))
    return calls


def _play(stop: StopSignal) -> None:
    config = tiny_config()
    server = types.SimpleNamespace(settings=server_settings_of(config), stop=stop, start_round=0)
    runner.SimulationEngine(config.federation, config.adversary).play(
        _NoProtocol(), server, federation=None, client=None
    )


def test_a_stop_asked_for_before_ray_starts_starts_neither_ray_nor_the_federation(started):
    stop = StopSignal()
    stop.request(signal.SIGINT)  # Ctrl-C while the data, the model and the attack workers got ready
    with pytest.raises(StopRequested):
        _play(stop)
    assert started == []


def test_a_stop_asked_for_while_ray_starts_shuts_ray_down_without_starting_the_federation(started, monkeypatch):
    stop = StopSignal()

    def ray_starting(init_args):  # ray.init takes seconds; longer on a loaded machine
        started.append("ray")
        stop.request(signal.SIGTERM)

    monkeypatch.setattr(runner, "start_ray", ray_starting)
    with pytest.raises(StopRequested):
        _play(stop)
    assert started == ["ray", "stop"]


def test_sigterm_is_the_runs_again_once_the_simulation_shut_ray_down(started, monkeypatch):
    def simulation_whose_ray_shut_down(**simulation):
        # Flower's backend calls ray.shutdown(), which sets SIGTERM back to the default below Python: here, in it
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        started.append("simulation")

    monkeypatch.setattr(flwr.simulation, "run_simulation", simulation_whose_ray_shut_down)
    with stop_on_signals(StopSignal(), lambda signum: None) as stop:
        _play(stop)
        assert started == ["ray", "simulation", "stop"]
        # the run now waits for its attacks; a SIGTERM there must ask it to stop, not kill it outright
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)
        signal.raise_signal(signal.SIGTERM)
        assert stop.requested and stop.signum == signal.SIGTERM


def test_stopping_ray_hands_sigterm_back_to_the_run_although_ray_reset_it(monkeypatch):
    shut_down = []

    def ray_shutdown():  # Ray's C++ core resets SIGTERM (signal.getsignal cannot see it); this stands in for it
        shut_down.append(True)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    fake_ray = types.SimpleNamespace(is_initialized=lambda: not shut_down, shutdown=ray_shutdown)
    monkeypatch.setitem(sys.modules, "ray", fake_ray)
    from fedsim.engine.lifecycle.ray_resources import stop_ray

    with stop_on_signals(StopSignal(), lambda signum: None) as stop:
        stop_ray()
        assert shut_down and signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)
        signal.raise_signal(signal.SIGTERM)
        assert stop.requested


def test_ray_is_started_without_the_driver_crash_handler_whose_shutdown_resets_sigterm(monkeypatch):
    import ray

    from fedsim.core.flower_private import ray_internals
    from fedsim.engine.lifecycle.ray_resources import start_ray

    _, ray_constants = ray_internals()
    monkeypatch.setattr(ray_constants, "RAY_DISABLE_FAILURE_SIGNAL_HANDLER", False)  # Ray's default
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # start_ray extends it for Ray's workers
    seen = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **init_args: seen.append(ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER))
    assert start_ray({"address": "local", "num_cpus": 1}) and seen == [True]


def test_a_sigterm_while_ray_starts_asks_the_run_to_stop_instead_of_exiting_with_status_15(monkeypatch):
    import ray

    from fedsim.core.flower_private import ray_internals
    from fedsim.engine.lifecycle.ray_resources import start_ray

    utils, _ = ray_internals()

    def ray_init(**init_args):  # as ray.init does first: SIGTERM -> sys.exit(15) wherever the main thread is
        utils.set_sigterm_handler(lambda signum, frame: sys.exit(signum))
        signal.raise_signal(signal.SIGTERM)  # the seconds Ray takes to start, on a loaded machine

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", ray_init)
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    with stop_on_signals(StopSignal(), lambda signum: None) as stop:
        start_ray({"address": "local", "num_cpus": 1})
        assert stop.requested and stop.signum == signal.SIGTERM
