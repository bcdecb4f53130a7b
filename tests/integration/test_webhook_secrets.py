"""Acceptance: a signing secret per workspace for job-notification webhooks (docs/observability.md
"Signing secrets"), through a real server, real jobs and a real HTTP receiver.

An Owner's rotation (the CLI's ``cloudlet workspace webhook-secret rotate``, and REST) answers a
new secret once; the workspace's deliveries then verify with it and not with another workspace's
secret; within a rotation's grace the replaced secret (the server's, the first time) signs beside
it, and after a rotation without grace only the new one does. A Reader or Contributor is refused;
the secret is in no job view, job environment, delivery log, audit entry or server log.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from cloudlet.domain.jobs import notifications as rules
from tests.conftest import RunningServer
from tests.instance_helpers import new_user
from tests.jobs_helpers import cli_json, error_of, log_text, served, submit, wait_job, wait_until

SERVER_SECRET = "the-servers-own-webhook-secret"


class _Receiver:
    """Records each POST (path, headers, body) and answers 204."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str], bytes]] = []
        calls = self.calls

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                calls.append((self.path, dict(self.headers.items()), body))
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def received(self, path: str) -> tuple[bytes, str]:
        """The body and signature header the receiver got at PATH (waits for it)."""
        found = wait_until(lambda: [c for c in self.calls if c[0] == path], 120, f"a call of {path}")
        _, headers, body = found[0]
        return body, headers.get(rules.SIGNATURE_HEADER, "")


@pytest.fixture(scope="module")
def receiver() -> Iterator[_Receiver]:
    made = _Receiver()
    yield made
    made.server.shutdown()


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    env = {"CLOUDLET_WEBHOOK_SECRET": SERVER_SECRET}
    yield from served(tmp_path_factory, "webhook-secrets", extra_env=env)


@pytest.fixture(scope="module")
def api(srv: RunningServer) -> Iterator[httpx.Client]:
    with srv.client() as client:
        yield client


def _rotate(api: httpx.Client, path: str, grace_hours: int) -> str:
    response = api.post(f"{path}/webhookSecret/rotate", json={"grace_hours": grace_hours})
    assert response.status_code == 201, response.text
    secret = str(response.json()["secret"])
    assert secret.startswith("whsec_") and len(secret) > 40, response.json()
    return secret


def _notified_job(api: httpx.Client, srv: RunningServer, receiver: _Receiver, name: str) -> tuple[bytes, str]:
    """Run job NAME (it prints its environment), and what its webhook delivered."""
    setting = {"webhooks": {"ci": {"url": f"{receiver.url}/{name}"}}}
    submit(api, srv, name, {"command": "env", "compute": "local", "notification_setting": setting})
    assert wait_job(api, srv, name, timeout=120)["status"] == "Completed"
    return receiver.received(f"/{name}")


def _verifies(secret: str, delivered: tuple[bytes, str]) -> bool:
    body, header = delivered
    return bool(header) and rules.signature_ok(secret.encode(), body, header)


def test_a_workspaces_webhooks_verify_with_its_own_rotated_secret_only(
    api: httpx.Client, srv: RunningServer, receiver: _Receiver
) -> None:
    made = api.put(srv.workspace_path("other-team"), json={"location": "local"})
    assert made.status_code in (200, 201), made.text
    shown = api.get(f"{srv.ws_path}/webhookSecret").json()
    assert (shown["configured"], shown["rotated_on"], shown["previous_valid_until"]) == (False, None, None)

    # Before any rotation: the server's secret signs, as it always did.
    before = _notified_job(api, srv, receiver, "before-rotation")
    assert _verifies(SERVER_SECRET, before)

    # The first rotation, through the CLI: the server's secret keeps signing for the grace.
    rotated = cli_json(srv, "workspace", "webhook-secret", "rotate", "--grace-hours", "2")
    first = str(rotated["secret"])
    assert first.startswith("whsec_") and rotated["previous_valid_until"], rotated
    theirs = _rotate(api, srv.workspace_path("other-team"), 0)
    during_grace = _notified_job(api, srv, receiver, "first-secret")
    assert _verifies(first, during_grace) and _verifies(SERVER_SECRET, during_grace)
    assert not _verifies(theirs, during_grace), "another workspace's secret cannot verify (nor forge) ours"
    assert during_grace[1].split(",")[0] == rules.sign(first.encode(), during_grace[0]), "the new one first"

    # A rotation without grace: only the new secret signs from the next delivery on.
    second = _rotate(api, srv.ws_path, 0)
    after = _notified_job(api, srv, receiver, "second-secret")
    assert _verifies(second, after)
    assert not any(_verifies(s, after) for s in (first, SERVER_SECRET, theirs)), after[1]

    # With a grace, the replaced one signs beside the new one.
    third = _rotate(api, srv.ws_path, 1)
    both = _notified_job(api, srv, receiver, "third-secret")
    assert _verifies(third, both) and _verifies(second, both)
    assert not any(_verifies(s, both) for s in (first, SERVER_SECRET, theirs)), both[1]
    status = api.get(f"{srv.ws_path}/webhookSecret").json()
    assert status["configured"] is True and status["previous_valid_until"], status

    # The secrets are nowhere a workspace member or job code can read them.
    everything = [first, second, third, theirs]
    for name in ("first-secret", "second-secret", "third-secret"):
        job = api.get(f"{srv.ws_path}/jobs/{name}")
        deliveries = api.get(f"{srv.ws_path}/jobs/{name}/deliveries")
        env = log_text(api, srv, name)
        assert "PATH=" in env, env  # the job did print its environment
        for text in (job.text, deliveries.text, env, json.dumps(status)):
            assert not any(s in text for s in [*everything, SERVER_SECRET]), (name, text[:500])
    audit = api.get("/api/v1/audit", params={"action": "webhookSecret.rotate"})
    assert audit.status_code == 200, audit.text
    entries = audit.json()["value"]
    assert len(entries) == 4 and entries[-1]["details"]["first"] is True, entries
    assert entries[0]["target"].endswith("/workspaces/default/webhookSecret"), entries[0]
    server_log = srv.log_path.read_text()
    assert not any(s in audit.text or s in server_log for s in everything)


def test_only_an_owner_or_administrator_may_rotate(api: httpx.Client, srv: RunningServer) -> None:
    path = srv.workspace_path("default")
    for role in ("Reader", "Contributor"):
        key = new_user(api, srv, f"hook-{role.lower()}", role)
        with srv.client(key) as member:
            refused = member.post(f"{path}/webhookSecret/rotate", json={})
            assert refused.status_code == 403, refused.text
            assert "Owner" in error_of(refused)["message"]
            assert member.get(f"{path}/webhookSecret").status_code == 403
    owner = new_user(api, srv, "hook-owner", "Owner")
    with srv.client(owner) as member:
        assert _rotate(member, path, 0)


def test_the_cli_prints_the_bare_secret_once_for_a_table(srv: RunningServer) -> None:
    """As ``user key-create``: stdout is the secret alone (for ``$(…)``), the note on stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "cloudlet", "workspace", "webhook-secret", "rotate", "--grace-hours", "0"],
        env={**srv.cli_env(), "CLOUDLET_OUTPUT": "table"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"whsec_[A-Za-z0-9_-]{43}\n", done.stdout), done.stdout
    assert "not shown again" in done.stderr and "stopped" in done.stderr, done.stderr
    shown = cli_json(srv, "workspace", "webhook-secret", "show")
    assert shown["configured"] is True and "secret" not in shown, shown


def test_a_grace_out_of_bounds_is_refused_naming_the_field(api: httpx.Client, srv: RunningServer) -> None:
    response = api.post(f"{srv.ws_path}/webhookSecret/rotate", json={"grace_hours": 1000})
    assert response.status_code == 400, response.text
    assert "grace_hours" in json.dumps(error_of(response))
