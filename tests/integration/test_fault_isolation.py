"""One bad row must not stop the fleet (issue 10, defect 4).

A location whose stored capacity is not a finite number (as a store written before the API
bounded its numbers could hold) used to make every cluster pass raise, and the pass stopped at the
first failing cluster, so unrelated clusters and serverless jobs waited forever. Now the failing
cluster carries the error on its own status and every other cluster and serverless job goes on;
fixing the row clears the error. Real server, real store, real agents.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.jobs_helpers import compute, create_compute, served, submit, wait_job, wait_until


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "faults")


def _errors(api: httpx.Client, srv: RunningServer, name: str) -> list[dict[str, Any]]:
    return list(compute(api, srv, name).get("provisioning_errors") or [])


def test_a_poisoned_location_stops_only_its_own_cluster(api: httpx.Client, srv: RunningServer) -> None:
    assert api.put("/api/v1/locations/poison", json={"capacity": {"vcpus": 64}}).status_code == 201
    cluster = {"type": "amlcompute", "size": "Standard_DS3_v2", "max_instances": 1}
    create_compute(api, srv, "doomed", {**cluster, "location": "poison"})
    create_compute(api, srv, "healthy", cluster)
    with sqlite3.connect(srv.home / "cloudlet.db", timeout=30) as db:  # a row from before the bounds
        db.execute("UPDATE locations SET capacity = '{\"vcpus\": 1e999}' WHERE name = 'poison'")
    submit(api, srv, "on-doomed", {"command": "true", "compute": "azureml:doomed"})
    submit(api, srv, "on-healthy", {"command": "echo fine", "compute": "azureml:healthy"})
    submit(
        api,
        srv,
        "serverless",
        {"command": "echo serverless", "resources": {"instance_type": "Standard_DS3_v2"}},
    )
    wait_job(api, srv, "on-healthy", ("Completed",), timeout=90)
    wait_job(api, srv, "serverless", ("Completed",), timeout=90)
    errors = wait_until(lambda: _errors(api, srv, "doomed"), 30, "the error on the doomed cluster")
    assert errors[0]["code"] == "ReconcileFailed"
    assert "could not reconcile this cluster" in errors[0]["message"]
    assert "Error" in errors[0]["message"]  # the exception's kind, for whoever mends it
    assert not _errors(api, srv, "healthy")
    events = api.get("/api/v1/audit", params={"action": "compute.reconcileFailed"}).json()["value"]
    assert [e["target"].rsplit("/", 1)[-1] for e in events] == ["doomed"], events  # once, not every pass
    assert events[0]["actor"] == "system:autoscaler" and events[0]["details"]["code"] == "ReconcileFailed"
    assert api.get(f"{srv.ws_path}/jobs/on-doomed").json()["status"] == "Queued"
    # Mended: the error goes and the job runs.
    with sqlite3.connect(srv.home / "cloudlet.db", timeout=30) as db:
        db.execute("UPDATE locations SET capacity = '{\"vcpus\": 64}' WHERE name = 'poison'")
    wait_job(api, srv, "on-doomed", ("Completed",), timeout=90)
    wait_until(lambda: not _errors(api, srv, "doomed") or None, 30, "the error to clear")
