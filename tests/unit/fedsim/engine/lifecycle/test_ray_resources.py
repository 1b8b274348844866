"""Ray sizing: the attack workers' cores and GPU share are kept out of the pool Flower gives the clients."""

import pytest

from fedsim.config import ConfigError, parse_config
from fedsim.engine.lifecycle.ray_resources import check_fits_machine, ray_node_counts


def adversary_config(**adversary) -> dict:
    return {
        "federation": {"num_clients": 4, **adversary.pop("federation", {})},
        "adversary": {"attacks": ["dlg"], **adversary},
    }


def test_the_attack_workers_cpus_are_kept_out_of_the_ray_pool_that_flower_sizes():
    config = parse_config(adversary_config(workers=2, resources={"cpus": 2}))
    assert ray_node_counts(config.federation, config.adversary, "cpu", machine_cpus=16) == {"num_cpus": 12}
    assert ray_node_counts(config.federation, config.adversary, "cpu", {"num_cpus": 8}, machine_cpus=16) == {
        "num_cpus": 4
    }
    no_attacks = parse_config({"federation": {"num_clients": 4}})
    assert ray_node_counts(no_attacks.federation, no_attacks.adversary, "cpu", {"num_cpus": 8}, machine_cpus=16) == {
        "num_cpus": 8
    }


def test_on_a_node_too_small_to_set_cores_aside_the_attack_workers_share_them():
    config = parse_config(adversary_config(workers=2))
    assert ray_node_counts(config.federation, config.adversary, "cpu", machine_cpus=2) == {"num_cpus": 2}


def test_a_gpu_share_of_the_attack_workers_caps_the_gpu_clients_through_the_cpu_count():
    raw = adversary_config(
        workers=1, resources={"gpus": 0.5}, federation={"client_resources": {"cpus": 1, "gpus": 0.25}}
    )
    config = parse_config(raw)
    # 1 GPU: 0.5 for the attack leaves two clients of 0.25, although 16 CPUs would fit 16
    assert ray_node_counts(config.federation, config.adversary, "cuda", machine_cpus=16, machine_gpus=1) == {
        "num_cpus": 2
    }
    assert ray_node_counts(config.federation, config.adversary, "cpu", machine_cpus=16, machine_gpus=1) == {
        "num_cpus": 15
    }  # attacks on CPU


def test_an_attack_gpu_share_that_leaves_no_client_room_is_a_one_line_error():
    raw = adversary_config(resources={"gpus": 1}, federation={"client_resources": {"gpus": 0.5}})
    with pytest.raises(ConfigError) as error:
        config = parse_config(raw)
        ray_node_counts(config.federation, config.adversary, "cuda:0", machine_cpus=8, machine_gpus=1)
    message = str(error.value)
    assert "adversary.resources.gpus = 1.0" in message and "allowed: at most 0.5" in message and "\n" not in message


def test_attack_worker_resources_are_checked_like_client_resources():
    with pytest.raises(ConfigError, match=r"adversary.resources.cpus"):
        parse_config(adversary_config(resources={"cpus": 0}))
    with pytest.raises(ConfigError, match="time_limit"):
        parse_config({"adversary": {"attacks": [{"name": "ig", "time_limit": -1}]}})


def test_a_client_that_needs_more_cpus_than_the_run_has_is_refused_instead_of_an_empty_actor_pool():
    config = parse_config({"federation": {"client_resources": {"cpus": 64}}})
    with pytest.raises(ConfigError) as error:
        check_fits_machine(config.federation, config.adversary, ray_cpus=2, machine_cpus=2, machine_gpus=0)
    assert str(error.value) == (
        "federation.client_resources.cpus = 64: no client fits in the 2 CPU(s) this run has here; allowed: at most 2"
    )
    check_fits_machine(config.federation, config.adversary, ray_cpus=64, machine_cpus=64, machine_gpus=0)
    gpu = parse_config({"federation": {"client_resources": {"gpus": 0.5}}})
    with pytest.raises(ConfigError, match=r"^federation.client_resources.gpus = 0.5: this machine has 0 GPU\(s\); "):
        check_fits_machine(gpu.federation, gpu.adversary, ray_cpus=2, machine_cpus=2, machine_gpus=0)


@pytest.mark.parametrize("workers", [12, 1000])
def test_more_attack_workers_than_cores_are_refused(workers):
    config = parse_config(adversary_config(workers=workers))
    with pytest.raises(ConfigError) as error:
        check_fits_machine(config.federation, config.adversary, ray_cpus=2, machine_cpus=2, machine_gpus=0)
    assert str(error.value) == (
        f"adversary.workers = {workers}: {workers} x 1 CPU (adversary.resources.cpus) exceed the 2 CPU(s) of this "
        "machine; allowed: at most 2"
    )
    two = parse_config(adversary_config(workers=2))
    check_fits_machine(two.federation, two.adversary, ray_cpus=1, machine_cpus=2, machine_gpus=0)
    many = parse_config({"adversary": {"workers": workers}})
    check_fits_machine(many.federation, many.adversary, ray_cpus=2, machine_cpus=2, machine_gpus=0)
