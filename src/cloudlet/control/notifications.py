"""The notification loop: sends the job notifications the outbox holds (issue 29 item 4).

A job's end writes its deliveries in its own transaction (``services/jobs/notifications.py``);
this loop, on the loop base and under the lease ``notifications`` (one server sends), reads the
due ones each pass and hands each to a small pool of sender threads, so a slow receiver holds
neither the loop nor any job nor the event loop. Each try is recorded by its sender (fenced by the
lease's token): delivered, or tried again after a bounded exponential backoff, or given up after
``domain.jobs.notifications.MAX_ATTEMPTS``. The loop is woken by a commit that recorded
notifications (``Effects.notifications_pending``) and passes at least every ``poll_s``, which is
what picks up retries and another server's deliveries.

Configuration (the server's environment; docs/observability.md "Notifications"): the SMTP server
(``CLOUDLET_SMTP_HOST``, ``_PORT``, ``_SECURITY`` = ``starttls`` | ``tls`` | ``none``, ``_USER``,
``_PASSWORD`` or ``_PASSWORD_FILE``, ``_FROM``, ``_CA_FILE``), the server's webhook signing secret
(``CLOUDLET_WEBHOOK_SECRET`` or ``_FILE``: it signs for the workspaces without a secret of their
own, ``domain/jobs/webhook_secrets.py``) and a try's timeout (``CLOUDLET_NOTIFY_TIMEOUT_S``,
default 10). The studio links' base is the server's public URL (``--public-url``,
``CLOUDLET_PUBLIC_URL`` or the older ``CLOUDLET_EXTERNAL_URL``), as every link's.
"""

from __future__ import annotations

import json
import logging
import os
import smtplib
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control.loop import LeaseCache, ReconcileLoop
from cloudlet.domain.errors import failure_text
from cloudlet.domain.jobs import notifications as rules
from cloudlet.domain.jobs.webhook_secrets import WorkspaceSigning, signing_keys
from cloudlet.services.core.clock import WALL_CLOCK, Clock
from cloudlet.services.jobs import notifications as outbox
from cloudlet.store import db
from cloudlet.store.schema import NotificationDelivery

log = logging.getLogger("cloudlet.notifications")

LEASE = "notifications"
SENDERS = 4  # sender threads: deliveries in flight at once
BATCH = 50  # deliveries read per pass


def _secret(env: Mapping[str, str], name: str) -> str | None:
    """A secret from NAME or the file NAME_FILE names (a file keeps it out of the process list)."""
    path = env.get(f"{name}_FILE")
    if path:
        return Path(path).read_text().strip()
    return env.get(name) or None


@dataclass(frozen=True)
class SmtpConfig:
    host: str
    port: int
    security: str  # "starttls", "tls" or "none"
    user: str | None
    password: str | None
    sender: str
    ca_file: str | None = None  # a private CA the SMTP server's certificate is issued by

    def tls_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca_file)


@dataclass(frozen=True)
class NotifyConfig:
    smtp: SmtpConfig | None
    webhook_secret: bytes | None
    timeout_s: float

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> NotifyConfig:
        env = os.environ if env is None else env
        smtp = None
        if env.get("CLOUDLET_SMTP_HOST"):
            security = env.get("CLOUDLET_SMTP_SECURITY", "starttls").lower()
            if security not in ("starttls", "tls", "none"):
                raise ValueError("CLOUDLET_SMTP_SECURITY must be starttls, tls or none")
            default_port = {"starttls": 587, "tls": 465, "none": 25}[security]
            smtp = SmtpConfig(
                host=env["CLOUDLET_SMTP_HOST"],
                port=int(env.get("CLOUDLET_SMTP_PORT") or default_port),
                security=security,
                user=env.get("CLOUDLET_SMTP_USER") or None,
                password=_secret(env, "CLOUDLET_SMTP_PASSWORD"),
                sender=env.get("CLOUDLET_SMTP_FROM") or "cloudlet@localhost",
                ca_file=env.get("CLOUDLET_SMTP_CA_FILE") or None,
            )
        secret = _secret(env, "CLOUDLET_WEBHOOK_SECRET")
        return cls(
            smtp=smtp,
            webhook_secret=secret.encode() if secret else None,
            timeout_s=float(env.get("CLOUDLET_NOTIFY_TIMEOUT_S") or 10),
        )


@dataclass(frozen=True)
class TryResult:
    ok: bool
    status: int | None
    error: str | None


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A webhook's redirect is not followed: it could point the server at another host."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def send_webhook(
    url: str, body: bytes, event: str, delivery_id: int, keys: list[bytes], config: NotifyConfig
) -> TryResult:
    """POST BODY to URL, signed with each of KEYS (none: unsigned)."""
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "cloudlet-notifications",
        rules.EVENT_HEADER: event,
        "X-Cloudlet-Delivery": str(delivery_id),
    }
    signature = rules.signature_header(keys, body)
    if signature is not None:
        headers[rules.SIGNATURE_HEADER] = signature
    request = urllib.request.Request(rules.check_url(url), data=body, headers=headers, method="POST")
    try:
        with _OPENER.open(request, timeout=config.timeout_s) as answer:
            return TryResult(200 <= answer.status < 300, answer.status, None)
    except urllib.error.HTTPError as exc:
        return TryResult(False, exc.code, f"HTTP {exc.code} {exc.reason}")
    except (OSError, ValueError) as exc:  # refused, timed out, bad address: the message, never the secret
        return TryResult(False, None, failure_text(exc))


def send_email(to: str, body: dict[str, Any], config: NotifyConfig) -> TryResult:
    smtp = config.smtp
    if smtp is None:
        return TryResult(False, None, "no SMTP server is configured (CLOUDLET_SMTP_HOST)")
    subject, text = rules.email_text(body)
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = smtp.sender, to, subject
    message.set_content(text)
    try:
        if smtp.security == "tls":
            client: smtplib.SMTP = smtplib.SMTP_SSL(
                smtp.host, smtp.port, timeout=config.timeout_s, context=smtp.tls_context()
            )
        else:
            client = smtplib.SMTP(smtp.host, smtp.port, timeout=config.timeout_s)
        with client:
            if smtp.security == "starttls":
                client.starttls(context=smtp.tls_context())
            if smtp.user:
                client.login(smtp.user, smtp.password or "")
            client.send_message(message)
        return TryResult(True, 250, None)
    except smtplib.SMTPResponseException as exc:
        return TryResult(False, exc.smtp_code, f"SMTP {exc.smtp_code}: {exc.smtp_error!r}"[:500])
    except (OSError, smtplib.SMTPException) as exc:
        return TryResult(False, None, failure_text(exc))


class NotificationLoop(ReconcileLoop):
    def __init__(
        self,
        sessions: sessionmaker[Session],
        replica_id: str,
        link_base: Callable[[], str],  # the links' base (``AppState.endpoint``)
        config: NotifyConfig | None = None,
        poll_s: float = 1.0,
        lease_ttl_s: float = 10.0,
        clock: Clock = WALL_CLOCK,
    ) -> None:
        super().__init__("notifications", poll_s, clock)
        self.sessions = sessions
        self.link_base = link_base
        self.config = config or NotifyConfig.from_env()
        self.leases = LeaseCache(sessions, replica_id, lease_ttl_s)
        self._pool = ThreadPoolExecutor(SENDERS, thread_name_prefix="notify")
        self._in_flight: set[int] = set()
        self._lock = threading.Lock()

    def pass_once(self, now: float) -> float:
        token = self.leases.token(LEASE, now)
        if token is None:
            return self.interval_s
        with db.read_only(self.sessions) as session:  # most passes find none: no write lock
            due = outbox.due(session, now, BATCH)
            work = [(_Delivery.of(d.delivery), d.setting, d.signing) for d in due]
        for delivery, setting, signing in work:
            with self._lock:
                if delivery.id in self._in_flight:
                    continue
                self._in_flight.add(delivery.id)
            self._pool.submit(self._deliver, delivery, setting, signing, token)
        return self.interval_s

    def on_stop(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _link(self, path: str) -> str:
        return self.link_base().rstrip("/") + path

    def _deliver(
        self, delivery: _Delivery, setting: dict[str, Any], signing: WorkspaceSigning | None, token: int
    ) -> None:
        try:
            with self.sessions() as session:
                # A pass may have read the row just before an earlier try of it was recorded.
                if not outbox.still_due(session, delivery.id, delivery.attempts):
                    return
            body = rules.event_body(
                {k: v for k, v in delivery.payload.items() if k != "studio_path"},
                delivery.event,
                self._link(str(delivery.payload.get("studio_path", ""))),
            )
            if delivery.kind == "email":
                result = send_email(delivery.target, body, self.config)
            else:
                hook = (setting.get("webhooks") or {}).get(delivery.target)
                if hook is None:
                    result = TryResult(False, None, f"the job has no webhook named {delivery.target!r}")
                else:
                    data = json.dumps(body, sort_keys=True).encode()
                    keys = signing_keys(signing, self.config.webhook_secret, self.clock.now())
                    url = str(hook["url"])
                    result = send_webhook(url, data, delivery.event, delivery.id, keys, self.config)
            if not result.ok:
                what = f"{delivery.kind} {delivery.target}"
                tries = delivery.attempts + 1
                log.warning(
                    "notification %s to %s: try %d failed: %s", delivery.id, what, tries, result.error
                )
            with self.sessions.begin() as session:
                if self.leases.still_held(session, LEASE, token):
                    outbox.record_try(
                        session,
                        delivery.id,
                        delivery.attempts + 1,
                        result.ok,
                        result.status,
                        result.error,
                        self.clock.now(),
                    )
        except Exception:  # the next pass tries it again
            log.exception("notification %s could not be sent or recorded", delivery.id)
        finally:
            with self._lock:
                self._in_flight.discard(delivery.id)


@dataclass(frozen=True)
class _Delivery:
    """A delivery as its sender needs it (read in the pass's session, used in a sender thread)."""

    id: int
    kind: str
    target: str
    event: str
    payload: dict[str, Any]
    attempts: int

    @classmethod
    def of(cls, row: NotificationDelivery) -> _Delivery:
        return cls(row.id, row.kind, row.target, row.event, dict(row.payload), row.attempts)
