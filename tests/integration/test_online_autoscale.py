"""Autoscale of an online deployment end to end (issue 14): a real server, real replicas of the
real inference server, real HTTP load through the gateway — load raises the replicas to
max_instances within the window, they scale back in (to zero) after scale_in_delay, and the first
request after that is held while a replica starts and answered."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from cloudlet.client import MLClient
from cloudlet.client._rest import HttpResponseError
from tests.integration.test_online_endpoints import ROWS, deployment, ml, project, srv

__all__ = ["ml", "project", "srv"]  # the module's fixtures, shared with the online endpoint tests
pytestmark = pytest.mark.timeout(300)
ENDPOINT = "scale1"
SETTINGS = {
    "type": "target_utilization",
    "min_instances": 0,
    "max_instances": 3,
    "target_concurrent_requests": 1,
    "polling_interval": 1,
    "window": 2,
    "scale_in_delay": 4,
}


def until(what: Callable[[], dict[str, Any]], done: Callable[[dict[str, Any]], bool], limit: float) -> float:
    """Poll WHAT until DONE (bounded by LIMIT s); the monotonic time it became true."""
    deadline = time.monotonic() + limit
    while True:
        shown = what()
        if done(shown):
            return time.monotonic()
        assert time.monotonic() < deadline, shown
        time.sleep(0.2)


def test_bad_scale_settings_name_the_field(ml: MLClient, project: Any) -> None:
    ml.online_endpoints.create_or_update({"name": ENDPOINT, "auth_mode": "key"})
    doc = deployment("auto", "auto", endpoint_name=ENDPOINT, scale_settings={**SETTINGS, "min_instances": 5})
    with pytest.raises(HttpResponseError) as caught:
        ml.online_deployments.create_or_update(doc, base_path=project)
    assert caught.value.status_code == 400 and "scale_settings.min_instances" in str(caught.value)


def test_load_scales_out_to_max_then_in_after_the_delay_then_from_zero(ml: MLClient, project: Any) -> None:
    ml.online_endpoints.create_or_update({"name": ENDPOINT, "auth_mode": "key"})
    doc = deployment(
        "auto",
        "auto",
        endpoint_name=ENDPOINT,
        scale_settings=SETTINGS,
        request_settings={"request_timeout_ms": 90_000, "max_concurrent_requests_per_instance": 2},
    )
    created = ml.online_deployments.create_or_update(doc, base_path=project)
    shown = ml.online_deployments.wait(ENDPOINT, "auto", generation=created["generation"])
    assert shown["provisioning_state"] == "Succeeded", shown
    assert shown["scale_settings"]["max_instances"] == 3
    endpoint = ml.online_endpoints.update_traffic(ENDPOINT, {"auto": 100})
    url, key = endpoint["scoring_uri"], ml.online_endpoints.get_keys(ENDPOINT)["primaryKey"]
    get = lambda: ml.online_deployments.get(ENDPOINT, "auto")  # noqa: E731

    stop = threading.Event()
    codes: list[int] = []

    def load() -> None:
        with httpx.Client(timeout=120, headers={"Authorization": f"Bearer {key}"}) as http:
            while not stop.is_set():
                codes.append(http.post(url, json={"data": "sleep"}).status_code)

    threads = [threading.Thread(target=load) for _ in range(6)]
    for thread in threads:
        thread.start()
    try:
        until(get, lambda s: s["ready_replicas"] == 3, 120)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    idle_from = time.monotonic()
    assert 200 in codes and set(codes) <= {200, 429}, codes
    assert len(get()["replicas"]) == 3  # never past max_instances

    gone = until(get, lambda s: not s["replicas"], 60)
    assert gone - idle_from >= SETTINGS["scale_in_delay"]  # not before the delay
    assert get()["ready_replicas"] == 0

    first = httpx.post(url, json=ROWS, headers={"Authorization": f"Bearer {key}"}, timeout=120)
    assert first.status_code == 200, first.text
    assert first.json() == {"pred": [0, 1], "who": "auto"}
    assert get()["ready_replicas"] == 1


def test_no_replica_within_the_timeout_is_503_with_retry_after(ml: MLClient, project: Any) -> None:
    doc = deployment(
        "auto",
        "auto",
        endpoint_name=ENDPOINT,
        scale_settings=SETTINGS,
        request_settings={"request_timeout_ms": 1, "max_concurrent_requests_per_instance": 2},
    )
    created = ml.online_deployments.create_or_update(doc, base_path=project)
    ml.online_deployments.wait(ENDPOINT, "auto", generation=created["generation"])
    get = lambda: ml.online_deployments.get(ENDPOINT, "auto")  # noqa: E731
    until(get, lambda s: not s["replicas"], 60)
    endpoint = ml.online_endpoints.get(ENDPOINT)
    key = ml.online_endpoints.get_keys(ENDPOINT)["primaryKey"]
    held = httpx.post(
        endpoint["scoring_uri"], json=ROWS, headers={"Authorization": f"Bearer {key}"}, timeout=30
    )
    assert held.status_code == 503, held.text
    assert held.headers["retry-after"] == "5" and "request_timeout_ms" in held.json()["error"]["message"]
    until(get, lambda s: len(s["replicas"]) == 1, 30)  # the held request still started one


def test_cpu_target_scales_out_under_cpu_load_and_back_in(ml: MLClient, project: Any) -> None:
    ml.online_endpoints.create_or_update({"name": ENDPOINT, "auth_mode": "key"})
    cpu = {"type": "target_utilization", "min_instances": 1, "max_instances": 2, "polling_interval": 1,
           "target_utilization_percentage": 30, "window": 3, "scale_in_delay": 3}  # fmt: skip
    doc = deployment("cpu", "cpu", endpoint_name=ENDPOINT, scale_settings=cpu)
    created = ml.online_deployments.create_or_update(doc, base_path=project)
    ml.online_deployments.wait(ENDPOINT, "cpu", generation=created["generation"])
    url = ml.online_endpoints.get(ENDPOINT)["scoring_uri"]
    key = ml.online_endpoints.get_keys(ENDPOINT)["primaryKey"]
    get = lambda: ml.online_deployments.get(ENDPOINT, "cpu")  # noqa: E731
    stop = threading.Event()

    def load() -> None:
        headers = {"Authorization": f"Bearer {key}", "azureml-model-deployment": "cpu"}
        with httpx.Client(timeout=60, headers=headers) as http:
            while not stop.is_set():
                http.post(url, json={"data": "spin"})

    threads = [threading.Thread(target=load) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        until(get, lambda s: len(s["replicas"]) == 2, 90)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    until(get, lambda s: len(s["replicas"]) == 1, 60)  # back to min_instances once idle
