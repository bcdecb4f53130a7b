"""Acceptance: compute instances on real nodes (issue 4, items 2–4): a node and JupyterLab per
running instance, the authenticated proxy (HTTP and WebSocket), disks and the file share.

One server and one instance (``ci1``) for the module; the tests run in file order and the later
ones stop, start, restart and delete it. Real agents, a real Jupyter server and real kernels:
nothing is mocked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.conftest import RunningServer
from tests.instance_helpers import (
    Kernel,
    act,
    app_url,
    compute_url,
    create_instance,
    delete_instance,
    live_nodes,
    make_wheel,
    new_user,
)
from tests.jobs_helpers import agent_nodes, served, wait_until

DS_FAMILY = "standardDSv2Family"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "instances")


@pytest.fixture(scope="module")
def ci1(api: httpx.Client, srv: RunningServer) -> dict[str, Any]:
    return create_instance(api, srv, "ci1")


@pytest.fixture(scope="module")
def contributor_key(api: httpx.Client, srv: RunningServer) -> str:
    return new_user(api, srv, "bob", "Contributor")


def os_disk(srv: RunningServer, name: str) -> Path:
    [disk] = (srv.home / "data" / "workspaces").glob(f"*/instances/{name}/os")
    return disk


def share_folder(srv: RunningServer, user: str = "admin") -> Path:
    [folder] = (srv.home / "data" / "workspaces").glob(f"*/share/Users/{user}")
    return folder


def usage_of(api: httpx.Client, srv: RunningServer, name: str) -> dict[str, Any]:
    lines = api.get(f"/api/v1/subscriptions/{srv.subscription_id}/locations/local/usages").json()["value"]
    family = next(line for line in lines if line["name"] == DS_FAMILY)
    holder: dict[str, Any] = next(h for h in family["holders"] if h["compute"] == name)
    return holder


# -- a node and apps per running instance -------------------------------------------------------
def test_instance_runs_on_a_node_and_show_lists_its_apps(
    api: httpx.Client, srv: RunningServer, ci1: dict[str, Any]
) -> None:
    assert ci1["state"] == "Running"
    [node] = live_nodes(api, srv, "ci1")
    assert node["state"] == "idle"
    assert node["nodeId"] in agent_nodes(srv.installation)
    services = {s["display_name"]: s["endpoint_uri"] for s in ci1["services"]}
    assert services == {
        "Jupyter Lab": f"{srv.endpoint}/instances/ci1/jupyterlab/lab",
        "Jupyter": f"{srv.endpoint}/instances/ci1/jupyterlab/tree",
        "Terminal": f"{srv.endpoint}/instances/ci1/jupyterlab/terminals/1",
    }
    shown = subprocess.run(
        [sys.executable, "-m", "cloudlet", "compute", "show", "--name", "ci1"],
        env=srv.cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["services"] == ci1["services"]
    page = httpx.get(services["Jupyter Lab"], headers={"Authorization": f"Bearer {srv.api_key}"})
    assert page.status_code == 200 and "JupyterLab" in page.text


# -- the proxy: who gets in ---------------------------------------------------------------------
def test_proxy_lets_only_the_owner_in(
    api: httpx.Client, srv: RunningServer, ci1: dict[str, Any], contributor_key: str
) -> None:
    status = app_url(srv, "ci1", "api/status")
    owner = httpx.get(status, headers={"Authorization": f"Bearer {srv.api_key}"})
    assert owner.status_code == 200, owner.text
    assert "kernels" in owner.json()
    token = api.post("/api/v1/auth/token").json()["access_token"]
    assert httpx.get(status, headers={"Authorization": f"Bearer {token}"}).status_code == 200

    other = httpx.get(status, headers={"Authorization": f"Bearer {contributor_key}"})
    assert other.status_code == 403, other.text
    assert "only the owner 'admin'" in other.json()["error"]["message"]
    assert httpx.get(status).status_code == 401
    browser = httpx.get(status, headers={"Accept": "text/html"})
    assert browser.status_code == 401 and 'action="/signin"' in browser.text
    assert httpx.get(status, headers={"Authorization": "Bearer clk_not-a-key"}).status_code == 401

    stranger = new_user(api, srv, "eve", None)  # no role on the workspace: it does not exist for her
    assert httpx.get(status, headers={"Authorization": f"Bearer {stranger}"}).status_code == 404


def test_browser_sign_in_sets_a_cookie_for_the_proxy_only(srv: RunningServer, ci1: dict[str, Any]) -> None:
    with httpx.Client(base_url=srv.endpoint) as browser:
        refused = browser.post(
            "/signin", data={"api_key": "clk_wrong", "next": "/instances/ci1/jupyterlab/lab"}
        )
        assert refused.status_code == 401 and "Sign in" in refused.text
        signed = browser.post(
            "/signin", data={"api_key": srv.api_key, "next": "/instances/ci1/jupyterlab/lab"}
        )
        assert signed.status_code == 303 and signed.headers["location"] == "/instances/ci1/jupyterlab/lab"
        cookie = signed.headers["set-cookie"]
        assert "HttpOnly" in cookie and "Path=/instances/" in cookie and "SameSite=lax" in cookie
        assert browser.get("/instances/ci1/jupyterlab/api/status").status_code == 200
        value = browser.cookies["cloudlet_signin"]
    # The cookie opens apps only: it is no API credential, and other sites cannot use it.
    assert (
        httpx.get(srv.endpoint + srv.ws_path, headers={"Authorization": f"Bearer {value}"}).status_code == 401
    )
    cross = httpx.get(
        app_url(srv, "ci1", "api/status"),
        cookies={"cloudlet_signin": value},
        headers={"Origin": "http://evil.example"},
    )
    assert cross.status_code == 403
    offsite = httpx.post(
        srv.endpoint + "/signin", data={"api_key": srv.api_key, "next": "https://evil.example/"}
    )
    assert offsite.headers["location"] == "/instances/"


def test_kernel_runs_code_over_the_proxied_websocket(
    srv: RunningServer, ci1: dict[str, Any], contributor_key: str
) -> None:
    with Kernel(srv, "ci1") as kernel:
        assert kernel.run("print(6 * 7)").strip() == "42"
        ws_url = app_url(srv, "ci1", f"api/kernels/{kernel.id}/channels").replace("http://", "ws://")
        for key, status in ((None, 401), (contributor_key, 403)):
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            with (
                pytest.raises(InvalidStatus) as refused,
                connect(ws_url, additional_headers=headers, open_timeout=10),
            ):
                pass
            assert refused.value.response.status_code == status


# -- the workspace file share and the home ---------------------------------------------------------
def test_apps_work_in_the_owners_share_folder_with_home_on_the_os_disk(
    srv: RunningServer, ci1: dict[str, Any]
) -> None:
    with Kernel(srv, "ci1") as kernel:
        out = kernel.run(
            "import os\nprint(os.getcwd(), os.environ['HOME'], os.environ['CLOUDLET_TEMP_DISK'])"
        )
    cwd, home, temp = out.split()
    assert Path(cwd) == share_folder(srv)
    assert Path(home) == os_disk(srv, "ci1")
    assert Path(temp).name == "mnt" and Path(temp) != Path(home)


def test_a_file_saved_on_one_instance_is_on_another_and_outlives_it(
    api: httpx.Client, srv: RunningServer, ci1: dict[str, Any]
) -> None:
    create_instance(api, srv, "ci2")
    owner = {"Authorization": f"Bearer {srv.api_key}"}
    body = {"type": "file", "format": "text", "content": "written on ci1\n"}
    saved = httpx.put(app_url(srv, "ci1", "api/contents/shared.txt"), json=body, headers=owner)
    assert saved.status_code in (200, 201), saved.text
    seen = httpx.get(app_url(srv, "ci2", "api/contents/shared.txt"), headers=owner)
    assert seen.status_code == 200 and seen.json()["content"] == "written on ci1\n"
    ci2_disk = os_disk(srv, "ci2")

    delete_instance(api, srv, "ci2")
    assert not ci2_disk.exists(), "delete removes the instance's OS disk"
    assert (share_folder(srv) / "shared.txt").read_text() == "written on ci1\n"
    assert api.get(compute_url(srv, "ci2")).status_code == 404


# -- stop / start / restart / delete --------------------------------------------------------------
def test_stop_releases_the_node_keeps_disk_and_quota_start_finds_them(
    api: httpx.Client, srv: RunningServer, ci1: dict[str, Any]
) -> None:
    wheel = make_wheel(share_folder(srv))  # where the instance can see it: not the host's /tmp
    with Kernel(srv, "ci1") as kernel:
        kernel.run(
            "import subprocess, sys, pathlib\n"
            f"pip = [sys.executable, '-m', 'pip', 'install', '--no-index', '-q', {str(wheel)!r}]\n"
            "subprocess.run(pip, check=True)\n"
            "pathlib.Path.home().joinpath('notes.txt').write_text('kept')\n"
        )
    [node] = live_nodes(api, srv, "ci1")
    cores = usage_of(api, srv, "ci1")["cores"]

    act(api, srv, "ci1", "stop")
    assert api.get(compute_url(srv, "ci1")).json()["state"] == "Stopped"
    assert api.get(compute_url(srv, "ci1")).json()["services"] == []
    assert live_nodes(api, srv, "ci1") == []
    wait_until(lambda: node["nodeId"] not in agent_nodes(srv.installation), 20, "the agent to exit")
    # Stopped, the OS disk is detached (unmounted; its image keeps the files for the next start).
    assert not os.path.ismount(os_disk(srv, "ci1")) and not (os_disk(srv, "ci1") / "notes.txt").exists()
    assert usage_of(api, srv, "ci1") == {
        "compute": "ci1",
        "workspace": "default",
        "cores": cores,
        "state": "Stopped",
    }
    assert (
        httpx.get(
            app_url(srv, "ci1", "api/status"), headers={"Authorization": f"Bearer {srv.api_key}"}
        ).status_code
        == 409
    )

    act(api, srv, "ci1", "start")
    [started] = live_nodes(api, srv, "ci1")
    assert started["nodeId"] != node["nodeId"]
    with Kernel(srv, "ci1") as kernel:
        out = kernel.run(
            "import cloudlet_probe, pathlib\n"
            "print(cloudlet_probe.VALUE, pathlib.Path.home().joinpath('notes.txt').read_text())"
        )
    assert out.split() == ["42", "kept"]


def test_restart_clears_the_temp_disk_and_keeps_the_os_disk(
    api: httpx.Client, srv: RunningServer, ci1: dict[str, Any]
) -> None:
    with Kernel(srv, "ci1") as kernel:
        kernel.run(
            "import os, pathlib\n"
            "pathlib.Path(os.environ['CLOUDLET_TEMP_DISK'], 'scratch.bin').write_bytes(b'x' * 1024)\n"
            "pathlib.Path.home().joinpath('before-restart.txt').write_text('home')\n"
        )
    act(api, srv, "ci1", "restart")
    assert api.get(compute_url(srv, "ci1")).json()["state"] == "Running"
    with Kernel(srv, "ci1") as kernel:
        out = kernel.run(
            "import os, pathlib\n"
            "print(sorted(os.listdir(os.environ['CLOUDLET_TEMP_DISK'])))\n"
            "print(pathlib.Path.home().joinpath('before-restart.txt').read_text())\n"
        )
    assert out.split("\n")[:2] == ["[]", "home"]


def test_delete_terminates_the_node_and_removes_the_os_disk(
    api: httpx.Client, srv: RunningServer, ci1: dict[str, Any]
) -> None:
    [node] = live_nodes(api, srv, "ci1")
    disk = os_disk(srv, "ci1")
    delete_instance(api, srv, "ci1")
    assert not disk.exists()
    wait_until(lambda: node["nodeId"] not in agent_nodes(srv.installation), 20, "the agent to exit")
    assert (share_folder(srv) / "shared.txt").exists(), "the file share outlives every instance"


def test_instance_names_are_unique_across_workspaces(api: httpx.Client, srv: RunningServer) -> None:
    """The URL /instances/<name>/ names no workspace, so neither may two instances."""
    create_instance(api, srv, "named1")
    other = srv.workspace_path("second")
    assert api.put(other, json={"location": "local"}).status_code in (200, 201)
    refused = api.put(f"{other}/computes/named1", json={"type": "computeinstance", "size": "Standard_DS3_v2"})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "InstanceNameTaken"
    delete_instance(api, srv, "named1")
    assert os.path.isdir(srv.home / "data")
