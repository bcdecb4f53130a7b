"""The notification loop's senders (control/notifications.py) against a real local HTTP server,
without a cloudlet server: a redirect is not followed (it could point the server elsewhere), a
receiver that does not answer in time is a failed try with the reason, the signature header is
sent only with a secret; and the server's configuration from its environment."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cloudlet.control.notifications import NotifyConfig, send_email, send_webhook
from cloudlet.domain.jobs import notifications as rules


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[tuple[str, dict[str, str]]]]]:
    seen: list[tuple[str, dict[str, str]]] = []
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append((self.path, dict(self.headers.items())))
            if self.path == "/slow":
                release.wait(10)
            if self.path == "/moved":
                self.send_response(307)
                self.send_header("Location", "/elsewhere")
            else:
                self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    release.set()
    server.shutdown()


def _config(secret: bytes | None = None, timeout_s: float = 5) -> NotifyConfig:
    return NotifyConfig(smtp=None, webhook_secret=secret, timeout_s=timeout_s)


def test_a_redirect_is_not_followed(receiver: tuple[str, list[tuple[str, dict[str, str]]]]) -> None:
    url, seen = receiver
    result = send_webhook(url + "/moved", b"{}", "job_failed", 7, [], _config())
    assert not result.ok and result.status == 307, result
    assert [path for path, _ in seen] == ["/moved"], "the redirect's target is never called"


def test_a_receiver_that_does_not_answer_in_time_is_a_failed_try(
    receiver: tuple[str, list[tuple[str, dict[str, str]]]],
) -> None:
    url, _ = receiver
    began = time.monotonic()
    result = send_webhook(url + "/slow", b"{}", "job_failed", 7, [], _config(timeout_s=0.5))
    assert time.monotonic() - began < 5
    assert not result.ok and result.status is None and "timed out" in str(result.error), result


def test_the_signature_is_sent_only_with_a_secret(
    receiver: tuple[str, list[tuple[str, dict[str, str]]]],
) -> None:
    url, seen = receiver
    body = b'{"x": 1}'
    assert send_webhook(url + "/a", body, "job_completed", 1, [b"k"], _config()).ok
    assert send_webhook(url + "/b", body, "job_completed", 2, [], _config()).ok
    assert send_webhook(url + "/c", body, "job_completed", 3, [b"new", b"old"], _config()).ok
    signed, unsigned, rotating = (headers for _, headers in seen)
    assert signed[rules.SIGNATURE_HEADER] == rules.sign(b"k", body)
    assert rules.SIGNATURE_HEADER not in unsigned
    # Within a rotation's grace, both secrets sign (the new first): either verifies.
    assert rotating[rules.SIGNATURE_HEADER] == rules.sign(b"new", body) + "," + rules.sign(b"old", body)
    assert rules.signature_ok(b"old", body, rotating[rules.SIGNATURE_HEADER])
    assert rules.signature_ok(b"new", body, rotating[rules.SIGNATURE_HEADER])
    assert not rules.signature_ok(b"k", body, rotating[rules.SIGNATURE_HEADER])
    assert (signed["X-Cloudlet-Delivery"], signed[rules.EVENT_HEADER]) == ("1", "job_completed")


def test_without_an_smtp_server_an_email_is_a_failed_try_that_says_so() -> None:
    result = send_email(
        "a@example.com", {"job": "j", "status": "Failed", "workspace": "w", "link": "x"}, _config()
    )
    assert not result.ok and "CLOUDLET_SMTP_HOST" in str(result.error)


def test_configuration_from_the_environment(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("from-file\n")
    config = NotifyConfig.from_env(
        {
            "CLOUDLET_SMTP_HOST": "mail.example",
            "CLOUDLET_SMTP_SECURITY": "TLS",
            "CLOUDLET_SMTP_PASSWORD_FILE": str(tmp_path / "pw"),
            "CLOUDLET_SMTP_PASSWORD": "ignored: the file wins",
            "CLOUDLET_WEBHOOK_SECRET": "s",
        }
    )
    assert config.smtp is not None
    assert (config.smtp.port, config.smtp.security, config.smtp.password) == (465, "tls", "from-file")
    assert (config.webhook_secret, config.timeout_s) == (b"s", 10)
    assert NotifyConfig.from_env({}).smtp is None
    assert NotifyConfig.from_env({"CLOUDLET_SMTP_HOST": "m"}).smtp.port == 587  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="starttls, tls or none"):
        NotifyConfig.from_env({"CLOUDLET_SMTP_HOST": "m", "CLOUDLET_SMTP_SECURITY": "ssl3"})
