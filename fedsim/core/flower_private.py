"""Every private name of Flower and Ray fedsim uses, in one place, behind functions of fedsim's own.

Flower's and Ray's public APIs do not reach what fedsim needs here: a simulation run with a ``Run`` of fedsim's
making (``run_simulation``), the node-to-partition map Flower's simulation makes (``recording_node_registration``),
the identity and ids of messages built outside a Flower run (``task_identity``, ``give_message_id``) and whether
a ServerApp has a main function (``server_app_has_main``), the Ray backend
class Flower instantiates (``replaced_ray_backend``), a ClientApp's mods, the SecAgg+ workflow's state and the legacy
compat layer, and Ray's signal and address helpers. Each may change in any release; the versions
they were written against are ``FLOWER_RANGE`` / ``RAY_RANGE``, ``version_warnings`` says when another is installed,
and ``tests/contract/test_flower_private.py`` checks each name against the installed versions (``make
flower-nightly`` runs it against Flower's newest release on the index). No other module imports a private Flower or
Ray name (``tests/test_architecture.py`` checks).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import Any

logger = logging.getLogger("fedsim")

#: the versions these names were written and tested against: [lowest, first one not known to work)
FLOWER_RANGE = ("1.41", "1.43")
RAY_RANGE = ("2.40", "3.0")


def outside(version: str, supported: tuple[str, str]) -> bool:
    """Whether ``version`` falls outside [lowest, first unknown); a pre-release or nightly counts as its release."""
    from packaging.version import Version  # a dependency of both Flower and Ray

    release = Version(version).release
    return not (Version(supported[0]).release <= release < Version(supported[1]).release)


def version_warnings() -> list[str]:
    """One line per installed Flower or Ray outside the versions this module was written against."""
    lines = []
    for package, supported in (("flwr", FLOWER_RANGE), ("ray", RAY_RANGE)):
        installed = _installed(package)
        if installed is None:
            continue
        if outside(installed, supported):
            lines.append(
                f"warning: {package} {installed} is outside the versions fedsim's use of its internals was checked "
                f"against (>={supported[0]},<{supported[1]}): run `make flower-contract` to check it"
            )
    return lines


def _installed(package: str) -> str | None:
    """The version of the package Python imports: that of the distribution beside the imported module (a nightly
    installed over the release, e.g. ``flwr-nightly`` for ``flwr``), else the package's own metadata."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent.parent
    for distribution in metadata.distributions(path=[str(folder)]):
        if str(distribution.metadata["Name"]).lower().replace("_", "-") in (package, f"{package}-nightly"):
            return distribution.version
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


_warned = False


def _check_versions_once() -> None:
    global _warned
    if not _warned:
        _warned = True
        for line in version_warnings():
            logger.warning(line)


# ------------------------------------------------------------------------------------------ Flower's simulation


def run_simulation(
    *,
    num_supernodes: int,
    client_app: Any,
    server_app: Any,
    backend_config: dict[str, Any],
    app_dir: str,
    run_config: dict[str, Any],
    overrides: dict[str, Any],
) -> None:
    """Flower's simulation of ``server_app`` and ``client_app`` as `flwr run` starts an app: a ``Run`` carrying the
    ``overrides`` each node fuses with its run config, the ServerApp's context holding ``run_config``."""
    _check_versions_once()
    from flwr.app import Context, RecordDict
    from flwr.common.constant import RUN_ID_NUM_BYTES, SUPERLINK_NODE_ID, TASK_ID_NUM_BYTES
    from flwr.server.superlink.linkstate.utils import generate_rand_int_from_bytes
    from flwr.simulation.run_simulation import _run_simulation
    from flwr.supercore.constant import NOOP_FEDERATION_ID
    from flwr.supercore.run import Run
    from flwr.supercore.task_identity import TaskIdentity
    from flwr.supercore.telemetry import EventType

    run = Run.create_empty(run_id=generate_rand_int_from_bytes(RUN_ID_NUM_BYTES))
    run.primary_task_id = generate_rand_int_from_bytes(TASK_ID_NUM_BYTES)
    run.federation_id = NOOP_FEDERATION_ID
    # what Flower's own Python entry point sets for the messages the ServerApp builds
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, run.run_id, SUPERLINK_NODE_ID
    run.override_config = dict(overrides)
    context = Context(run_id=run.run_id, node_id=0, node_config={}, state=RecordDict(), run_config=dict(run_config))
    _run_simulation(
        num_supernodes=num_supernodes,
        exit_event=EventType.PYTHON_API_RUN_SIMULATION_LEAVE,
        client_app=client_app,
        server_app=server_app,
        backend_config=backend_config,
        server_app_context=context,
        app_dir=app_dir,
        run=run,
        is_app=True,  # each node's run config: the app's, fused with the overrides
    )


def stamp_task_identity(monkeypatch: Any, run_id: int = 1, node_id: int = 1, task_id: int = 1) -> None:
    """Stamp messages built outside a Flower run (tests) with an identity, as Flower's processes do."""
    from flwr.supercore.task_identity import TaskIdentity

    monkeypatch.setattr(TaskIdentity, "_run_id", run_id)
    monkeypatch.setattr(TaskIdentity, "_node_id", node_id)
    monkeypatch.setattr(TaskIdentity, "_task_id", task_id)


@contextlib.contextmanager
def task_identity(run_id: int) -> Iterator[None]:
    """While inside: the messages a ServerApp builds in this process carry ``run_id`` and the SuperLink's node id, as
    Flower's own entry points stamp them (a dry call of the app outside a Flower run); the identity before is restored
    after."""
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.supercore.task_identity import TaskIdentity

    before = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, run_id, SUPERLINK_NODE_ID
    try:
        yield
    finally:
        TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = before


def give_message_id(message: Any, message_id: str) -> None:
    """Give a pushed instruction message its id, as a SuperLink does when it stores one."""
    message.metadata.__dict__["_message_id"] = message_id


@contextlib.contextmanager
def recording_node_registration(into: dict[int, int]) -> Iterator[None]:
    """While inside: the node id -> partition id map each simulation registers is copied ``into``."""
    from flwr.server.superlink.fleet.vce import vce_api

    register = vce_api._register_nodes

    def recording(*args: Any, **kwargs: Any) -> Any:
        mapping = register(*args, **kwargs)
        into.update(mapping)
        return mapping

    vce_api._register_nodes = recording
    try:
        yield
    finally:
        vce_api._register_nodes = register


@contextlib.contextmanager
def replaced_ray_backend(subclass: Callable[[type], type]) -> Iterator[None]:
    """While inside: Flower's simulation builds its Ray backend from ``subclass(RayBackend)``."""
    from flwr.server.superlink.fleet.vce.backend import raybackend

    flower_backend = raybackend.RayBackend
    # Flower imports it from the module when a simulation starts (setattr: replacing a class is what this does)
    setattr(raybackend, "RayBackend", subclass(flower_backend))  # noqa: B010
    try:
        yield
    finally:
        setattr(raybackend, "RayBackend", flower_backend)  # noqa: B010


def default_supernodes() -> int | None:
    """The nodes Flower's local SuperLink simulates for an app that names none (None where this Flower has no such
    default)."""
    try:
        from flwr.supercore.constant import DEFAULT_SIMULATION_CONFIG
    except ImportError:
        return None
    return int(DEFAULT_SIMULATION_CONFIG.num_supernodes) or None


def client_app_mods(client_app: Any) -> list[Any]:
    """The mods a ClientApp was built with (``ClientApp(mods=[...])``)."""
    return list(getattr(client_app, "_mods", None) or [])


def server_app_has_main(server_app: Any) -> bool:
    """Whether a ServerApp runs a main function of its own (``@app.main()``), not Flower's legacy server loop
    (``ServerApp(server_fn=...)``, whose rounds run their clients in a thread pool)."""
    return getattr(server_app, "_main", None) is not None


def flower_noise_std(noise_multiplier: float, clipping_norm: float, num_sampled_clients: int) -> float:
    """The noise standard deviation Flower's central-DP wrappers add to the aggregate."""
    from flwr.supercore.differential_privacy import compute_stdv

    return float(compute_stdv(noise_multiplier, clipping_norm, num_sampled_clients))


# ------------------------------------------------------------------------------------------ SecAgg+ and compat


def recorddict_compat() -> Any:
    """Flower's conversions between RecordDicts and the legacy FitIns / Parameters."""
    from flwr.compat.common import recorddict_compat as compat

    return compat


def grid_client_proxy(node_id: int, grid: Any, run_id: int) -> Any:
    """A legacy ClientProxy for one node of a grid (what Flower's compat layer registers with a ClientManager)."""
    from flwr.server.compat.grid_client_proxy import GridClientProxy

    return GridClientProxy(node_id, grid, run_id)


def secaggplus_workflow_state() -> type:
    """The state class Flower's SecAggPlusWorkflow passes between its stages."""
    from flwr.server.workflow.secure_aggregation.secaggplus_workflow import WorkflowState

    return WorkflowState


def message_serde() -> tuple[Callable[[Any], Any], Callable[[Any], Any], type]:
    """Flower's Message <-> protobuf conversions and the protobuf class (to copy a message as the wire would)."""
    from flwr.common.serde import message_from_proto, message_to_proto
    from flwr.proto.message_pb2 import Message as ProtoMessage

    return message_to_proto, message_from_proto, ProtoMessage


def array_record_serde() -> tuple[Callable[[Any], Any], Callable[[Any], Any], type]:
    """Flower's ArrayRecord <-> protobuf conversions and the protobuf class (its size on the wire)."""
    from flwr.common.serde import array_record_from_proto, array_record_to_proto
    from flwr.proto.recorddict_pb2 import ArrayRecord as ProtoArrayRecord

    return array_record_to_proto, array_record_from_proto, ProtoArrayRecord


# ------------------------------------------------------------------------------------------ Ray


def canonical_ray_address(requested: str) -> str | None:
    """Ray's resolution of a cluster address (``auto``: the cluster `ray start` last started on this machine)."""
    from ray._private.services import canonicalize_bootstrap_address

    return canonicalize_bootstrap_address(requested)


@contextlib.contextmanager
def ray_sigterm_handlers_skipped() -> Iterator[None]:
    """While inside: ``ray.init`` and its node install no SIGTERM handler."""
    from ray._private import utils

    ray_sets = utils.set_sigterm_handler
    utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        utils.set_sigterm_handler = ray_sets


def disable_ray_failure_signal_handler() -> None:
    """Ray's driver starts without its crash-signal handler (read by ``ray.init``)."""
    from ray._private import ray_constants

    ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = True


def ray_internals() -> tuple[Any, Any]:
    """Ray's ``_private.utils`` and ``_private.ray_constants`` modules (tests set what they hold)."""
    from ray._private import ray_constants, utils

    return utils, ray_constants


def ray_default_temp_dir() -> str:
    """Ray's own temp folder: RAY_TMPDIR, else /tmp/ray."""
    from ray._common.utils import get_default_ray_temp_dir

    return get_default_ray_temp_dir()
