"""The audit log: who changed what, written in the same transaction as the change.

Services call :func:`record` once they have decided to make a change, inside the request's
transaction: a refused change (its transaction rolled back) leaves no entry, and an accepted one
cannot commit without its entry. Actions are ``<kind>.<verb>`` (``compute.create``,
``apiKey.revoke``); a new kind of resource needs nothing here, only its service calling
``record``. Targets are the resource's ARM-like id (``/subscriptions/…/computes/c``) or, for
resources outside subscriptions, its path (``/principals/alice/keys/<id>``, ``/locations/lab``).
Only administrators read the log (``api/routes_access.py``).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from cloudlet.domain.errors import validation_error
from cloudlet.services.core.clock import given_time, iso, utcnow
from cloudlet.store.schema import AuditEntry

SYSTEM_ACTOR_PREFIX = "system:"
MAX_PAGE = 1000
DEFAULT_PAGE = 100
# The client's own id for the request, as Azure clients send it (and a common alternative).
REQUEST_ID_HEADERS = ("x-ms-client-request-id", "x-request-id")

_ACTION = re.compile(r"[a-z][A-Za-z]*\.[a-z][A-Za-z]*")
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:\-]{1,64}")
# Defence in depth: services pass no secrets, and a key that looks like one is blanked anyway.
_SECRET_KEY = re.compile(r"secret|password|passphrase|token|api_?key|private|key_hash|credential", re.I)
_MAX_TEXT = 1000  # a long value (a setup script in a spec diff) is cut, not stored whole

# Set per request (an ``async`` dependency runs in the request's task, and the thread pool that
# runs sync endpoints copies the task's context), unset in the control plane's own threads.
_request_id: ContextVar[str | None] = ContextVar("cloudlet_audit_request_id", default=None)
_channel: ContextVar[str | None] = ContextVar("cloudlet_audit_channel", default=None)

# The front doors a change can come through, as entries record them (None: the control plane).
REST, ARM, MLFLOW, CLI, STUDIO = "rest", "arm", "mlflow", "cli", "studio"
CHANNELS = (REST, ARM, MLFLOW, CLI, STUDIO)
# What the cloudlet client (and so the CLI) sends as its User-Agent's first word.
CLIENT_AGENT = "cloudlet-client"


def system(component: str) -> str:
    """The actor name of a control-plane component (``system:instance-watch``)."""
    return f"{SYSTEM_ACTOR_PREFIX}{component}"


def request_id_from(headers: Mapping[str, str]) -> str | None:
    """The client's request id, if it sent a well-formed one (an odd one is ignored, not refused)."""
    for name in REQUEST_ID_HEADERS:
        value = (headers.get(name) or "").strip()
        if _REQUEST_ID.fullmatch(value):
            return value
    return None


def bind_request_id(value: str | None) -> None:
    """Entries recorded from here on in this context carry ``value`` as their request id."""
    _request_id.set(value)


def bind_channel(value: str) -> None:
    """Entries recorded from here on in this context came through front door ``value``
    (``CHANNELS``): each route class binds its own, so no service or handler passes it."""
    if value not in CHANNELS:
        raise ValueError(f"audit channel {value!r} is not one of {CHANNELS}")
    _channel.set(value)


def api_channel(path: str, headers: Mapping[str, str]) -> str:
    """The channel of a request to the API: the cloudlet client (and CLI) say who they are in
    their User-Agent; otherwise the native API under ``/api/v1``, else the Azure ML facade."""
    if (headers.get("user-agent") or "").startswith(CLIENT_AGENT):
        return CLI
    return REST if path.startswith("/api/") else ARM


def record(
    session: Session, actor: str, action: str, target: str, details: Mapping[str, Any] | None = None
) -> AuditEntry:
    """Add an entry to the session's transaction; it commits (or rolls back) with the change."""
    if not _ACTION.fullmatch(action):
        raise ValueError(f"audit action {action!r} is not '<kind>.<verb>'")
    entry = AuditEntry(
        at=utcnow(),
        actor=actor,
        action=action,
        target=target,
        details=_scrub(dict(details or {})),
        request_id=_request_id.get(),
        channel=_channel.get(),
    )
    session.add(entry)
    return entry


def _scrub(value: Any, key: str = "") -> Any:
    if key and _SECRET_KEY.search(key):
        return "[redacted]"
    if isinstance(value, Mapping):
        return {str(k): _scrub(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(v) for v in value]
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, str) and len(value) > _MAX_TEXT:
        return f"{value[:_MAX_TEXT]}… ({len(value) - _MAX_TEXT} more characters)"
    return value


def changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{field: {"old", "new"}}`` for the top-level fields that differ."""
    return {
        k: {"old": before.get(k), "new": after.get(k)}
        for k in sorted(set(before) | set(after))
        if before.get(k) != after.get(k)
    }


# -- reading ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class AuditQuery:
    """Filters: ``since`` ≤ time < ``until``; ``actor`` exactly; ``action`` exactly or a kind
    (``compute`` matches ``compute.create``…); ``target`` a resource and everything under it;
    ``channel`` exactly."""

    since: datetime | None = None
    until: datetime | None = None
    actor: str | None = None
    action: str | None = None
    target: str | None = None
    channel: str | None = None


@dataclass(frozen=True)
class AuditPage:
    entries: list[AuditEntry]
    skip_token: str | None  # None on the last page


def read(
    session: Session, query: AuditQuery, top: int = DEFAULT_PAGE, skip_token: str | None = None
) -> AuditPage:
    """One page, newest first. The continuation token is the last id returned: entries written
    after the first page was read are newer, so paging neither repeats nor skips an entry."""
    stmt = select(AuditEntry).order_by(AuditEntry.id.desc()).limit(top + 1)
    if skip_token is not None:
        stmt = stmt.where(AuditEntry.id < _decode(skip_token))
    if query.since is not None:
        stmt = stmt.where(AuditEntry.at >= given_time(query.since, "since"))
    if query.until is not None:
        stmt = stmt.where(AuditEntry.at < given_time(query.until, "until"))
    if query.actor:
        stmt = stmt.where(AuditEntry.actor == query.actor)
    if query.action:
        stmt = stmt.where(
            or_(
                AuditEntry.action == query.action,
                AuditEntry.action.startswith(query.action + ".", autoescape=True),
            )
        )
    if query.channel:
        stmt = stmt.where(AuditEntry.channel == query.channel)
    if query.target:
        base = query.target.rstrip("/")
        stmt = stmt.where(
            or_(AuditEntry.target == base, AuditEntry.target.startswith(base + "/", autoescape=True))
        )
    rows = list(session.scalars(stmt))
    more = len(rows) > top
    rows = rows[:top]
    return AuditPage(rows, _encode(rows[-1].id) if more and rows else None)


def render(entry: AuditEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "time": iso(entry.at),
        "actor": entry.actor,
        "action": entry.action,
        "target": entry.target,
        "details": entry.details or {},
        "request_id": entry.request_id,
        "channel": entry.channel,
    }


def _encode(last_id: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"before": last_id}).encode()).decode().rstrip("=")


def _decode(token: str) -> int:
    try:
        padded = token + "=" * (-len(token) % 4)
        before = json.loads(base64.urlsafe_b64decode(padded.encode()))["before"]
        if isinstance(before, int) and not isinstance(before, bool) and 0 < before < 2**62:
            return before
    except (ValueError, KeyError, TypeError, binascii.Error):
        pass
    raise validation_error(
        "$skipToken", "the continuation token is not one this server issued; follow the nextLink it returned"
    )
