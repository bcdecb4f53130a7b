"""Every write the studio serves, posted by a Reader (the audit of issues 27 and 28): "what a role
may not do has no button, and the server refuses it anyway". The page tests each post a few forms
by hand; this one posts to every POST route of the studio (read from the app, so a new one without
a case here fails), with the Reader's own session and CSRF token, a complete form and things that
exist. Each is a 403 (another user's keys: 404, as on the REST API), and nothing changed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cloudlet.studio import app as studio_app
from tests.conftest import RunningServer
from tests.instance_helpers import new_user
from tests.jobs_helpers import create_compute, served, submit
from tests.studio_http import csrf_of, home_of, sign_in, studio_client

JOB_YAML = "command: echo hi\ncompute: local\n"
# (route path as the app declares it, the path posted under the workspace, its form or raw bytes)
CASES: list[tuple[str, str, dict[str, str] | bytes]] = [
    ("/jobs/_new", "jobs/_new", {"yaml": JOB_YAML, "name": "rw-new"}),
    ("/jobs/_new/code", "jobs/_new/code", b"not an archive"),
    ("/jobs/{name}/clone", "jobs/rw-job/clone", {"yaml": JOB_YAML, "name": "rw-clone"}),
    ("/jobs/cancel", "jobs/cancel", {"name": "rw-job"}),
    ("/jobs/{name}/cancel", "jobs/rw-job/cancel", {}),
    ("/jobs/{name}/resubmit", "jobs/rw-job/resubmit", {}),
    (
        "/compute/_new",
        "compute/_new",
        {
            "type": "amlcompute",
            "name": "rw-new-cpu",
            "size": "Standard_DS3_v2",
            "location": "local",
            "tier": "dedicated",
            "min_instances": "0",
            "max_instances": "1",
            "idle_time_before_scale_down": "120",
        },
    ),
    (
        "/compute/_yaml",
        "compute/_yaml",
        {"yaml": "name: rw-yaml-cpu\ntype: amlcompute\nsize: Standard_DS3_v2\n"},
    ),
    (
        "/compute/{name}/scale",
        "compute/rw-cpu/scale",
        {"min_instances": "0", "max_instances": "2", "idle_time_before_scale_down": "300"},
    ),
    ("/compute/{name}/{action}", "compute/rw-cpu/delete", {}),
    ("/quota", "quota", {"location": "local", "name": "standardDSv2Family", "limit": "1000"}),
    ("/endpoints/_new", "endpoints/_new", {"mode": "form", "name": "rw-new-ep", "auth_mode": "key"}),
    (
        "/endpoints/{name}/deployments/_new",
        "endpoints/rw-ep/deployments/_new",
        {
            "yaml": "name: blue\nmodel: azureml:rw-model:1\n"
            "instance_type: Standard_DS3_v2\ninstance_count: 1\n"
        },
    ),
    ("/endpoints/{name}/keys", "endpoints/rw-ep/keys", {}),
    ("/endpoints/{name}/regenerate", "endpoints/rw-ep/regenerate", {"key_type": "Primary"}),
    ("/endpoints/{name}/test", "endpoints/rw-ep/test", {"body": '{"data": 1}'}),
    ("/endpoints/{name}/traffic", "endpoints/rw-ep/traffic", {}),
    ("/endpoints/{name}/delete", "endpoints/rw-ep/delete", {}),
    ("/endpoints/{name}/deployments/{deployment}/delete", "endpoints/rw-ep/deployments/blue/delete", {}),
    ("/batch-endpoints/_new", "batch-endpoints/_new", {"yaml": "name: rw-new-batch\n"}),
    (
        "/batch-endpoints/{name}/deployments",
        "batch-endpoints/rw-batch/deployments",
        {"yaml": "name: blue\nmodel: azureml:rw-model:1\ncompute: azureml:rw-cpu\n"},
    ),
    ("/batch-endpoints/{name}/upload", "batch-endpoints/rw-batch/upload?folder=rows", b"not an archive"),
    (
        "/batch-endpoints/{name}/invoke",
        "batch-endpoints/rw-batch/invoke",
        {"source": "asset", "data_asset": "azureml:rw-data:1"},
    ),
    *(
        case
        for kind, name, form in (
            (
                "data",
                "rw-data",
                {"type": "uri_folder", "source": "job", "job": "rw-job", "output": "default"},
            ),
            (
                "models",
                "rw-model",
                {"type": "custom_model", "source": "job", "job": "rw-job", "output": "default"},
            ),
            ("environments", "rw-env", {"yaml": "image: python:3.11-slim\n"}),
            (
                "components",
                "rw_component",
                {"yaml": "type: command\ncommand: echo\nenvironment: azureml:rw-env:1\n"},
            ),
        )
        for case in (
            (f"/{kind}/_new", f"{kind}/_new", {**form, "name": name}),
            (f"/{kind}/_upload", f"{kind}/_upload?batch=b1&path=a.txt", b"bytes"),
            (f"/{kind}/{{name}}/{{version}}/{{action}}", f"{kind}/{name}/1/archive", {}),
        )
        if kind in ("data", "models") or not case[0].endswith("/_upload")
    ),
    ("/admin/users", "admin/users", {"name": "rw-made"}),
    ("/admin/users/enabled", "admin/users/enabled", {"name": "rw-other", "enabled": "false"}),
    ("/admin/keys/{action}", "admin/keys/create", {"user": "rw-other"}),
    ("/admin/roles", "admin/roles", {"principal": "rw-other", "role": "Owner"}),
    ("/admin/roles/remove", "admin/roles/remove", {"principal": "rw-other"}),
    ("/admin/places/sizes", "admin/places/sizes", {"name": "Site_RW_1", "vcpus": "1", "memory_gb": "1"}),
    ("/admin/locks", "admin/locks", {"name": "rw-new-lock", "level": "CanNotDelete"}),
    ("/admin/locks/remove", "admin/locks/remove", {"name": "rw-lock"}),
    (
        "/admin/teams",
        "admin/teams",
        {"name": "rw-team", "members": "rw-other", "pool_0": "location:local", "share_0": "1"},
    ),
    ("/admin/teams/_yaml", "admin/teams/_yaml", {"yaml": "name: rw-new-team\nmembers: [rw-other]\n"}),
    ("/admin/teams/_delete", "admin/teams/_delete", {"name": "rw-team"}),
]
NOT_WRITES = {"/signin", "/signout", "/{rest:path}"}  # the session's own, and the catch-all 404
# Refused, but not by the studio's route: its POST only hands the caller's own sign-in cookie to
# the instance proxy, which lets the owner alone through (the Reader's 403 there is in
# tests/browser/test_studio_journey.py).
REFUSED_BY_THE_PROXY = {"/compute/{name}/open/{app}"}
# Another user's keys are not found for a caller who is not an administrator (as on the REST API).
STATUS = {"admin/keys/create": 404}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "studio-reader-writes")


@pytest.fixture(scope="module")
def reader(srv: RunningServer) -> Iterator[tuple[httpx.Client, str, str]]:
    """The things the cases name (a running job, a cluster, endpoints, a version of each asset
    kind, another user with a role, a lock), then a Reader's studio client, workspace path and
    CSRF token."""
    with srv.client() as api:
        create_compute(
            api, srv, "rw-cpu", {"type": "amlcompute", "size": "Standard_DS3_v2", "max_instances": 1}
        )
        submit(api, srv, "rw-job", {"command": "sleep 600", "compute": "local"})
        for kind, name, body in (
            ("data", "rw-data", {"type": "uri_file", "path": "https://example.com/rows.csv"}),
            ("models", "rw-model", {"type": "custom_model", "path": "https://example.com/model.pkl"}),
            ("environments", "rw-env", {"image": "python:3.11-slim"}),
            (
                "components",
                "rw_component",
                {"type": "command", "command": "echo", "environment": "azureml:rw-env:1"},
            ),
        ):
            made = api.post(f"{srv.ws_path}/{kind}/{name}/versions", json=body)
            assert made.status_code == 201, (kind, made.text)
        for path, body in (
            ("onlineEndpoints/rw-ep", {"auth_mode": "key"}),
            ("batchEndpoints/rw-batch", {"name": "rw-batch"}),
            ("locks/rw-lock", {"level": "CanNotDelete"}),
        ):
            made = api.put(f"{srv.ws_path}/{path}", json=body)
            assert made.status_code in (200, 201, 202), (path, made.text)
        new_user(api, srv, "rw-other", "Contributor")
        team = {"shares": [{"location": "local", "share": 2}]}
        assert api.put("/api/v1/teams/rw-team", json=team).status_code == 201
        key = new_user(api, srv, "rw-reader", "Reader")
    with studio_client(srv) as client:
        assert sign_in(client, key).status_code == 303
        home = home_of(client)
        yield client, str(home.url.path), csrf_of(home)


def _flat(routes: list[Any]) -> Iterator[Any]:
    """ROUTES with those of each included router (kept as one entry that holds its own)."""
    for route in routes:
        included = getattr(route, "original_router", None)
        yield from _flat(included.routes) if included is not None else (route,)


def test_every_studio_write_is_in_the_cases() -> None:
    """A POST route the studio adds without a case here fails."""
    routes = [*studio_app.public.routes, *studio_app.router.routes]
    routes += [route for page in (*studio_app.PAGES, *studio_app.SUBPAGES) for route in page.router.routes]
    declared = {
        route.path.removeprefix("/studio").split("/ws/{sub}/{rg}/{ws}", 1)[-1]
        for route in _flat(routes)
        if "POST" in getattr(route, "methods", ())
    }
    assert declared - NOT_WRITES - REFUSED_BY_THE_PROXY == {case[0] for case in CASES}


@pytest.mark.parametrize(("route", "path", "form"), CASES, ids=[c[1] for c in CASES])
def test_a_reader_is_refused_every_write(
    reader: tuple[httpx.Client, str, str], route: str, path: str, form: dict[str, str] | bytes
) -> None:
    client, ws, csrf = reader
    url = ws.rstrip("/") + "/" + path
    if isinstance(form, bytes):
        answer = client.post(url, content=form, headers={"X-CSRF-Token": csrf})
    else:
        answer = client.post(url, data={"csrf_token": csrf, **form})
    assert answer.status_code == STATUS.get(path, 403), (route, answer.status_code, answer.text[:300])


def test_nothing_the_reader_posted_changed_anything(
    srv: RunningServer, reader: tuple[httpx.Client, str, str]
) -> None:
    with srv.client() as api:
        ws = srv.ws_path
        assert api.get(f"{ws}/jobs/rw-job").json()["status"] not in ("Canceled", "CancelRequested")
        names = {j["name"] for j in api.get(f"{ws}/jobs").json()["value"]}
        assert names == {"rw-job"}, names
        shown: dict[str, Any] = api.get(f"{ws}/computes/rw-cpu").json()
        assert shown["max_instances"] == 1, shown
        assert api.get(f"{ws}/computes/rw-new-cpu").status_code == 404
        assert api.get(f"{ws}/onlineEndpoints/rw-ep").status_code == 200
        assert api.get(f"{ws}/onlineEndpoints/rw-new-ep").status_code == 404
        assert api.get(f"{ws}/batchEndpoints/rw-batch/deployments").json()["value"] == []
        assert api.get(f"{ws}/batchEndpoints/rw-batch/jobs").json()["value"] == []
        for kind, name in (("data", "rw-data"), ("models", "rw-model"), ("environments", "rw-env")):
            version = api.get(f"{ws}/{kind}/{name}/versions/1").json()
            assert version.get("is_archived") in (False, None), version
        assert [lock["name"] for lock in api.get(f"{ws}/locks").json()["value"]] == ["rw-lock"]
        assert len(api.get("/api/v1/principals/rw-other/keys").json()["value"]) == 1
        roles = {a["principal"]: a["role"] for a in api.get(f"{ws}/roleAssignments").json()["value"]}
        assert roles["rw-other"] == "Contributor" and roles["rw-reader"] == "Reader", roles
        users = {p["name"]: p for p in api.get("/api/v1/principals").json()["value"]}
        assert "rw-made" not in users and users["rw-other"]["enabled"] is True, users
        teams = api.get("/api/v1/teams").json()["value"]
        assert [(t["name"], t["members"], t["shares"][0]["share"]) for t in teams] == [("rw-team", [], 2)]
