"""A location that names a new address for the server gets it into the served TLS certificate
without a restart, in every worker of ``--workers 2`` (``cloudlet/tls.py``, ``server.watch_tls``),
from the same CA: a client that trusts the CA and checks the new address is accepted by each
worker, and connections checked for the old names still are."""

from __future__ import annotations

import json
import socket
import ssl
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from tests.conftest import RunningServer
from tests.jobs_helpers import wait_until

WORKERS = {"CLOUDLET_WORKERS": "2"}
NEW_ADDRESS = "127.0.0.5"  # loopback: dialed at 127.0.0.1, checked as this address


def _replica_over_tls(srv: RunningServer, name: str) -> str | None:
    """The replica answering /healthz on a new TLS connection checked for NAME; None when the
    certificate does not name it."""
    port = urllib.parse.urlsplit(srv.https_url).port
    assert port is not None
    context = ssl.create_default_context(cafile=srv.ca_file)
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname=name) as conn,
        ):
            conn.sendall(f"GET /healthz HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode())
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
    except ssl.SSLCertVerificationError as exc:
        assert "mismatch" in str(exc), exc
        return None
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), answer
    return str(json.loads(body)["replica"])


def test_every_worker_serves_the_certificate_reissued_for_a_new_server_address(
    server_factory: Callable[..., RunningServer], tmp_path: Path
) -> None:
    srv = server_factory(extra_env=WORKERS)
    assert _replica_over_tls(srv, NEW_ADDRESS) is None
    ca = Path(srv.ca_file).read_bytes()
    key = tmp_path / "id_ed25519"
    key.write_text("not used: no node is made\n")
    host = {"address": "127.0.0.9", "port": 1, "user": "nobody", "identity_file": str(key)}
    config = {"hosts": [host], "server_address": NEW_ADDRESS, "connect_timeout_s": 1}
    with srv.client() as api:
        made = api.put("/api/v1/locations/far", json={"provider": "ssh", "config": config})
        assert made.status_code == 201, made.text
    accepted: set[str] = set()

    def both_workers_accept() -> bool:
        replica = _replica_over_tls(srv, NEW_ADDRESS)
        if replica is not None:
            accepted.add(replica)
        return len(accepted) == 2

    wait_until(both_workers_accept, 60, f"both workers to serve a certificate naming {NEW_ADDRESS}")
    assert Path(srv.ca_file).read_bytes() == ca  # the same CA: clients keep trusting the server
    assert _replica_over_tls(srv, "127.0.0.1") is not None  # the old names stay
