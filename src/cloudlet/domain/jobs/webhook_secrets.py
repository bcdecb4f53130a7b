"""A workspace's webhook signing secret: which keys sign a job notification's webhook body.

Each workspace may have its own secret (made and shown once by ``POST …/webhookSecret/rotate``,
docs/observability.md "Signing secrets"), so a receiver that can verify one workspace's webhooks
cannot forge another's. A rotation keeps the replaced secret signing for a grace period: a body
then carries two signatures (the new first), as Stripe's ``v1=`` entries do, so receivers switch
to the new secret whenever they are redeployed within it, with no window where nothing verifies.
A workspace without a secret of its own is signed with the server's (``CLOUDLET_WEBHOOK_SECRET``),
as before; the first rotation's grace keeps the server's secret signing beside the new one.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "whsec_"  # as Stripe's: a scanner (or a person) recognises a leaked one
MAX_GRACE_HOURS = 168  # a week: longer is a second live secret
DEFAULT_GRACE_HOURS = 24


@dataclass(frozen=True)
class WorkspaceSigning:
    """What a workspace's stored secret says about signing (no I/O: read by the outbox)."""

    secret: str
    previous: str | None
    # Until when (epoch seconds) the replaced secret still signs; None: it no longer does. With
    # ``previous`` None the replaced secret is the server's (the workspace's first rotation).
    previous_until: float | None


def signing_keys(workspace: WorkspaceSigning | None, server: bytes | None, now: float) -> list[bytes]:
    """The HMAC keys a webhook body is signed with at NOW, the current first: the workspace's secret
    (and the one it replaced, within its grace), else the server's secret, else none (unsigned)."""
    if workspace is None:
        return [server] if server else []
    keys = [workspace.secret.encode()]
    if workspace.previous_until is not None and now < workspace.previous_until:
        replaced = workspace.previous.encode() if workspace.previous is not None else server
        if replaced and replaced not in keys:
            keys.append(replaced)
    return keys


def check_grace_hours(hours: int) -> int:
    """A rotation's grace: 0 (the replaced secret stops signing at once) to ``MAX_GRACE_HOURS``."""
    if not 0 <= hours <= MAX_GRACE_HOURS:
        raise ValueError(f"grace_hours must be from 0 to {MAX_GRACE_HOURS}, got {hours}")
    return hours
