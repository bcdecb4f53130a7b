"""C13: a compute's managed identity. A cluster with ``identity: {type: system_assigned}`` gives its
jobs a token of its own principal (``<compute>.<workspace id>@identity``), never the submitter's.

Above ``services/access/identity.py`` (principals, tokens) and ``services/access/role_assignments.py`` (which
builds on identity): making the principal gives it a role. The principal is made at submission
(the use case that grants a job its identity); placing the job only reads it.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from cloudlet.domain.access.roles import Role
from cloudlet.services.access import audit, identity, role_assignments
from cloudlet.store.schema import Workspace


def _principal_name(compute_name: str, workspace_id: int) -> str:
    return f"{compute_name}.{workspace_id}{identity.IDENTITY_SUFFIX}"


def _has_identity(identity_spec: dict[str, object] | None) -> bool:
    return bool(identity_spec) and (identity_spec or {}).get("type") not in (None, "none")


def grant_compute_identity(
    session: Session, compute_name: str, workspace_id: int, identity_spec: dict[str, object] | None
) -> None:
    """At submission: a job on a cluster with a managed identity runs as the cluster's own
    principal (Reader on the workspace unless granted more), made here with its role assignment
    and audit rows the first time a job needs it."""
    if not _has_identity(identity_spec):
        return
    name = _principal_name(compute_name, workspace_id)
    if identity.find_principal(session, name) is not None:
        return
    actor = audit.system("submission")
    principal = identity.create_principal(session, name, actor)
    workspace = session.get(Workspace, workspace_id)
    assert workspace is not None
    role_assignments.assign(session, workspace, principal, Role.READER, actor)
    session.flush()


def compute_identity_token(
    session: Session,
    compute_name: str,
    workspace_id: int,
    identity_spec: dict[str, object] | None,
    lifetime_s: int,
) -> str | None:
    """A short-lived token of the cluster's identity principal for a job placed on it (reads
    only); None when the cluster has no identity or its principal was never made."""
    if not _has_identity(identity_spec):
        return None
    principal = identity.find_principal(session, _principal_name(compute_name, workspace_id))
    if principal is None:
        return None
    token, _ = identity.mint_token(principal.id, identity.installation(session).token_secret, lifetime_s)
    return token
