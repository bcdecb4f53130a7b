"""A queued job's reason and estimate where what holds it is not the queue (issue 31 item 4), on a
real server with real nodes (each boots in ``BOOT_S``: ``CLOUDLET_BOOT_DELAY_S``):

- a compute instance gets no fair-share reason, as the scheduler applies no fair share to it, even
  where its location has team shares;
- a location with no room left, and a provider whose launches fail, say ``no_capacity`` with the
  evidence (the location's capacity, the provider's error), not "cluster at max" nor "nodes
  starting";
- a job that waits for a node to boot has that boot in its estimate, and says where it comes from:
  the provider's default before the compute's first node start, that start's time after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.instance_helpers import create_instance
from tests.jobs_helpers import (
    compute,
    create_compute,
    job,
    nodes,
    served,
    submit,
    wait_job,
    wait_until,
)

BOOT_S = 8
DS3 = "Standard_DS3_v2"  # 4 vCPUs


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    env = {"CLOUDLET_BOOT_DELAY_S": str(BOOT_S), "CLOUDLET_INSTANCE_APPS": ""}
    yield from served(tmp_path_factory, "job-wait-limits", extra_env=env)


@pytest.fixture(scope="module")
def api(srv: RunningServer) -> Iterator[httpx.Client]:
    with srv.client() as client:
        yield client


def _cluster(location: str = "local", max_instances: int = 1, idle: int = 1) -> dict[str, Any]:
    return {
        "type": "amlcompute",
        "size": DS3,
        "location": location,
        "min_instances": 0,
        "max_instances": max_instances,
        "idle_time_before_scale_down": idle,
    }


def _waiting(api: httpx.Client, srv: RunningServer, name: str, code: str) -> dict[str, Any]:
    """NAME's wait once its code is CODE (the queue is read again within ~5 s)."""
    return wait_until(
        lambda: (w := job(api, srv, name).get("waiting")) and w["code"] == code and w,
        30,
        f"{name} to wait with {code}",
    )


def _cancel(api: httpx.Client, srv: RunningServer, *names: str) -> None:
    for name in names:
        api.post(f"{srv.ws_path}/jobs/{name}/cancel")
    for name in names:
        wait_job(api, srv, name, ("Canceled", "Completed", "Failed"), timeout=60)


def test_an_instance_gets_no_fair_share_reason_where_its_location_has_shares(
    api: httpx.Client, srv: RunningServer
) -> None:
    """The admin's team may not borrow and holds the whole 2-vCPU instance: on a cluster that is
    fair share; on an instance, which the scheduler never shares, the job waits for a free vCPU."""
    create_instance(api, srv, "ci-wait", size="Standard_DS2_v2")
    holders = ("ci-hold-1", "ci-hold-2")
    for name in holders:
        submit(api, srv, name, {"command": "sleep 300", "compute": "azureml:ci-wait"})
    for name in holders:
        wait_job(api, srv, name, ("Running",), timeout=90)
    share = {"location": "local", "share": 1}
    alpha = {"members": ["admin"], "shares": [{**share, "borrow_limit": 0}]}
    assert api.put("/api/v1/teams/alpha", json=alpha).status_code == 201
    assert api.put("/api/v1/teams/beta", json={"shares": [share]}).status_code == 201
    try:
        submit(api, srv, "ci-queued", {"command": "echo queued", "compute": "azureml:ci-wait"})
        waiting = _waiting(api, srv, "ci-queued", "no_free_vcpu")
        assert "1 vCPUs and 0 of 2 are free" in waiting["message"], waiting
        assert waiting["position"] == 1 and waiting["eta"], waiting
    finally:
        for team in ("alpha", "beta"):
            api.delete(f"/api/v1/teams/{team}")
        _cancel(api, srv, "ci-queued", *holders)


def test_a_location_with_no_room_left_says_no_capacity_until_it_has_room(
    api: httpx.Client, srv: RunningServer
) -> None:
    made = api.put("/api/v1/locations/tight", json={"provider": "local", "capacity": {"vcpus": 0}})
    assert made.status_code == 201, made.text
    create_compute(api, srv, "tight-c", _cluster("tight"))
    submit(api, srv, "tight-1", {"command": "echo fits", "compute": "azureml:tight-c"})
    try:
        waiting = _waiting(api, srv, "tight-1", "no_capacity")
        expected = "the location cannot give nodes: location tight capacity 0/0 vCPUs in use"
        assert waiting["message"] == expected, waiting
        assert waiting["eta"] is None and waiting["position"] == 1, waiting  # no node is coming
        [warning] = [w for w in compute(api, srv, "tight-c")["warnings"] if w["code"] == "NoCapacity"]
        assert warning["message"] == "location tight capacity 0/0 vCPUs in use", warning  # the autoscaler's
        # Room for one node: the autoscaler makes it, the job runs, and the warning goes.
        assert api.put("/api/v1/locations/tight", json={"capacity": {"vcpus": 4}}).status_code == 200
        assert wait_job(api, srv, "tight-1", timeout=90)["status"] == "Completed"
        wait_until(
            lambda: all(w["code"] != "NoCapacity" for w in compute(api, srv, "tight-c")["warnings"]),
            30,
            "the NoCapacity warning to go",
        )
    finally:
        _cancel(api, srv, "tight-1")


def test_launches_that_fail_say_what_the_provider_said(
    api: httpx.Client, srv: RunningServer, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the nodes' directory should be\n")
    config = {"nodes_dir": str(blocker / "nodes")}
    made = api.put("/api/v1/locations/broken", json={"provider": "local", "config": config})
    assert made.status_code == 201, made.text
    create_compute(api, srv, "broken-c", _cluster("broken", max_instances=2))
    submit(api, srv, "broken-1", {"command": "echo never", "compute": "azureml:broken-c"})
    try:
        waiting = _waiting(api, srv, "broken-1", "no_capacity")
        assert waiting["message"].startswith("the provider cannot give nodes: "), waiting
        assert "failed in the last" in waiting["message"], waiting
        assert "cannot make node directory" in waiting["message"], waiting
        assert waiting["eta"] is None, waiting
        assert compute(api, srv, "broken-c")["current_node_count"] == 0
    finally:
        _cancel(api, srv, "broken-1")


def test_an_estimate_that_waits_for_a_node_includes_its_boot(api: httpx.Client, srv: RunningServer) -> None:
    create_compute(api, srv, "boot-c", _cluster())
    submit(api, srv, "boot-1", {"command": "echo one", "compute": "azureml:boot-c"})
    first = _waiting(api, srv, "boot-1", "waiting_for_nodes")
    # No node of this compute has started yet: the local provider's default boot (5 s).
    assert first["eta_boot_s"] == 5, first
    assert "the local provider's usual boot" in first["eta_note"], first
    assert first["eta_in_s"] <= 5, first
    assert wait_job(api, srv, "boot-1", timeout=90)["status"] == "Completed"
    wait_until(lambda: not nodes(api, srv, "boot-c"), 60, "the node to be released after its idle second")
    submit(api, srv, "boot-2", {"command": "echo two", "compute": "azureml:boot-c"})
    second = _waiting(api, srv, "boot-2", "waiting_for_nodes")
    # The first node took BOOT_S (plus its start) from its request to its registration.
    assert BOOT_S <= second["eta_boot_s"] <= BOOT_S + 15, second
    assert "the median of this compute's last 1 node start" in second["eta_note"], second
    assert 0 < second["eta_in_s"] <= second["eta_boot_s"], second
    assert wait_job(api, srv, "boot-2", timeout=90)["status"] == "Completed"
