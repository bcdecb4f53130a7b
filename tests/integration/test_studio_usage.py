"""Usage and cost over real HTTP (issue 28 item 6): a cluster scales from zero to run a user's job
and back down after its idle time; the usage page and its CSV show node-hours and cost for that
compute and that user, and idle node-hours (the tail before scale-down) for the cluster's creator;
a serverless job's node is its submitter's.
A Reader reads the page and the CSV. (Disk-hours of stopped instances: tests/unit/test_usage_ledger.py.)"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import RunningServer
from tests.instance_helpers import new_user
from tests.jobs_helpers import compute, create_compute, served, submit, wait_job, wait_until
from tests.studio_http import home_of, sign_in, studio_client

IDLE_S = 3


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "studio-usage")


def _rows(client: httpx.Client, ws: str) -> list[dict[str, str]]:
    response = client.get(f"{ws}usage.csv", params={"days": 7})
    assert response.status_code == 200, response.text[:2000]
    assert response.headers["content-type"].startswith("text/csv")
    assert "attachment" in response.headers["content-disposition"]
    return list(csv.DictReader(io.StringIO(response.text)))


def test_a_cluster_that_ran_a_job_and_scaled_down_shows_node_hours_idle_hours_and_cost(
    srv: RunningServer,
) -> None:
    with srv.client() as api:
        admin = api.get("/api/v1/whoami").json()["principal"]
        uma_key = new_user(api, srv, "uma", "Contributor")
        cluster = {
            "type": "amlcompute",
            "size": "Standard_DS3_v2",
            "min_instances": 0,
            "max_instances": 1,
            "idle_time_before_scale_down": IDLE_S,
        }
        create_compute(api, srv, "use-cpu", cluster)
    with srv.client(uma_key) as uma:
        submit(uma, srv, "use-job", {"command": "echo hi; sleep 2", "compute": "azureml:use-cpu"})
        # A serverless job: its node is made for it, and its hours are hers, under "serverless".
        serverless = {
            "command": "sleep 1",
            "resources": {"instance_type": "Standard_DS3_v2", "instance_count": 1},
        }
        submit(uma, srv, "use-serverless", serverless)
        assert wait_job(uma, srv, "use-job", timeout=120)["status"] == "Completed"
        assert wait_job(uma, srv, "use-serverless", timeout=120)["status"] == "Completed"
    with srv.client() as api:
        wait_until(lambda: compute(api, srv, "use-cpu")["current_node_count"] == 0, 90, "the scale-down to 0")

        reader_key = new_user(api, srv, "rex", "Reader")
    with studio_client(srv) as client:
        assert sign_in(client, reader_key).status_code == 303
        ws = str(home_of(client).url.path)
        rows = _rows(client, ws)
        page = client.get(f"{ws}usage", params={"days": 7, "by": "user"})
        assert page.status_code == 200 and 'id="usage-chart"' in page.text
        assert 'data-name="uma"' in page.text

    assert any(
        r["compute"] == "serverless" and r["user"] == "uma" and float(r["node_hours"]) > 0 for r in rows
    )
    mine = [r for r in rows if r["compute"] == "use-cpu"]
    uma_rows = [r for r in mine if r["user"] == "uma"]
    creator_rows = [r for r in mine if r["user"] == admin]
    assert sum(float(r["node_hours"]) for r in uma_rows) > 0
    assert sum(float(r["cost_usd"]) for r in uma_rows) > 0
    assert all(float(r["idle_node_hours"]) == 0 for r in uma_rows)  # her job's time is busy time
    idle = sum(float(r["idle_node_hours"]) for r in creator_rows)
    # The node's idle tail before scale-down (at least the idle time, in hours) is the creator's.
    assert idle >= IDLE_S / 3600 * 0.9, creator_rows
    # Nothing is counted after the node ended: read again later, the totals stand.
    again = wait_until(lambda: _admin_rows(srv), 10, "the CSV again")
    assert sum(float(r["node_hours"]) for r in again if r["compute"] == "use-cpu") == pytest.approx(
        sum(float(r["node_hours"]) for r in mine), abs=1e-5
    )


def _admin_rows(srv: RunningServer) -> list[dict[str, str]]:
    with studio_client(srv) as client:
        assert sign_in(client, srv.api_key).status_code == 303
        return _rows(client, str(home_of(client).url.path))
