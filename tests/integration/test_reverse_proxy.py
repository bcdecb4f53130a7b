"""cloudlet behind a real TLS-terminating reverse proxy (HAProxy), as teams run a shared server:
HTTPS with a certificate the client trusts on the proxy, plain HTTP from the proxy to the server,
``X-Forwarded-Proto: https`` and ``X-Forwarded-For`` set by the proxy, the server started with
``--public-url`` (the proxy's address) and ``--forwarded-allow-ips`` (the proxy's), two workers.

The proxy dials the server from 127.0.0.3, as a proxy on another host would from its own
address: loopback's 127.0.0.1, which the server trusts by default, would hide whether the option
reaches every worker. The test's browser reaches the proxy from 127.0.0.4, and a stranger dials
the server directly from 127.0.0.2 with forged forwarded headers, which change nothing.

Through the proxy: a studio sign-in link then a page, a cookie marked ``Secure``, a form POST
past the CSRF and same-origin checks, the events feed's server-sent events arriving promptly
(not buffered), a REST call with a token, an upload of a few MiB, and a running instance's
JupyterLab kernel over the proxied WebSocket. Real HAProxy, real servers, real agents."""

from __future__ import annotations

import io
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from bench._haproxy import binary as haproxy_binary
from websockets.sync.client import connect

from cloudlet import tls
from tests.conftest import RunningServer, server_env, start_server
from tests.instance_helpers import _execute_request, create_instance
from tests.jobs_helpers import reaped, wait_until
from tests.studio_http import COOKIE, csrf_of, events, home_of

PROXY_SOURCE = "127.0.0.3"  # where the proxy dials the server from (trusted: --forwarded-allow-ips)
BROWSER = "127.0.0.4"  # where the test's client dials the proxy from
STRANGER = "127.0.0.2"  # a client that dials the server itself, not trusted

pytestmark = pytest.mark.skipif(
    haproxy_binary() is None, reason="haproxy is not installed (scripts/setup-tests.sh installs it)"
)


@dataclass
class Proxied:
    srv: RunningServer
    url: str  # https://127.0.0.1:<proxy port>: the public URL
    ca: str  # the CA that signed the proxy's certificate

    def client(self, token: str | None = None, headers: dict[str, str] | None = None) -> httpx.Client:
        """A client of the proxy from BROWSER, trusting its certificate (no redirect followed)."""
        transport = httpx.HTTPTransport(verify=self.context(), local_address=BROWSER)
        sent = {**({"Authorization": f"Bearer {token}"} if token else {}), **(headers or {})}
        return httpx.Client(base_url=self.url, transport=transport, headers=sent, timeout=30)

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def haproxy_config(port: int, pem: Path, server_port: int) -> str:
    """What docs/studio.md ("Behind a reverse proxy") shows, on test addresses (and a switch
    for one test)."""
    return f"""global
    maxconn 256
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout tunnel 1h
frontend public
    bind 127.0.0.1:{port} ssl crt {pem}
    http-request set-header X-Forwarded-Proto https
    http-request set-header X-Forwarded-For %[src]
    # For one test: the Host nginx passes on by default (the upstream's address, not the browser's).
    acl upstream_host req.hdr(x-test-upstream-host) -m found
    http-request set-header Host 127.0.0.1:{server_port} if upstream_host
    default_backend cloudlet
backend cloudlet
    server cloudlet 127.0.0.1:{server_port} source {PROXY_SOURCE}
"""


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    root = Path(tmp_path_factory.mktemp("reverse-proxy"))
    port = free_port()
    public = f"https://127.0.0.1:{port}"
    server = start_server(
        root / "home",
        workers="2",
        args=["--public-url", public, "--forwarded-allow-ips", PROXY_SOURCE],
        extra_env={"CLOUDLET_ACCESS_LOG": "1", "CLOUDLET_EVENTS_HEARTBEAT_S": "1"},
    )
    with reaped(server):
        # The proxy's own certificate (not the server's): a CA the test client trusts.
        (root / "proxy").mkdir()
        files = tls.ensure(root / "proxy", ["127.0.0.1"], "reverse-proxy-test")
        pem = root / "proxy" / "haproxy.pem"
        pem.write_bytes(files.cert.read_bytes() + files.key.read_bytes())
        config = root / "proxy" / "haproxy.cfg"
        config.write_text(haproxy_config(port, pem, server.port))
        exe = str(haproxy_binary())
        checked = subprocess.run([exe, "-c", "-f", str(config)], capture_output=True, text=True, timeout=30)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        with open(root / "proxy" / "haproxy.log", "wb") as log:
            proc = subprocess.Popen(
                [exe, "-db", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            proxy = Proxied(server, public, str(files.ca))
            with proxy.client() as probe:
                wait_until(lambda: _answers(probe), 30, "haproxy listening")
            yield proxy
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def _answers(client: httpx.Client) -> bool:
    try:
        return client.get("/healthz").status_code == 200
    except httpx.TransportError:
        return False


def _set_cookie(response: httpx.Response) -> str:
    [line] = [v for v in response.headers.get_list("set-cookie") if v.startswith(f"{COOKIE}=")]
    return line


# -- the studio ---------------------------------------------------------------------------------------
def test_a_sign_in_link_opens_a_page_with_a_secure_cookie(proxied: Proxied) -> None:
    opened = subprocess.run(
        [sys.executable, "-m", "cloudlet", "studio", "open", "--no-browser"],
        env=proxied.srv.cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    link = opened.stdout.strip().splitlines()[-1]
    assert link.startswith(f"{proxied.url}/studio/link/"), opened.stdout
    with proxied.client() as browser:
        followed = browser.get(link[len(proxied.url) :])
        assert followed.status_code == 200, followed.text
        flags = [part.strip().lower() for part in _set_cookie(followed).split(";")]
        assert "secure" in flags and "httponly" in flags, flags
        home = home_of(browser)
        assert home.status_code == 200 and "Recent jobs" in home.text


def test_a_form_post_passes_the_csrf_and_same_origin_checks(proxied: Proxied) -> None:
    with proxied.client() as browser:
        signed = browser.post(
            "/studio/signin",
            data={"api_key": proxied.srv.api_key, "next": "/studio/"},
            headers={"Origin": proxied.url},
        )
        assert signed.status_code == 303, signed.text
        assert "secure" in [p.strip().lower() for p in _set_cookie(signed).split(";")]
        token = csrf_of(home_of(browser))
        foreign = browser.post(
            "/studio/signout", data={"csrf_token": token}, headers={"Origin": "https://elsewhere.example"}
        )
        assert foreign.status_code == 403  # the check still runs: only the proxy's origin is the studio's
        out = browser.post("/studio/signout", data={"csrf_token": token}, headers={"Origin": proxied.url})
        assert out.status_code == 303 and out.headers["location"] == "/studio/signin", out.text


def test_the_public_urls_origin_is_the_studios_whatever_host_the_proxy_passes_on(proxied: Proxied) -> None:
    """A proxy that passes on the upstream's address as Host (nginx's default): the page's origin,
    the public URL, is still the studio's own, for studio forms and for an instance's apps."""
    upstream = {"X-Test-Upstream-Host": "1"}
    with proxied.client(headers=upstream) as browser:
        signed = browser.post(
            "/studio/signin",
            data={"api_key": proxied.srv.api_key, "next": "/studio/"},
            headers={"Origin": proxied.url},
        )
        assert signed.status_code == 303, signed.text
        token = csrf_of(home_of(browser))
        foreign = browser.post(
            "/studio/signout", data={"csrf_token": token}, headers={"Origin": "https://elsewhere.example"}
        )
        assert foreign.status_code == 403
        out = browser.post("/studio/signout", data={"csrf_token": token}, headers={"Origin": proxied.url})
        assert out.status_code == 303 and out.headers["location"] == "/studio/signin", out.text


def test_a_jobs_log_streams_to_its_studio_page_as_it_is_written(proxied: Proxied) -> None:
    """The job page's server-sent events (the log's new bytes) arrive as the job writes them, not
    all at once when the stream ends (as through a buffering proxy)."""
    srv = proxied.srv
    name = f"ticks-{uuid.uuid4().hex[:6]}"
    job = {"command": "for i in 1 2 3 4 5 6 7 8; do echo tick-$i; sleep 1; done", "compute": "local"}
    with proxied.client(srv.api_key) as api:
        assert api.put(f"{srv.ws_path}/jobs/{name}", json=job).status_code == 201
    page = f"/studio/ws/{srv.subscription_id}/default/default/jobs/{name}/live"
    seen: dict[str, float] = {}  # tick → when it arrived
    with proxied.client() as browser:
        signed = browser.post("/studio/signin", data={"api_key": srv.api_key, "next": "/studio/"})
        assert signed.status_code == 303, signed.text
        params = {"file": "user_logs/std_log.txt"}
        with browser.stream("GET", page, params=params, timeout=httpx.Timeout(10, read=60)) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            for kind, _, data in events(response):
                if kind == "log":
                    for tick in re.findall(r"tick-\d", json.loads(data)["text"]):
                        seen.setdefault(tick, time.monotonic())
                if kind == "end" or len(seen) == 8:
                    break
    assert len(seen) == 8, seen
    spread = seen["tick-8"] - seen["tick-1"]
    assert spread > 4, f"the log's lines arrived within {spread:.1f} s of each other: buffered on the way"


# -- the API ------------------------------------------------------------------------------------------
def test_a_rest_call_with_a_token_gets_links_on_the_public_url(proxied: Proxied) -> None:
    srv = proxied.srv
    with proxied.client(srv.api_key) as api:
        made = api.put(f"{srv.ws_path}/jobs/via-proxy", json={"command": "echo proxied", "compute": "local"})
        assert made.status_code == 201, made.text
        assert made.json()["services"]["Studio"]["endpoint"].startswith(f"{proxied.url}/studio/")
        shown = api.get(f"{srv.ws_path}/jobs/via-proxy")
        assert shown.status_code == 200 and shown.json()["name"] == "via-proxy"
    with httpx.Client(base_url=proxied.url, verify=proxied.context()) as anonymous:
        assert anonymous.get(f"{srv.ws_path}/jobs").status_code == 401


def test_the_events_stream_delivers_an_event_promptly(proxied: Proxied) -> None:
    """Server-sent events pass the proxy as they are sent: an event reaches the watcher within
    a couple of seconds of the change (a buffering proxy would hold it until the stream ends)."""
    srv = proxied.srv
    with proxied.client(srv.api_key) as api:
        since = api.get(f"{srv.ws_path}/events").json()["lastSeq"]
    arrived: list[tuple[float, dict[str, Any]]] = []
    heartbeats: list[float] = []
    failure: list[BaseException] = []
    ready, stop = threading.Event(), threading.Event()

    def watch() -> None:
        try:
            with (
                proxied.client(srv.api_key) as client,
                client.stream(
                    "GET",
                    f"{srv.ws_path}/events",
                    params={"watch": "true"},
                    headers={"Last-Event-ID": str(since)},
                    timeout=httpx.Timeout(10, read=30),
                ) as response,
            ):
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                for line in response.iter_lines():
                    ready.set()
                    if stop.is_set():
                        return
                    if line.startswith(": "):
                        heartbeats.append(time.monotonic())
                    elif line.startswith("data: "):
                        arrived.append((time.monotonic(), json.loads(line[6:])))
        except BaseException as exc:
            failure.append(exc)
            ready.set()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        assert ready.wait(20) and not failure, failure
        wait_until(lambda: heartbeats, 10, "a heartbeat through the proxy")
        with proxied.client(srv.api_key) as api:
            made_at = time.monotonic()
            job = {"command": "true", "compute": "local"}
            made = api.put(f"{srv.ws_path}/jobs/sse-{uuid.uuid4().hex[:6]}", json=job)
            assert made.status_code == 201, made.text
        wait_until(lambda: arrived or failure, 20, "an event through the proxy")
        assert not failure, failure
        first_at, event = arrived[0]
        assert first_at - made_at < 5, f"the first event took {first_at - made_at:.1f} s through the proxy"
        assert event["seq"] > since
    finally:
        stop.set()
        watcher.join(40)


def test_a_few_mib_upload_passes_whole(proxied: Proxied) -> None:
    srv = proxied.srv
    payload = os.urandom(4 << 20)  # incompressible: the body on the wire is ~4 MiB
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as archive:
        info = tarfile.TarInfo("upload/data.bin")
        info.size = len(payload)
        archive.addfile(info, io.BytesIO(payload))
    body = buffer.getvalue()
    assert len(body) > 4 << 20
    folder = f"proxied-{uuid.uuid4().hex[:6]}"
    path = f"{srv.ws_path}/datastores/workspaceblobstore/paths/{folder}"
    with proxied.client(srv.api_key) as api:
        put = api.put(path, content=body, headers={"Content-Type": "application/gzip"})
        assert put.status_code in (200, 201), put.text
    [stored] = [p for p in (srv.home / "data" / "workspaces").rglob("data.bin") if folder in p.parts]
    assert stored.read_bytes() == payload


# -- the client's address and scheme: from the proxy only ---------------------------------------------
def test_the_server_records_the_browsers_address_not_the_proxys(proxied: Proxied) -> None:
    marker = f"/healthz?who={uuid.uuid4().hex}"
    with proxied.client() as browser:
        assert browser.get(marker).status_code == 200
    line = wait_until(lambda: _access_line(proxied.srv, marker), 10, "the access log line")
    assert f"{BROWSER}:" in line and PROXY_SOURCE not in line, line


def test_every_worker_believes_the_proxy(proxied: Proxied) -> None:
    started = [line for line in proxied.srv.log_path.read_text().splitlines() if " serving on " in line]
    assert len(started) == 2, started
    assert all(f"forwarded headers from {PROXY_SOURCE};" in line for line in started), started
    secure = set()
    for _ in range(12):  # a new connection each time: either worker may take it
        with proxied.client() as browser:
            signed = browser.post("/studio/signin", data={"api_key": proxied.srv.api_key, "next": "/studio/"})
            secure.add("secure" in [p.strip().lower() for p in _set_cookie(signed).split(";")])
    assert secure == {True}


def test_forged_forwarded_headers_from_another_peer_change_nothing(proxied: Proxied) -> None:
    """A client that dials the server itself and says it came over HTTPS from elsewhere is still a
    plain-HTTP client at its own address: no Secure cookie, its own address in the log."""
    srv = proxied.srv
    forged = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"}
    transport = httpx.HTTPTransport(local_address=STRANGER)
    with httpx.Client(base_url=srv.endpoint, transport=transport, headers=forged, timeout=30) as stranger:
        signed = stranger.post("/studio/signin", data={"api_key": srv.api_key, "next": "/studio/"})
        assert signed.status_code == 303, signed.text
        assert "secure" not in [p.strip().lower() for p in _set_cookie(signed).split(";")]
        marker = f"/healthz?who={uuid.uuid4().hex}"
        assert stranger.get(marker).status_code == 200
    line = wait_until(lambda: _access_line(srv, marker), 10, "the access log line")
    assert f"{STRANGER}:" in line and "203.0.113.9" not in line, line


def _access_line(srv: RunningServer, marker: str) -> str | None:
    found = [line for line in srv.log_path.read_text().splitlines() if marker in line]
    return found[0] if found else None


@pytest.mark.parametrize(
    ("given", "setting"),
    [
        (["--forwarded-allow-ips", "proxy.lan"], "--forwarded-allow-ips"),
        ([], "CLOUDLET_FORWARDED_ALLOW_IPS"),
    ],
)
def test_a_bad_forwarded_allow_ips_stops_the_start_naming_the_setting(
    tmp_path: Path, given: list[str], setting: str
) -> None:
    env = server_env(tmp_path / "home", None)
    if not given:
        env["CLOUDLET_FORWARDED_ALLOW_IPS"] = "10.0.0.5,10.0.0.0/33"
    started = subprocess.run(
        [sys.executable, "-m", "cloudlet", "server", "--home", str(tmp_path / "home"), "--port", "0", *given],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 2, started.stderr
    assert f"{setting}: " in started.stderr and "is not an IP address" in started.stderr, started.stderr
    assert "e.g. --forwarded-allow-ips 10.0.0.5" in started.stderr
    assert not (tmp_path / "home" / "config.json").exists()


# -- a running instance's JupyterLab over the proxied WebSocket ---------------------------------------
def test_an_instances_kernel_runs_code_over_the_proxied_websocket(proxied: Proxied) -> None:
    srv = proxied.srv
    with srv.client() as direct:
        shown = create_instance(direct, srv, "proxyci")
        assert shown["state"] == "Running", shown
    base = "/instances/proxyci/jupyterlab/"
    with proxied.client(srv.api_key) as api:
        started = api.post(base + "api/kernels", json={"name": "python3"}, headers={"Origin": proxied.url})
        assert started.status_code == 201, started.text
        kernel = started.json()["id"]
        ws_url = f"{proxied.url.replace('https://', 'wss://')}{base}api/kernels/{kernel}/channels"
        with connect(
            f"{ws_url}?session_id={uuid.uuid4().hex}",
            additional_headers={"Authorization": f"Bearer {srv.api_key}", "Origin": proxied.url},
            ssl=proxied.context(),
            open_timeout=30,
            max_size=None,
        ) as ws:
            msg_id = uuid.uuid4().hex
            ws.send(json.dumps(_execute_request(msg_id, "print(6 * 7)")))
            out: list[str] = []
            deadline = time.monotonic() + 120
            while True:
                msg = json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic())))
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                if msg["msg_type"] == "stream":
                    out.append(msg["content"]["text"])
                elif msg["msg_type"] == "status" and msg["content"].get("execution_state") == "idle":
                    break
        assert "".join(out).strip() == "42"
        # A proxy passing on the upstream's address as Host (nginx's default): the public URL's
        # origin still opens the app, another still does not.
        upstream = {"X-Test-Upstream-Host": "1"}
        assert api.get(base + "api/status", headers={**upstream, "Origin": proxied.url}).status_code == 200
        other = {**upstream, "Origin": "https://elsewhere.example"}
        assert api.get(base + "api/status", headers=other).status_code == 403
        api.delete(base + f"api/kernels/{kernel}", headers={"Origin": proxied.url})
