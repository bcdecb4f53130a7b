"""Online endpoints' and deployments' writes as use cases: each makes its change with
``services/endpoints/online_endpoints.py`` (whose steps also run inside other transactions), records that
the endpoints changed, and commits; the publisher then wakes the online loop. The router parses,
makes one call here and renders what it gets back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.core.use_case import use_case
from cloudlet.services.endpoints import online_endpoints as online
from cloudlet.services.endpoints.online_endpoints import Written
from cloudlet.store.schema import OnlineDeployment, OnlineEndpoint, Workspace


def _find(session: Session, ws: Workspace, name: str) -> OnlineEndpoint | None:
    return next((r for r in online.list_endpoints(session, ws) if r.name == name), None)


@use_case
def put_endpoint(
    session: Session,
    ref: WorkspaceRef,
    ws: Workspace,
    name: str,
    doc: Any,
    actor: str,
    keep_auth_mode: bool = False,
) -> Written:
    """Create or replace endpoint NAME, committed. KEEP_AUTH_MODE (ARM's PUT, whose document may
    leave it out): an existing endpoint's auth_mode stays when DOC names none."""
    if keep_auth_mode and isinstance(doc, dict) and "auth_mode" not in doc:
        current = _find(session, ws, name)
        if current is not None:
            doc = {**doc, "auth_mode": current.spec.get("auth_mode")}
    written = online.put_endpoint(session, ref, ws, name, doc, actor)
    session.commit()
    return written


def delete_endpoint(
    session: Session, ref: WorkspaceRef, ws: Workspace, name: str, actor: str, missing_ok: bool = False
) -> bool:
    """Delete endpoint NAME and its deployments, committed; False when there is none and
    MISSING_OK (ARM's delete answers 204), else 404."""
    row = _find(session, ws, name) if missing_ok else online.get_endpoint(session, ws, name)
    if row is None:
        return False
    online.delete_endpoint(session, ref, row, actor)
    session.commit()
    return True


def regenerate(session: Session, ref: WorkspaceRef, row: OnlineEndpoint, key_type: str, actor: str) -> None:
    """A new primary or secondary key, committed."""
    online.regenerate(session, ref, row, key_type, actor)
    session.commit()


@dataclass
class DeploymentWritten:
    row: OnlineDeployment
    created: bool
    live: dict[str, Any] = field(default_factory=dict)


@use_case
def put_deployment(
    session: Session,
    ref: WorkspaceRef,
    ws: Workspace,
    endpoint: OnlineEndpoint,
    name: str,
    doc: Any,
    actor: str,
    local: bool = False,
    data: DataRoot | None = None,
    live: Callable[[Session], dict[str, Any]] | None = None,
) -> DeploymentWritten:
    """Create or replace deployment NAME of ENDPOINT, committed. LIVE: what its replicas are
    doing now, read in this transaction before the commit (a query after it would begin another)."""
    written = online.put_deployment(session, ref, ws, endpoint, name, doc, actor, local, data=data)
    seen = live(session) if live is not None else {}
    session.commit()
    return DeploymentWritten(written.row, written.created, seen)


def delete_deployment(
    session: Session,
    ref: WorkspaceRef,
    endpoint: OnlineEndpoint,
    name: str,
    actor: str,
    missing_ok: bool = False,
) -> bool:
    """Delete deployment NAME of ENDPOINT, committed; False when there is none and MISSING_OK,
    else 404."""
    if missing_ok:
        row = next((d for d in online.deployments_of(session, endpoint) if d.name == name), None)
        if row is None:
            return False
    else:
        row = online.get_deployment(session, endpoint, name)
    online.delete_deployment(session, ref, endpoint, row, actor)
    session.commit()
    return True


@use_case
def update_traffic(
    session: Session,
    ref: WorkspaceRef,
    row: OnlineEndpoint,
    actor: str,
    traffic: dict[str, int] | None = None,
    mirror: dict[str, int] | None = None,
) -> OnlineEndpoint:
    """New traffic and mirror weights for ROW (``az ml online-endpoint update --traffic``),
    checked by the endpoint's own rules (sum 100 or 0, one mirror at most 50 %), committed."""
    updated = online.update_traffic(session, ref, row, actor, traffic, mirror)
    session.commit()
    return updated
