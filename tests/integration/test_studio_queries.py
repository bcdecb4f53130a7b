"""Acceptance: the job list's studio filters, sorts and paging over the real HTTP API, and a queued
job's ``waiting`` (reason, position in its compute's queue) for the states a user meets: behind
another job on a busy 1-node cluster, a cluster held by its quota, a locked resource group, a
stopped instance (issue 27).

One server for the module. The listed jobs wait on a stopped instance, so nothing runs them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.instance_helpers import act, create_instance
from tests.jobs_helpers import (
    create_compute,
    error_of,
    job,
    quota_url,
    rg_lock_url,
    served,
    submit,
    wait_job,
    wait_until,
)

INSTANCE = "studio-ci"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "studio-queries", extra_env={"CLOUDLET_INSTANCE_APPS": ""})


@pytest.fixture(scope="module")
def api(srv: RunningServer) -> Iterator[httpx.Client]:
    with srv.client() as client:
        create_instance(client, srv, INSTANCE, size="Standard_DS2_v2")
        act(client, srv, INSTANCE, "stop")
        yield client


def _listed(api: httpx.Client, srv: RunningServer, **params: Any) -> dict[str, Any]:
    response = api.get(f"{srv.ws_path}/jobs", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _names(api: httpx.Client, srv: RunningServer, **params: Any) -> list[str]:
    return [j["name"] for j in _listed(api, srv, **params)["value"]]


def _all_pages(api: httpx.Client, first: dict[str, Any]) -> list[str]:
    names = [j["name"] for j in first["value"]]
    page = first
    while "nextLink" in page:
        response = api.get(page["nextLink"])
        assert response.status_code == 200, response.text
        page = response.json()
        names += [j["name"] for j in page["value"]]
    return names


def _held(name: str, display: str, team: str, experiment: str) -> dict[str, Any]:
    return {
        "command": "echo never",
        "compute": f"azureml:{INSTANCE}",
        "display_name": display,
        "experiment_name": experiment,
        "tags": {"team": team, "stage": "test"},
    }


def test_job_list_filters_sorts_and_pages(api: httpx.Client, srv: RunningServer) -> None:
    for i in range(8):
        team = "vision" if i % 2 else "speech"
        submit(api, srv, f"s-{i:02d}", _held(f"s-{i:02d}", f"Train Model {i}", team, f"exp-{i % 3}"))
    assert api.post(f"{srv.ws_path}/jobs/s-03/cancel").status_code == 202
    assert _names(api, srv, tag="team=vision", **{"$orderby": "name"}) == ["s-01", "s-03", "s-05", "s-07"]
    assert len(_names(api, srv, tag="stage")) == 8
    assert _names(api, srv, tag="stage=prod") == []
    assert _names(api, srv, experiment="exp-1", **{"$orderby": "name"}) == ["s-01", "s-04", "s-07"]
    # The name search is a substring of the name or the display name, in any case.
    assert _names(api, srv, search="MODEL 6") == ["s-06"]
    assert _names(api, srv, search="s-0", status="Canceled") == ["s-03"]
    assert _names(api, srv, search="s-0", type="pipeline") == []
    assert len(_names(api, srv, search="s-0", created_by=["nobody"])) == 0
    counted = _listed(api, srv, search="s-0", **{"$count": "true", "$top": 3})
    assert counted["count"] == 8 and counted["countCapped"] is False and len(counted["value"]) == 3
    # Newest first by default; each sort pages through every job once.
    newest = _names(api, srv, search="s-0")
    assert newest == [f"s-{i:02d}" for i in reversed(range(8))]
    for order in ("name asc", "name desc", "status asc", "duration desc", "compute asc", "submitted asc"):
        paged = _all_pages(api, _listed(api, srv, search="s-0", **{"$orderby": order, "$top": 3}))
        assert sorted(paged) == sorted(newest), (order, paged)
    by_status = _names(api, srv, search="s-0", **{"$orderby": "status asc"})
    assert by_status[0] == "s-03", by_status  # "Canceled" sorts before "Queued"
    # A job added between pages (after the cursor in the sort) is listed once, on a later page.
    first = _listed(api, srv, search="s-", **{"$orderby": "name asc", "$top": 3})
    assert [j["name"] for j in first["value"]] == ["s-00", "s-01", "s-02"]
    submit(api, srv, "s-99", _held("s-99", "late", "speech", "exp-0"))
    submit(api, srv, "s-", _held("s-", "before the cursor", "speech", "exp-0"))
    rest = _all_pages(api, first)
    assert rest == ["s-00", "s-01", "s-02", "s-03", "s-04", "s-05", "s-06", "s-07", "s-99"], rest


def test_job_list_refuses_what_it_cannot_read_naming_the_field(api: httpx.Client, srv: RunningServer) -> None:
    response = api.get(f"{srv.ws_path}/jobs", params={"type": "notebook"})
    assert response.status_code == 400 and error_of(response)["target"] == "type", response.text
    response = api.get(f"{srv.ws_path}/jobs", params={"tag": "=x"})
    assert response.status_code == 400 and error_of(response)["target"] == "tags", response.text
    names = _listed(api, srv, **{"$orderby": "name asc", "$top": 1})
    token = names["nextLink"].split("%24skipToken=")[1]
    response = api.get(f"{srv.ws_path}/jobs", params={"$orderby": "status asc", "$skipToken": token})
    assert response.status_code == 400 and error_of(response)["target"] == "after", response.text
    assert api.get(f"{srv.ws_path}/jobs", params={"$orderby": "cost"}).status_code == 400


def test_a_job_on_a_stopped_instance_says_so_with_its_position(api: httpx.Client, srv: RunningServer) -> None:
    submit(api, srv, "on-stopped", {"command": "echo later", "compute": f"azureml:{INSTANCE}"})
    queued = _listed(
        api, srv, compute=INSTANCE, status="Queued", include_children="false", **{"$count": "true"}
    )
    waiting = job(api, srv, "on-stopped")["waiting"]
    assert waiting["code"] == "instance_stopped", waiting
    assert "stopped" in waiting["message"], waiting
    assert waiting["position"] == queued["count"] and waiting["ahead"] == queued["count"] - 1, waiting
    assert waiting["ahead_cores"] == waiting["ahead"], waiting  # one vCPU a single-process job


def test_a_job_behind_another_on_a_busy_one_node_cluster(api: httpx.Client, srv: RunningServer) -> None:
    name = "busy-one"
    create_compute(
        api,
        srv,
        name,
        {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 1},
    )
    submit(api, srv, "holder", {"command": "sleep 120", "compute": f"azureml:{name}"})
    wait_job(api, srv, "holder", ("Running",), timeout=60)
    assert "waiting" not in job(api, srv, "holder")
    for queued in ("next-up", "behind"):
        submit(api, srv, queued, {"command": "echo done", "compute": f"azureml:{name}"})
    first, second = job(api, srv, "next-up")["waiting"], job(api, srv, "behind")["waiting"]
    assert (first["position"], first["ahead"], first["ahead_cores"]) == (1, 0, 0), first
    assert (second["position"], second["ahead"], second["ahead_cores"]) == (2, 1, 4), second
    assert second["code"] == "cluster_at_max" and "maximum of 1 node" in second["message"], second
    for done in ("holder", "next-up", "behind"):
        api.post(f"{srv.ws_path}/jobs/{done}/cancel")


def test_a_quota_held_cluster_names_the_quota(api: httpx.Client, srv: RunningServer) -> None:
    name, family = "quota-held", "standardFSv2Family"
    create_compute(
        api,
        srv,
        name,
        {"type": "amlcompute", "size": "Standard_F2s_v2", "min_instances": 0, "max_instances": 2},
    )
    assert api.put(quota_url(srv, family), json={"limit": 0}).status_code == 200
    try:
        submit(api, srv, "quota-wait", {"command": "echo ok", "compute": f"azureml:{name}"})
        waiting = job(api, srv, "quota-wait")["waiting"]
        assert waiting["code"] == "quota" and family in waiting["message"], waiting
        assert waiting["position"] == 1, waiting
    finally:
        api.put(quota_url(srv, family), json={"limit": 100})
        api.post(f"{srv.ws_path}/jobs/quota-wait/cancel")


def test_a_locked_resource_group_names_the_lock(api: httpx.Client, srv: RunningServer) -> None:
    name = "lock-held"
    create_compute(
        api,
        srv,
        name,
        {"type": "amlcompute", "size": "Standard_DS2_v2", "min_instances": 0, "max_instances": 1},
    )
    assert api.put(rg_lock_url(srv, "freeze"), json={"level": "CanNotDelete"}).status_code == 201
    try:
        submit(api, srv, "lock-wait", {"command": "echo ok", "compute": f"azureml:{name}"})
        waiting = job(api, srv, "lock-wait")["waiting"]
        assert waiting["code"] == "locked" and "freeze" in waiting["message"], waiting
    finally:
        assert api.delete(rg_lock_url(srv, "freeze")).status_code in (200, 204)
    moved = wait_until(
        lambda: (j := job(api, srv, "lock-wait"))["status"] != "Queued" or j["waiting"]["code"] != "locked",
        20,
        "the lock to stop holding the job",
    )
    assert moved
    api.post(f"{srv.ws_path}/jobs/lock-wait/cancel")
