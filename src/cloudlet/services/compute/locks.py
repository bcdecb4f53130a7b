"""Management locks stored per scope; evaluation lives in ``cloudlet.domain.compute.locks``."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import bindparam, delete, select
from sqlalchemy.orm import Session

from cloudlet.domain.compute.locks import Lock, LockLevel, scope_kind
from cloudlet.domain.errors import CloudletError, not_found
from cloudlet.services.access import audit
from cloudlet.services.core import effects
from cloudlet.services.core.clock import iso, utcnow
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.core.use_case import use_case
from cloudlet.store import db
from cloudlet.store.schema import ManagementLock


def ancestors(ref: WorkspaceRef, compute: str | None = None) -> list[str]:
    scopes = [f"/subscriptions/{ref.subscription_id}", ref.rg_scope, ref.arm_id]
    if compute:
        scopes.append(ref.compute_id(compute))
    return scopes


def _in_scopes(count: int) -> Any:
    columns = (ManagementLock.name, ManagementLock.level, ManagementLock.scope, ManagementLock.notes)
    return select(*columns).where(ManagementLock.scope.in_([bindparam(f"s{i}") for i in range(count)]))


# One statement per number of scopes (a workspace's 3, a compute's 4), each with its own bound
# parameters: an expanding IN is rendered again on every execution, ~30 µs of a compute show.
# Plain rows on the session's connection, not objects: the ORM's part of a statement (~60 µs of
# CPU) cost more than the query, which finds no lock on most computes.
_IN_SCOPES = {count: _in_scopes(count) for count in (3, 4)}


def effective(session: Session, ref: WorkspaceRef, compute: str | None = None) -> list[Lock]:
    scopes = ancestors(ref, compute)
    statement = _IN_SCOPES[len(scopes)]
    rows = db.rows_connection(session).execute(statement, {f"s{i}": scope for i, scope in enumerate(scopes)})
    return [
        Lock(name=name, level=LockLevel(level), scope=scope, notes=notes)
        for name, level, scope, notes in rows
    ]


def all_in_workspace(session: Session, ref: WorkspaceRef) -> list[Lock]:
    """Locks above the workspace plus those on the workspace and any of its computes."""
    rows = session.scalars(
        select(ManagementLock).where(
            ManagementLock.scope.in_(ancestors(ref)) | ManagementLock.scope.startswith(ref.arm_id + "/")
        )
    )
    return [_to_domain(row) for row in rows]


LOCK_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.() -]{0,89}$"


class LockUpdate(BaseModel):
    """A lock as a caller writes it."""

    model_config = ConfigDict(extra="forbid")

    level: LockLevel = Field(description="CanNotDelete or ReadOnly")
    notes: str | None = Field(default=None, max_length=512)
    name: str | None = Field(default=None, description="must match the URL when given")


def lock_target(scope: str, name: str) -> str:
    return f"{scope}/providers/Microsoft.Authorization/locks/{name}"


@use_case
def put(session: Session, scope: str, name: str, update: LockUpdate, actor: str) -> ManagementLock:
    if not re.fullmatch(LOCK_NAME, name):
        raise CloudletError(
            "ValidationError", "a lock name is 1-90 letters, digits, spaces, '_', '-', '.' or '()'", "lock"
        )
    if update.name is not None and update.name != name:
        raise CloudletError("ValidationError", f"the body names '{update.name}' but the URL '{name}'", "name")
    level, notes = update.level, update.notes
    row = session.scalar(
        select(ManagementLock).where(ManagementLock.scope == scope, ManagementLock.name == name)
    )
    old = None if row is None else {"level": row.level, "notes": row.notes}
    if row is None:
        row = ManagementLock(scope=scope, name=name, level=level.value, notes=notes, created_on=utcnow())
        session.add(row)
    else:
        row.level, row.notes = level.value, notes
    new = {"level": row.level, "notes": row.notes}
    if new != old:
        audit.record(session, actor, "lock.write", lock_target(scope, name), {"old": old, "new": new})
    effects.demand_changed(session)  # a lock may freeze or free a cluster's scaling
    session.commit()
    return row


def remove(session: Session, scope: str, name: str, actor: str) -> None:
    row = session.scalar(
        select(ManagementLock).where(ManagementLock.scope == scope, ManagementLock.name == name)
    )
    if row is None:
        raise not_found("Lock", name)
    audit.record(
        session, actor, "lock.delete", lock_target(scope, name), {"level": row.level, "notes": row.notes}
    )
    session.delete(row)
    effects.demand_changed(session)
    session.commit()


def remove_scope(session: Session, scope: str) -> None:
    """A deleted resource takes its own locks with it."""
    session.execute(delete(ManagementLock).where(ManagementLock.scope == scope))


def _to_domain(row: ManagementLock) -> Lock:
    return Lock(name=row.name, level=LockLevel(row.level), scope=row.scope, notes=row.notes)


def render(lock: Lock) -> dict[str, Any]:
    return {
        "name": lock.name,
        "level": lock.level.value,
        "scope": lock.scope,
        "scope_kind": scope_kind(lock.scope),
        "notes": lock.notes,
    }


def render_row(row: ManagementLock) -> dict[str, Any]:
    return {**render(_to_domain(row)), "created_on": iso(row.created_on)}
