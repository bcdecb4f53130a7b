"""The online endpoint and deployment rules (domain/endpoints/online_endpoints.py), without I/O."""

from __future__ import annotations

from typing import Any

import pytest

from cloudlet.domain.endpoints import online_endpoints as rules
from cloudlet.domain.errors import CloudletError

DEPLOYMENT: dict[str, Any] = {
    "name": "blue",
    "endpoint_name": "ep1",
    "model": "azureml:m:1",
    "code_configuration": {"code": "codes/" + "a" * 64, "scoring_script": "score.py"},
    "instance_type": "Standard_DS3_v2",
}


def error_of(call: Any, *args: Any) -> CloudletError:
    with pytest.raises(CloudletError) as caught:
        call(*args)
    return caught.value


def test_endpoint_defaults_and_names() -> None:
    spec = rules.parse_endpoint({"$schema": "x", "name": "ep1"})
    assert spec.auth_mode == "key" and spec.traffic == {} and spec.mirror_traffic == {}
    assert error_of(rules.parse_endpoint, {"name": "1bad"}).target == "name"
    assert error_of(rules.parse_endpoint, {"name": "ep1"}, "ep2").target == "name"
    refused = error_of(rules.parse_endpoint, {"name": "ep1", "auth_mode": "aad_token"})
    assert refused.target == "auth_mode" and "key or aml_token" in refused.message
    assert error_of(rules.parse_endpoint, {"name": "ep1", "colour": 1}).target == "colour"


def test_traffic_must_sum_to_100_and_mirror_only_an_idle_deployment() -> None:
    assert rules.parse_endpoint({"name": "ep1", "traffic": {"blue": 90, "green": 10}}).traffic["green"] == 10
    assert "sum to 90" in error_of(rules.parse_endpoint, {"name": "ep1", "traffic": {"blue": 90}}).message
    mirrored = {"name": "ep1", "traffic": {"blue": 100, "green": 0}, "mirror_traffic": {"green": 20}}
    assert rules.parse_endpoint(mirrored).mirror_traffic == {"green": 20}
    live = {"name": "ep1", "traffic": {"blue": 50, "green": 50}, "mirror_traffic": {"green": 20}}
    assert error_of(rules.parse_endpoint, live).target == "mirror_traffic.green"
    too_much = {"name": "ep1", "traffic": {"blue": 100}, "mirror_traffic": {"green": 60}}
    assert "at most 50" in error_of(rules.parse_endpoint, too_much).message
    assert error_of(rules.parse_endpoint, {"name": "ep1", "traffic": {"blue": True}}).target == "traffic.blue"


def test_deployment_defaults_are_azures() -> None:
    spec = rules.parse_deployment(DEPLOYMENT, "ep1")
    assert spec.instance_count == 1
    assert spec.request_settings == {
        "request_timeout_ms": 5000,
        "max_concurrent_requests_per_instance": 1,
        "max_queue_wait_ms": 500,
    }
    assert spec.readiness_probe == rules.PROBE_DEFAULTS == spec.liveness_probe
    tuned = rules.parse_deployment({**DEPLOYMENT, "readiness_probe": {"period": 3}}, "ep1")
    assert tuned.readiness_probe["period"] == 3 and tuned.readiness_probe["failure_threshold"] == 30


@pytest.mark.parametrize(
    ("change", "target"),
    [
        ({"model": None}, "model"),
        ({"model": "./model"}, "model"),
        ({"code_configuration": {"code": "./src", "scoring_script": "score.py"}}, "code_configuration.code"),
        (
            {"code_configuration": {"code": "codes/x", "scoring_script": "../x.py"}},
            "code_configuration.scoring_script",
        ),
        ({"instance_type": None}, "instance_type"),
        ({"instance_count": 0}, "instance_count"),
        ({"request_settings": {"request_timeout_ms": 0}}, "request_settings.request_timeout_ms"),
        ({"request_settings": {"bogus": 1}}, "bogus"),
        ({"liveness_probe": {"period": "often"}}, "liveness_probe.period"),
        ({"endpoint_name": "other"}, "endpoint_name"),
    ],
)
def test_deployment_errors_name_the_field(change: dict[str, Any], target: str) -> None:
    assert error_of(rules.parse_deployment, {**DEPLOYMENT, **change}, "ep1").target == target


def test_traffic_flag() -> None:
    assert rules.parse_traffic_flag("blue=90 green=10") == {"blue": 90, "green": 10}
    assert error_of(rules.parse_traffic_flag, "blue:90").target == "traffic"


def test_choose_follows_the_weights_and_mirror_its_share() -> None:
    traffic = {"blue": 90, "green": 10, "idle": 0}
    picks = [rules.choose(traffic, i / 1000) for i in range(1000)]
    assert picks.count("blue") == 900 and picks.count("green") == 100 and "idle" not in picks
    assert rules.choose({"blue": 0}, 0.5) is None
    copies = [rules.mirrored({"green": 20}, i / 100) for i in range(100)]
    assert copies.count("green") == 20


def test_overload_is_twice_the_concurrency_of_the_ready_replicas() -> None:
    assert not rules.overloaded(3, 1, 2)
    assert rules.overloaded(4, 1, 2)
    assert rules.overloaded(0, 1, 0)


def test_a_deployment_taking_traffic_cannot_be_deleted() -> None:
    spec = rules.parse_endpoint({"name": "ep1", "traffic": {"blue": 100, "green": 0}})
    rules.check_deletable(spec, "green")
    assert error_of(rules.check_deletable, spec, "blue").status == 409


@pytest.mark.parametrize(("given", "name"), [("azureml:my-ci", "my-ci"), ("my-ci", "my-ci"), (None, None)])
def test_compute_names_an_instance_and_survives_the_round_trip(given: str | None, name: str | None) -> None:
    spec = rules.parse_deployment({**DEPLOYMENT, "compute": given}, "ep1")
    assert spec.compute == name
    again = rules.parse_deployment(spec.to_doc(), "ep1")
    assert again.compute == name
    assert ("compute" in spec.to_doc()) is (name is not None)


@pytest.mark.parametrize("given", ["azureml:", "1bad", "a" * 40, 7])
def test_a_bad_compute_names_the_field(given: Any) -> None:
    assert error_of(rules.parse_deployment, {**DEPLOYMENT, "compute": given}, "ep1").target == "compute"


def test_placement_local_then_instance_then_nodes() -> None:
    assert rules.placement_kind(True, None) == "process"
    assert rules.placement_kind(False, "ci") == "instance"
    assert rules.placement_kind(False, None) == "node"


def test_an_inline_environment_is_kept_for_the_node_to_build() -> None:
    env = {
        "image": "mcr.microsoft.com/azureml/minimal",
        "conda_file": {"dependencies": [{"pip": ["joblib"]}]},
    }
    spec = rules.parse_deployment({**DEPLOYMENT, "environment": env}, "ep1")
    assert spec.environment == env["image"] and spec.environment_doc == env
    assert rules.parse_deployment(spec.to_doc(), "ep1").environment_doc == env
