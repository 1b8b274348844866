"""The contract of ``fedsim.core.flower_private`` with the installed Flower and Ray: every private name it uses is
there, with the shape it is used with. Run against Flower's newest release by ``make flower-contract``."""

from __future__ import annotations

import inspect

import pytest

from fedsim.core import flower_private


def parameters(function) -> set[str]:
    return set(inspect.signature(function).parameters)


def test_flowers_simulation_entry_point_takes_what_the_audit_passes():
    from flwr.simulation.run_simulation import _run_simulation

    wanted = {"num_supernodes", "exit_event", "client_app", "server_app", "backend_config"}
    assert wanted | {"server_app_context", "app_dir", "run", "is_app"} <= parameters(_run_simulation)


def test_a_run_of_fedsims_making_has_the_fields_flower_reads():
    from flwr.common.constant import RUN_ID_NUM_BYTES, SUPERLINK_NODE_ID, TASK_ID_NUM_BYTES  # noqa: F401
    from flwr.server.superlink.linkstate.utils import generate_rand_int_from_bytes
    from flwr.supercore.constant import NOOP_FEDERATION_ID  # noqa: F401
    from flwr.supercore.run import Run
    from flwr.supercore.telemetry import EventType

    run = Run.create_empty(run_id=generate_rand_int_from_bytes(RUN_ID_NUM_BYTES))
    for field in ("primary_task_id", "federation_id", "override_config"):
        assert hasattr(run, field)
    assert EventType.PYTHON_API_RUN_SIMULATION_LEAVE


def test_the_task_identity_flower_stamps_messages_with_can_be_set(monkeypatch):
    from flwr.supercore.task_identity import TaskIdentity

    flower_private.stamp_task_identity(monkeypatch, run_id=7)
    assert TaskIdentity._run_id == 7 and hasattr(TaskIdentity, "_node_id") and hasattr(TaskIdentity, "_task_id")


def test_the_simulation_registers_its_nodes_through_one_function_returning_the_map():
    from flwr.server.superlink.fleet.vce import vce_api

    assert callable(vce_api._register_nodes)
    mapping: dict[int, int] = {}
    with flower_private.recording_node_registration(mapping):
        assert vce_api._register_nodes.__name__ == "recording"
    assert vce_api._register_nodes.__name__ == "_register_nodes"


def test_the_ray_backend_flower_builds_is_a_class_of_its_module_with_build_and_terminate():
    from flwr.server.superlink.fleet.vce.backend import raybackend

    flower_backend = raybackend.RayBackend
    assert {"app_fn"} <= parameters(flower_backend.build) and callable(flower_backend.terminate)
    with flower_private.replaced_ray_backend(lambda base: type("Shared", (base,), {})):
        assert raybackend.RayBackend.__mro__[1] is flower_backend
    assert raybackend.RayBackend is flower_backend


def test_a_client_apps_mods_are_where_the_adapter_reads_them():
    from flwr.clientapp import ClientApp
    from flwr.clientapp.mod import LocalDpMod

    mod = LocalDpMod(clipping_norm=1.0, sensitivity=1e-4, epsilon=10.0, delta=1e-5)
    assert flower_private.client_app_mods(ClientApp(mods=[mod])) == [mod]
    assert flower_private.default_supernodes() == 2  # Flower's local SuperLink's default simulation


def test_secaggs_workflow_state_the_grid_client_proxy_and_the_compat_layer_are_there():
    state = flower_private.secaggplus_workflow_state()
    assert inspect.isclass(state)
    compat = flower_private.recorddict_compat()
    assert callable(compat.arrayrecord_to_parameters) and callable(compat.recorddict_to_fitins)
    from flwr.server.compat.grid_client_proxy import GridClientProxy

    assert {"node_id", "grid", "run_id"} <= parameters(GridClientProxy.__init__)


def test_flowers_wire_format_round_trips_a_record():
    import numpy as np
    from flwr.app import ArrayRecord

    to_proto, from_proto, proto = flower_private.array_record_serde()
    record = ArrayRecord([np.arange(3.0)])
    back = from_proto(proto.FromString(to_proto(record).SerializeToString()))
    assert np.array_equal(back.to_numpy_ndarrays()[0], np.arange(3.0))
    assert len(flower_private.message_serde()) == 3


def test_flowers_central_dp_noise_is_the_multiplier_times_the_clip_over_the_sampled_clients():
    assert flower_private.flower_noise_std(1.0, 2.0, 4) == pytest.approx(0.5)


def test_rays_signal_and_address_helpers_are_there():
    utils, constants = flower_private.ray_internals()
    assert callable(utils.set_sigterm_handler) and hasattr(constants, "RAY_DISABLE_FAILURE_SIGNAL_HANDLER")
    assert isinstance(flower_private.ray_default_temp_dir(), str)
    from ray._private.services import canonicalize_bootstrap_address

    assert callable(canonicalize_bootstrap_address)


def test_the_public_entry_points_the_audit_wraps_keep_their_shape():
    from flwr.clientapp.mod import LocalDpMod
    from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg, Strategy

    assert "evaluate_fn" in parameters(Strategy.start)  # fedsim.engine.app_audit.server_watch
    assert {"msg", "ctxt", "call_next"} <= parameters(LocalDpMod.__call__)  # fedsim.engine.app_audit.client_probe
    wrapper = DifferentialPrivacyServerSideFixedClipping(FedAvg(), 1.0, 1.0, 2)
    assert (wrapper.noise_multiplier, wrapper.clipping_norm, wrapper.num_sampled_clients) == (1.0, 1.0, 2)


def test_the_installed_versions_are_judged_against_the_range():
    assert flower_private.outside("1.43.0.dev20261120", ("1.41", "1.43"))
    assert not flower_private.outside("1.42.0", ("1.41", "1.43"))
    assert flower_private.outside("1.40.9", ("1.41", "1.43"))


def test_a_dry_call_stamps_the_messages_it_builds_and_restores_the_identity_before():
    from flwr.app import Message, MessageType, RecordDict
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.supercore.task_identity import TaskIdentity

    before = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    with flower_private.task_identity(run_id=11):
        message = Message(RecordDict(), dst_node_id=3, message_type=MessageType.TRAIN)
    assert message.metadata.run_id == 11 and message.metadata.src_node_id == SUPERLINK_NODE_ID
    assert (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id) == before
    flower_private.give_message_id(message, "m-1")
    assert message.metadata.message_id == "m-1"
    assert Message(RecordDict(), reply_to=message).metadata.reply_to_message_id == "m-1"


def test_a_server_apps_main_function_is_where_the_adapter_reads_it():
    from flwr.server import ServerAppComponents
    from flwr.server.strategy import FedAvg
    from flwr.serverapp import ServerApp

    with_main = ServerApp()

    @with_main.main()
    def main(grid, context) -> None:  # type: ignore[no-untyped-def]
        pass

    legacy = ServerApp(server_fn=lambda context: ServerAppComponents(strategy=FedAvg()))
    assert flower_private.server_app_has_main(with_main) and not flower_private.server_app_has_main(legacy)
