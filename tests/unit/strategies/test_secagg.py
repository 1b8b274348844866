"""`strategy: secagg+`: parameters checked in one line naming the key, defaults that follow the sampled clients."""

from __future__ import annotations

import pytest
from secagg_rounds import secagg_config

from fedsim.config import ConfigError, parse_config
from fedsim.engine.lifecycle.secagg_protocol import SecAggPlusParameters

pytestmark = pytest.mark.usefixtures("task_identity")  # messages built outside a Flower run (conftest.py)


@pytest.mark.parametrize(
    ("raw", "starts"),
    [
        (
            {"num_shares": 3, "reconstruction_threshold": 4},
            "strategy.secagg.reconstruction_threshold = 4: must be <= num_shares (3)",
        ),
        ({"reconstruction_threshold": 6}, "strategy.secagg.reconstruction_threshold = 6: must be <= num_shares (5)"),
        ({"num_shares": 4}, "strategy.secagg.num_shares = 4: must be odd"),
        ({"num_shares": 7}, "strategy.secagg.num_shares = 7: must be <= the clients sampled per round (5)"),
        (
            {"reconstruction_threshold": 1},
            "strategy.secagg.reconstruction_threshold = 1: Input should be greater than or equal to 2",
        ),
        ({"clipping_range": 0}, "strategy.secagg.clipping_range = 0: Input should be greater than 0"),
        (
            {"quantization_range": 2**30},
            "strategy.secagg.quantization_range = 1073741824: the sum of 5 sampled clients would overflow",
        ),
        ({"max_weight": -1}, "strategy.secagg.max_weight = -1: Input should be greater than 0"),
        ({"num_share": 3}, "unknown key 'strategy.secagg.num_share' (did you mean 'num_shares'?)"),
    ],
)
def test_bad_secagg_parameters_fail_in_one_line_naming_the_key(raw, starts):
    with pytest.raises(ConfigError) as error:
        secagg_config(**raw)
    assert str(error.value).startswith(starts) and "\n" not in str(error.value)


def test_secagg_settings_that_do_not_fit_the_rest_of_the_config_fail_too():
    cases = [
        (
            {"strategy": {"name": "fedavg", "secagg": {"num_shares": 3}}},
            "strategy.secagg = {'num_shares': 3}: SecAgg+ parameters need strategy.name = secagg+",
        ),
        ({"strategy": {"name": "secagg+", "dp": {}}}, "strategy.dp = {kind: server-fixed, ...}: "),
        (
            {"strategy": {"name": "secagg+"}, "federation": {"num_clients": 1}},
            "federation.num_clients = 1: secagg+ samples 1 client",
        ),
        (
            {"strategy": {"name": "secagg+"}, "federation": {"fraction_evaluate": 0.5}},
            "federation.fraction_evaluate = 0.5: ",
        ),
        (
            {"federation": {"failures": [{"round": 1, "client": 0, "stage": "unmask"}]}},
            "federation.failures[0].stage = 'unmask': protocol stages exist only under",
        ),
        (
            {
                "strategy": {"name": "secagg+"},
                "federation": {"failures": [{"round": 1, "client": 0, "stage": "setup", "kind": "nan"}]},
            },
            "federation.failures[0].stage = 'setup': a nan loss",
        ),
    ]
    for raw, starts in cases:
        with pytest.raises(ConfigError) as error:
            parse_config(raw)
        assert str(error.value).startswith(starts), str(error.value)


def test_the_cli_refuses_bad_parameters_before_anything_runs(tmp_path, capsys):
    from fedsim.cli import main

    path = tmp_path / "bad.yaml"
    path.write_text(
        "strategy: {name: secagg+, secagg: {num_shares: 3, reconstruction_threshold: 5}}\n"
        "federation: {num_clients: 5}\n"
    )
    assert main(["run", str(path), "--quiet", "--set", f"output.dir={tmp_path / 'runs'}"]) == 2
    assert capsys.readouterr().err.strip() == (
        "fedsim: error: strategy.secagg.reconstruction_threshold = 5: must be <= num_shares (3)"
    )
    assert not (tmp_path / "runs").exists()


def test_defaults_follow_the_number_of_sampled_clients():
    for clients, fraction, shares, threshold in [(2, 1.0, 2, 2), (5, 1.0, 5, 3), (10, 1.0, 10, 6), (10, 0.5, 5, 3)]:
        config = parse_config(
            {"strategy": {"name": "secagg+"}, "federation": {"num_clients": clients, "fraction_fit": fraction}}
        )
        resolved = SecAggPlusParameters.of(config.strategy.secagg, config.federation, largest_partition=40)
        assert (resolved.sampled, resolved.num_shares, resolved.threshold, resolved.max_weight) == (
            clients * fraction,
            shares,
            threshold,
            40.0,
        )
