"""Management locks (C6), evaluated over plain data.

Scopes are ARM-style resource ids; a lock applies to its scope and everything below it.
``CanNotDelete`` blocks delete; ``ReadOnly`` blocks every write. A lock on the resource group (or
subscription) also blocks a cluster's scaling, because nodes are created and removed inside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from cloudlet.domain.errors import CloudletError


class LockLevel(StrEnum):
    CAN_NOT_DELETE = "CanNotDelete"
    READ_ONLY = "ReadOnly"


class WriteKind(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    ACTION = "action"


@dataclass(frozen=True)
class Lock:
    name: str
    level: LockLevel
    scope: str
    notes: str | None = None

    @property
    def scope_kind(self) -> str:
        return scope_kind(self.scope)


def scope_kind(scope: str) -> str:
    """By position in the ARM id, so a resource group named 'workspaces' is still a resource group:
    /subscriptions/S (2) /resourceGroups/R (4) /providers/P/workspaces/W (8) /computes/C (10)."""
    depth = len(scope.strip("/").split("/"))
    return {2: "subscription", 4: "resource group", 8: "workspace"}.get(depth, "compute")


def scope_name(scope: str) -> str:
    return scope.rstrip("/").rsplit("/", 1)[-1]


def applies_to(lock: Lock, resource_id: str) -> bool:
    scope = lock.scope.rstrip("/").lower()
    rid = resource_id.rstrip("/").lower()
    return rid == scope or rid.startswith(scope + "/")


def check_write(locks: list[Lock], resource_id: str, kind: WriteKind) -> None:
    for lock in locks:
        if not applies_to(lock, resource_id):
            continue
        if lock.level is LockLevel.READ_ONLY or kind is WriteKind.DELETE:
            verb = {"delete": "deleted", "create": "created"}.get(kind.value, "changed")
            raise CloudletError(
                code="ScopeLocked",
                message=(
                    f"'{scope_name(resource_id)}' cannot be {verb}: {lock.level.value} lock "
                    f"'{lock.name}' on {lock.scope_kind} '{scope_name(lock.scope)}'. "
                    f"Remove the lock first (cloudlet lock delete -n {lock.name} …)."
                ),
                target=resource_id,
                status=409,
                details=[{"code": "ScopeLocked", "lock": lock.name, "scope": lock.scope}],
            )


@dataclass(frozen=True)
class ScalingBlock:
    reason: str
    lock: str
    scope: str
    fix: str

    def to_dict(self) -> dict[str, str]:
        return {"reason": self.reason, "lock": self.lock, "scope": self.scope, "fix": self.fix}


def scaling_block(locks: list[Lock], workspace_id: str) -> ScalingBlock | None:
    """A lock above the workspace (resource group or subscription) stops cluster scaling (C6)."""
    for lock in locks:
        if lock.scope_kind in ("resource group", "subscription") and applies_to(lock, workspace_id):
            where = f"{lock.scope_kind} '{scope_name(lock.scope)}'"
            return ScalingBlock(
                reason=f"scaling blocked by {lock.level.value} lock '{lock.name}' on {where}",
                lock=lock.name,
                scope=lock.scope,
                fix=(
                    "cluster nodes are created and removed inside the resource group, so a lock there "
                    "freezes the cluster (it stays 'resizing'); move the lock to the workspace or to "
                    "individual computes instead"
                ),
            )
    return None
