"""Acceptance (issue 29 item 4): notifications on job events, through a real SMTP server
(``aiosmtpd``, taking mail only after STARTTLS with a private CA and a login whose password the
server reads from a file) and real HTTP receivers, from jobs that really run.

A failing job's email arrives with its name, status, error and a link to its studio page; a
webhook that answers 500 twice then 200 receives the event three times, each signed with the
server's secret, and the job's outcome is unchanged; a receiver that never answers does not
delay the job's completion; the delivery log shows each, over REST and ``cloudlet job deliveries``.
"""

from __future__ import annotations

import email
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from cloudlet import tls
from cloudlet.domain.jobs import notifications as rules
from tests.conftest import RunningServer
from tests.jobs_helpers import cli_json, error_of, served, submit, wait_job, wait_until

SECRET = b"webhook-secret-for-tests"
SMTP_LOGIN = (b"cloudlet-mailer", b"smtp-password-for-tests")
EXTERNAL = "https://cloudlet.example"


class _Mailbox:
    """aiosmtpd's handler: keeps each message it accepts."""

    def __init__(self) -> None:
        self.messages: list[tuple[list[str], Message]] = []

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        raw = envelope.content if isinstance(envelope.content, bytes) else str(envelope.content).encode()
        self.messages.append((list(envelope.rcpt_tos), email.message_from_bytes(raw)))
        return "250 OK"


class _Receiver:
    """Webhook receivers on one real HTTP server: ``/flaky`` answers 500 twice, then 200;
    ``/hang`` holds each request until ``release`` is set."""

    def __init__(self) -> None:
        self.calls: dict[str, list[tuple[float, dict[str, str], bytes]]] = {"/flaky": [], "/hang": []}
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                calls = receiver.calls.setdefault(self.path, [])
                calls.append((time.time(), dict(self.headers.items()), body))
                if self.path == "/hang":
                    receiver.release.wait(60)
                status = 500 if self.path == "/flaky" and len(calls) <= 2 else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()


def _authenticator(
    server: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: Any
) -> AuthResult:
    ok = isinstance(auth_data, LoginPassword) and (auth_data.login, auth_data.password) == SMTP_LOGIN
    return AuthResult(success=ok)


@pytest.fixture(scope="module")
def smtp_tls(tmp_path_factory: pytest.TempPathFactory) -> tls.TlsFiles:
    """A private CA and a certificate for 127.0.0.1: the SMTP server's, which the server trusts
    through CLOUDLET_SMTP_CA_FILE."""
    return tls.ensure(tmp_path_factory.mktemp("smtp-tls"), "127.0.0.1", "smtp-test")


@pytest.fixture(scope="module")
def mailbox(smtp_tls: tls.TlsFiles) -> Iterator[tuple[_Mailbox, int]]:
    """A real SMTP server that, as a provider's does, takes mail only after STARTTLS and a login."""
    box = _Mailbox()
    with socket.socket() as probe:  # aiosmtpd's controller checks its port by connecting: not 0
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    controller = Controller(
        box,
        hostname="127.0.0.1",
        port=port,
        tls_context=smtp_tls.server_context(),
        require_starttls=True,
        auth_required=True,
        auth_require_tls=True,
        authenticator=_authenticator,
    )
    controller.start()
    try:
        yield box, port
    finally:
        controller.stop()


@pytest.fixture(scope="module")
def receiver() -> Iterator[_Receiver]:
    made = _Receiver()
    yield made
    made.close()


@pytest.fixture(scope="module")
def srv(
    tmp_path_factory: pytest.TempPathFactory, mailbox: tuple[_Mailbox, int], smtp_tls: tls.TlsFiles
) -> Iterator[RunningServer]:
    secrets = Path(tmp_path_factory.mktemp("secrets"))
    (secrets / "webhook").write_bytes(SECRET)
    (secrets / "smtp").write_bytes(SMTP_LOGIN[1] + b"\n")
    env = {
        "CLOUDLET_SMTP_HOST": "127.0.0.1",
        "CLOUDLET_SMTP_PORT": str(mailbox[1]),
        "CLOUDLET_SMTP_SECURITY": "starttls",
        "CLOUDLET_SMTP_CA_FILE": str(smtp_tls.ca),
        "CLOUDLET_SMTP_USER": SMTP_LOGIN[0].decode(),
        "CLOUDLET_SMTP_PASSWORD_FILE": str(secrets / "smtp"),
        "CLOUDLET_SMTP_FROM": "cloudlet@example.com",
        "CLOUDLET_WEBHOOK_SECRET_FILE": str(secrets / "webhook"),
        "CLOUDLET_EXTERNAL_URL": EXTERNAL,
        "CLOUDLET_NOTIFY_TIMEOUT_S": "30",  # the hanging receiver's try outlasts the job by far
    }
    yield from served(tmp_path_factory, "notify", extra_env=env)


@pytest.fixture(scope="module")
def api(srv: RunningServer) -> Iterator[httpx.Client]:
    with srv.client() as client:
        yield client


def _deliveries(api: httpx.Client, srv: RunningServer, name: str) -> list[dict[str, Any]]:
    response = api.get(f"{srv.ws_path}/jobs/{name}/deliveries")
    assert response.status_code == 200, response.text
    return list(response.json()["value"])


def test_a_failing_jobs_email_and_a_flaky_webhook_arrive(
    api: httpx.Client, srv: RunningServer, mailbox: tuple[_Mailbox, int], receiver: _Receiver
) -> None:
    box, _ = mailbox
    submit(
        api,
        srv,
        "fails-loudly",
        {
            "command": "echo about to fail; exit 3",
            "compute": "local",
            "notification_setting": {
                "emails": ["ops@example.com"],
                "email_on": ["job_failed", "job_completed"],
                "webhooks": {"chat": {"url": receiver.url + "/flaky", "event_type": "job_failed"}},
            },
        },
    )
    ended = wait_job(api, srv, "fails-loudly", timeout=120)
    assert ended["status"] == "Failed", ended
    error = ended.get("error") or {}
    assert error.get("message"), ended

    recipients, message = wait_until(lambda: box.messages and box.messages[0], 60, "the email")
    assert recipients == ["ops@example.com"]
    text = message.get_payload(decode=True).decode()  # type: ignore[union-attr]
    assert "fails-loudly" in str(message["Subject"]) and "Failed" in str(message["Subject"])
    assert "Job: fails-loudly" in text and "Status: Failed" in text
    assert str(error["message"]) in text, text
    sub, rg, ws = (
        srv.ws_path.split("/subscriptions/")[1]
        .replace("resourceGroups/", "")
        .replace("workspaces/", "")
        .split("/")
    )
    assert f"Link: {EXTERNAL}/studio/ws/{sub}/{rg}/{ws}/jobs/fails-loudly" in text, text

    calls = wait_until(lambda: len(receiver.calls["/flaky"]) >= 3 and receiver.calls["/flaky"], 60, "3 calls")
    bodies = {body for _, _, body in calls}
    assert len(bodies) == 1, "every try sends the same event"
    for _, headers, body in calls:
        assert rules.signature_ok(SECRET, body, headers[rules.SIGNATURE_HEADER]), headers
        assert headers[rules.EVENT_HEADER] == "job_failed"
    event = json.loads(bodies.pop())
    assert (
        event["job"] == "fails-loudly" and event["status"] == "Failed" and event["eventType"] == "JobFailed"
    )
    assert SECRET.decode() not in json.dumps(event)
    # Backoff: the tries are spread, the second at least FIRST_RETRY_S after the first.
    assert calls[1][0] - calls[0][0] >= rules.FIRST_RETRY_S * 0.9

    log = wait_until(
        lambda: (
            (d := _deliveries(api, srv, "fails-loudly")) and all(x["state"] == "delivered" for x in d) and d
        ),
        30,
        "both deliveries recorded as delivered",
    )
    hook = next(d for d in log if d["kind"] == "webhook")
    assert (hook["attempts"], hook["lastStatus"], hook["target"]) == (3, 200, "chat")
    mail = next(d for d in log if d["kind"] == "email")
    assert (mail["attempts"], mail["target"], mail["event"]) == (1, "ops@example.com", "job_failed")
    assert api.get(f"{srv.ws_path}/jobs/fails-loudly").json()["status"] == "Failed", (
        "the outcome is unchanged"
    )
    assert len(receiver.calls["/flaky"]) == 3, "a delivered event is not sent again"

    shown = cli_json(srv, "job", "deliveries", "--name", "fails-loudly")
    assert sorted(d["kind"] for d in shown) == ["email", "webhook"]
    # The job echoes its setting (no secret is part of it), and the server's log names the
    # failed tries without the secret.
    echoed = api.get(f"{srv.ws_path}/jobs/fails-loudly").json()["notification_setting"]
    assert echoed["webhooks"]["chat"]["url"] == receiver.url + "/flaky"
    server_log = srv.log_path.read_text()
    assert "to webhook chat: try 1 failed: HTTP 500" in server_log
    assert SECRET.decode() not in server_log and SMTP_LOGIN[1].decode() not in server_log


def test_a_receiver_that_never_answers_does_not_delay_the_job(
    api: httpx.Client, srv: RunningServer, receiver: _Receiver
) -> None:
    submit(
        api,
        srv,
        "ends-anyway",
        {
            "command": "true",
            "compute": "local",
            "notification_setting": {"webhooks": {"stuck": {"url": receiver.url + "/hang"}}},
        },
    )
    wait_until(lambda: receiver.calls["/hang"], 120, "the hanging receiver to be called")
    # The receiver still holds the notification's request, and the job has already ended.
    ended = wait_job(api, srv, "ends-anyway", timeout=10)
    assert ended["status"] == "Completed", ended
    assert not receiver.release.is_set()
    (pending,) = _deliveries(api, srv, "ends-anyway")
    assert pending["state"] == "pending" and pending["attempts"] == 0, pending


def test_a_pipeline_notifies_of_its_own_end_not_its_steps(
    api: httpx.Client, srv: RunningServer, receiver: _Receiver
) -> None:
    submit(
        api,
        srv,
        "piped",
        {
            "type": "pipeline",
            "settings": {"default_compute": "local"},
            "notification_setting": {"webhooks": {"ci": {"url": receiver.url + "/pipeline"}}},
            "jobs": {"ok": {"command": "true"}, "bad": {"command": "exit 4"}},
        },
    )
    assert wait_job(api, srv, "piped", timeout=180)["status"] == "Failed"
    wait_until(lambda: _deliveries(api, srv, "piped")[0]["state"] == "delivered", 30, "the pipeline's event")
    events = [json.loads(body) for _, _, body in receiver.calls["/pipeline"]]
    assert [(e["job"], e["event"]) for e in events] == [("piped", "job_failed")], events
    assert _deliveries(api, srv, "piped-bad") == [] and _deliveries(api, srv, "piped-ok") == []


def test_under_two_workers_one_sends_each_event_once(
    server_factory: Callable[..., RunningServer], receiver: _Receiver
) -> None:
    """``--workers 2``: both workers run the notification loop; the lease lets one send. Jobs
    submitted through either worker each reach the receiver once."""
    srv = server_factory(extra_env={"CLOUDLET_WORKERS": "2", "CLOUDLET_WEBHOOK_SECRET": SECRET.decode()})
    names = [f"twice-{i}" for i in range(4)]
    with srv.client() as api:
        for name in names:
            submit(
                api,
                srv,
                name,
                {
                    "command": "true",
                    "compute": "local",
                    "notification_setting": {"webhooks": {"ok": {"url": receiver.url + "/once"}}},
                },
            )
        for name in names:
            assert wait_job(api, srv, name, timeout=120)["status"] == "Completed"
        for name in names:
            wait_until(
                lambda name=name: _deliveries(api, srv, name)[0]["state"] == "delivered",
                30,
                f"{name} delivered",
            )
    got = sorted(json.loads(body)["job"] for _, _, body in receiver.calls["/once"])
    assert got == names, got


def test_a_webhook_url_that_is_not_http_is_refused(api: httpx.Client, srv: RunningServer) -> None:
    response = api.put(
        f"{srv.ws_path}/jobs/bad-hook",
        json={
            "command": "true",
            "compute": "local",
            "notification_setting": {"webhooks": {"x": {"url": "file:///etc/passwd"}}},
        },
    )
    assert response.status_code == 400, response.text
    assert "http" in error_of(response)["message"]
