"""The pool view under fair share (issue 31) over the real server: ``GET {ws}/computes/{name}/
fairShare``, ``cloudlet compute show``'s "Fair share" table, and the studio's Fair share tab all
show the same figures (``services/views/fair_share.pool_view``): two teams with 50/50 of a one-node
cluster, team A's job running on it, team B's queued."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.instance_helpers import new_user
from tests.jobs_helpers import create_compute, served, submit, wait_job
from tests.studio_http import home_of, sign_in, studio_client

CLUSTER = "fv-cpu"
PLAIN = "fv-plain"  # a cluster no team has a share of


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "fair-view")


@pytest.fixture(scope="module")
def pool(api: httpx.Client, srv: RunningServer) -> dict[str, Any]:
    """Team A (fv-alice) runs a job on the cluster's one node; team B (fv-bob) waits behind it."""
    body = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 1}
    create_compute(api, srv, CLUSTER, body)
    create_compute(api, srv, PLAIN, body)
    keys = {user: new_user(api, srv, user, "Contributor") for user in ("fv-alice", "fv-bob")}
    reader = new_user(api, srv, "fv-reader", "Reader")
    for team, user, borrow in (("fv-a", "fv-alice", None), ("fv-b", "fv-bob", 0)):
        share = {"workspace": "default", "compute": CLUSTER, "share": 50, "borrow_limit": borrow}
        made = api.put(f"/api/v1/teams/{team}", json={"members": [user], "shares": [share]})
        assert made.status_code == 201, made.text
    job = {"command": "sleep 600", "compute": f"azureml:{CLUSTER}"}
    with srv.client(keys["fv-alice"]) as alice:
        submit(alice, srv, "fv-a-job", job)
    wait_job(api, srv, "fv-a-job", ("Running",), timeout=120)
    with srv.client(keys["fv-bob"]) as bob:
        submit(bob, srv, "fv-b-job", job)
    return {"reader": reader}


def test_the_route_shows_each_teams_share_usage_and_queue(
    api: httpx.Client, srv: RunningServer, pool: dict[str, Any]
) -> None:
    with srv.client(pool["reader"]) as reader:  # any reader of the workspace
        answer = reader.get(f"{srv.ws_path}/computes/{CLUSTER}/fairShare")
    assert answer.status_code == 200, answer.text
    view = answer.json()
    cores = view["capacity_cores"]
    assert cores >= 1, view
    teams = {t["team"]: t for t in view["teams"]}
    assert set(teams) == {"fv-a", "fv-b"}, view
    a, b = teams["fv-a"], teams["fv-b"]
    assert a["share_percent"] == b["share_percent"] == 50.0
    assert a["entitlement_cores"] == b["entitlement_cores"] == cores / 2
    assert a["held_cores"] == cores and a["borrowed_cores"] == cores  # its one job is beyond half
    assert b["held_cores"] == 0 and b["borrowed_cores"] == 0 and b["borrow_limit"] == 0
    assert a["queued_jobs"] == 0 and b["queued_jobs"] == 1
    assert a["usage_core_hours"] > 0 and a["usage_percent"] == 100.0 and b["usage_percent"] == 0.0
    assert b["factor"] == 1.0 and 0 < a["factor"] < 0.5  # A used it all on a half share: 2^-2
    plain = api.get(f"{srv.ws_path}/computes/{PLAIN}/fairShare").json()
    assert plain == {"compute": PLAIN, "teams": []}
    assert api.get(f"{srv.ws_path}/computes/ghost/fairShare").status_code == 404


def test_compute_show_prints_the_fair_share_table(srv: RunningServer, pool: dict[str, Any]) -> None:
    def show(name: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "cloudlet", "compute", "show", "-n", name],
            env={**srv.cli_env(), "CLOUDLET_OUTPUT": "table"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    text = show(CLUSTER)
    assert "Fair share" in text and "TEAM" in text, text
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith("fv-")}
    assert set(rows) == {"fv-a", "fv-b"}, text
    assert "(50 %)" in rows["fv-a"] and "any idle" in rows["fv-a"] and "never" in rows["fv-b"], text
    assert "Fair share" not in show(PLAIN)


def test_the_studio_fair_share_tab(srv: RunningServer, pool: dict[str, Any]) -> None:
    with studio_client(srv) as client:
        assert sign_in(client, pool["reader"]).status_code == 303
        ws = str(home_of(client).url.path).rstrip("/")
        page = client.get(f"{ws}/compute/{CLUSTER}?tab=fairshare")
        assert page.status_code == 200
        assert 'id="fair-share"' in page.text and 'data-team="fv-a"' in page.text
        assert 'data-team="fv-b"' in page.text and "?tab=fairshare" in page.text
        plain = client.get(f"{ws}/compute/{PLAIN}?tab=fairshare")
        assert "?tab=fairshare" not in plain.text and 'id="fair-share"' not in plain.text
