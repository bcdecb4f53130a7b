"""A workspace's webhook signing secret: rotate it (which makes the first one), say whether it has
one, and hand the notification loop what signs (docs/observability.md "Signing secrets").

Only a workspace's Owner (or an administrator) may rotate or inspect it; the new secret is in the
rotation's answer only: no other read returns it, and it is never logged nor audited (the audit
entry names the rotation and its grace). The rules (which keys sign, the grace's bounds) are
``domain/jobs/webhook_secrets.py``.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from cloudlet.domain.access.roles import Access
from cloudlet.domain.errors import conflict, validation_error
from cloudlet.domain.jobs import webhook_secrets as rules
from cloudlet.services.access import audit, workspaces
from cloudlet.services.core.clock import WALL_CLOCK, Clock
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.services.core.use_case import use_case
from cloudlet.store.schema import WebhookSecret


def _at(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


def target(ref: WorkspaceRef) -> str:
    """The audit log's target: the workspace's id and the secret under it."""
    return f"{ref.arm_id}/webhookSecret"


@dataclass(frozen=True)
class Rotated:
    workspace: str
    secret: str  # shown once: in this answer, nowhere else
    rotated_at: float
    previous_valid_until: float | None

    def render(self) -> dict[str, Any]:
        return {
            "workspace": self.workspace,
            "secret": self.secret,
            "rotated_on": _at(self.rotated_at),
            "previous_valid_until": _at(self.previous_valid_until),
        }


@use_case
def rotate(
    session: Session,
    ref: WorkspaceRef,
    caller: Caller,
    grace_hours: int = rules.DEFAULT_GRACE_HOURS,
    clock: Clock = WALL_CLOCK,
) -> Rotated:
    """A new secret for the workspace's webhooks (its first, or in place of the current one),
    committed. The one it replaces (the server's, for the first) keeps signing beside it for
    GRACE_HOURS; a rotation within a grace ends the older secret's at once."""
    try:
        rules.check_grace_hours(grace_hours)
    except ValueError as exc:
        raise validation_error("grace_hours", str(exc)) from None
    ws = workspaces.resolve(session, ref, caller, Access.MANAGE)
    now = clock.now()
    new = rules.PREFIX + secrets.token_urlsafe(32)
    until = now + grace_hours * 3600 if grace_hours else None
    # Locked: two rotations at once each keep the one they replace (PostgreSQL; SQLite serializes).
    row = session.get(WebhookSecret, ws.id, with_for_update=True)
    first = row is None
    if row is None:
        row = WebhookSecret(workspace_id=ws.id, secret=new, previous_secret=None)
        session.add(row)
    else:
        row.previous_secret, row.secret = row.secret, new
    row.previous_until, row.rotated_at = until, now
    if until is None:
        row.previous_secret = None
    details = {"first": first, "grace_hours": grace_hours, "previous_valid_until": _at(until)}
    audit.record(session, caller.name, "webhookSecret.rotate", target(ref), details)
    try:
        session.commit()
    except IntegrityError:  # another request made the workspace's first secret meanwhile
        raise conflict(
            "WebhookSecretRotatedMeanwhile",
            f"workspace '{ref.workspace}' got its first webhook secret from another request just now; "
            "rotate again to get one you hold",
            "webhookSecret",
        ) from None
    return Rotated(ref.workspace, new, now, until)


def show(session: Session, ref: WorkspaceRef, caller: Caller, clock: Clock = WALL_CLOCK) -> dict[str, Any]:
    """Whether the workspace has a secret of its own, when it was rotated and until when the
    replaced one still signs; never the secret itself (it was shown once)."""
    ws = workspaces.resolve(session, ref, caller, Access.MANAGE)
    row = session.get(WebhookSecret, ws.id)
    if row is None:
        nothing = {"rotated_on": None, "previous_valid_until": None}
        return {"workspace": ref.workspace, "configured": False, **nothing}
    until = row.previous_until
    return {
        "workspace": ref.workspace,
        "configured": True,
        "rotated_on": _at(row.rotated_at),
        "previous_valid_until": _at(until) if until is not None and until > clock.now() else None,
    }
