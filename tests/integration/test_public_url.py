"""``cloudlet server --public-url`` (``CLOUDLET_PUBLIC_URL``): every absolute link the server hands
out is built on the address people reach it at, not on the address it is bound to, from every
worker of ``--workers 2``; a bad value stops the start with a message; listening on every address
without one says, once, what the links will name. Real servers over HTTP, the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography import x509

from tests.conftest import RunningServer, server_env, start_server
from tests.instance_helpers import compute_url, create_instance
from tests.integration.test_arm_jobs_api import arm_body, arm_jobs_path
from tests.integration.test_arm_sdk import arm_ws
from tests.integration.test_arm_sdk import tls as msi_tls
from tests.jobs_helpers import reaped, wait_until

PUBLIC = "https://cloudlet.example.com:9443"  # a TLS terminator in front of the server


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Two workers behind one public URL, given with a trailing slash (normalised away)."""
    home = Path(tmp_path_factory.mktemp("public-url"))
    server = start_server(home, workers="2", args=["--public-url", PUBLIC + "/"])
    with reaped(server):
        yield server


def test_a_jobs_studio_link_is_on_the_public_url_from_every_worker(srv: RunningServer) -> None:
    page = f"{PUBLIC}/studio/ws/{srv.subscription_id}/default/default/jobs/pub-1?tab=overview"
    with srv.client() as api:
        made = api.put(f"{srv.ws_path}/jobs/pub-1", json={"command": "echo public", "compute": "local"})
        assert made.status_code == 201, made.text
        assert made.json()["services"]["Studio"]["endpoint"] == page
        arm = api.put(f"{arm_jobs_path(srv)}/pub-arm", json=arm_body("echo arm"))  # what the SDK reads
        assert arm.status_code == 201, arm.text
        assert arm.json()["properties"]["services"]["Studio"]["endpoint"] == page.replace("pub-1", "pub-arm")
    seen = set()
    for _ in range(12):  # a new connection each time: either worker may take it
        view = httpx.get(
            f"{srv.endpoint}{srv.ws_path}/jobs/pub-1", headers={"Authorization": f"Bearer {srv.api_key}"}
        ).json()
        seen.add(view["services"]["Studio"]["endpoint"])
    assert seen == {page}
    log = srv.log_path.read_text()
    started = [line for line in log.splitlines() if " serving on " in line]
    assert len(started) == 2 and all(f"links on {PUBLIC};" in line for line in started), log


def test_the_clis_sign_in_link_is_on_the_public_url(srv: RunningServer) -> None:
    opened = subprocess.run(
        [sys.executable, "-m", "cloudlet", "studio", "open", "--no-browser"],
        env=srv.cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout.strip().startswith(f"{PUBLIC}/studio/link/"), opened.stdout


def test_an_online_endpoints_scoring_uri_is_on_the_public_url(srv: RunningServer) -> None:
    with srv.client() as api:
        made = api.put(f"{srv.ws_path}/onlineEndpoints/pub-ep", json={"auth_mode": "key"})
        assert made.status_code in (200, 201), made.text
        shown = api.get(f"{srv.ws_path}/onlineEndpoints/pub-ep").json()
    assert shown["scoring_uri"].startswith(f"{PUBLIC}/"), shown


def test_the_tls_certificate_names_the_public_host(srv: RunningServer) -> None:
    cert = x509.load_pem_x509_certificate(Path(srv.home, "tls", "server.pem").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "cloudlet.example.com" in names.get_values_for_type(x509.DNSName)


def test_an_sdk_reaching_the_facade_by_the_public_host_gets_tokens_it_may_use(srv: RunningServer) -> None:
    """The facade's listener stays where it is bound; by the public host (which its certificate
    names) it is a resource-manager URL the server issues and accepts tokens for."""
    port = srv.https_url.rsplit(":", 1)[1]
    resource = f"https://cloudlet.example.com:{port}"
    with msi_tls(srv) as client:
        issued = client.get(
            "/msi/token",
            params={"api-version": "2019-08-01", "resource": resource},
            headers={"X-IDENTITY-HEADER": srv.api_key},
        )
        assert issued.status_code == 200, issued.text
        token = issued.json()["access_token"]
        used = client.get(arm_ws(srv), headers={"Authorization": f"Bearer {token}"})
        assert used.status_code == 200, used.text


def test_an_instances_app_links_are_on_the_public_url(srv: RunningServer) -> None:
    with srv.client() as api:
        shown = create_instance(api, srv, "pubci")
        assert shown["state"] == "Running", shown
        services = {s["display_name"]: s["endpoint_uri"] for s in shown["services"]}
        assert services["Jupyter Lab"] == f"{PUBLIC}/instances/pubci/jupyterlab/lab", services
        assert all(url.startswith(f"{PUBLIC}/instances/pubci/") for url in services.values())
        again = api.get(compute_url(srv, "pubci")).json()
        assert again["services"] == shown["services"]


# -- refused values, and the warning without one ---------------------------------------------------
@pytest.mark.parametrize(
    ("given", "why"),
    [
        (["--public-url", "ftp://cloudlet.example.com"], "not an http:// or https:// URL"),
        (["--public-url", "https://"], "names no host"),
        (["--public-url", "https://cloudlet.example.com/ml?x=1"], "query or fragment"),
        (["--public-url", "https://cloudlet.example.com/ml"], "path prefix"),
        (["--public-url", "cloudlet.example.com"], "not an http:// or https:// URL"),
        ([], "not an http:// or https:// URL"),  # CLOUDLET_PUBLIC_URL, below
    ],
)
def test_a_bad_public_url_stops_the_start_naming_the_setting(
    tmp_path: Path, given: list[str], why: str
) -> None:
    env = server_env(tmp_path / "home", None)
    if not given:
        env["CLOUDLET_PUBLIC_URL"] = "cloudlet.example.com:8571"
    started = subprocess.run(
        [sys.executable, "-m", "cloudlet", "server", "--home", str(tmp_path / "home"), "--port", "0", *given],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode != 0
    setting = "--public-url" if given else "CLOUDLET_PUBLIC_URL"
    assert f"{setting}: " in started.stderr and why in started.stderr, started.stderr
    assert "e.g. --public-url https://" in started.stderr, started.stderr
    assert not (tmp_path / "home" / "config.json").exists()  # refused before anything started


def test_listening_on_every_address_without_a_public_url_warns_once(tmp_path: Path) -> None:
    server = start_server(tmp_path / "home", host="0.0.0.0", workers="2")
    with reaped(server):
        endpoint = json.loads((server.home / "config.json").read_text())["endpoint"]
        log = wait_until(
            lambda: server.log_path.read_text().count("worker 1 started") and server.log_path.read_text(),
            30,
            "workers",
        )
        warnings = [line for line in log.splitlines() if "with no public URL" in line]
        assert len(warnings) == 1, log
        assert f"will name {endpoint}" in warnings[0] and "--public-url" in warnings[0]
        assert "CLOUDLET_PUBLIC_URL" in warnings[0]
        with server.client() as api:  # today's behaviour otherwise: links on the bind address
            made = api.put(f"{server.ws_path}/jobs/bound", json={"command": "true", "compute": "local"})
            assert made.json()["services"]["Studio"]["endpoint"].startswith(f"{endpoint}/studio/")
