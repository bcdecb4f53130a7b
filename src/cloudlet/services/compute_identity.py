"""C13: a compute's managed identity. A cluster with ``identity: {type: system_assigned}`` gives its
jobs a token of its own principal (``<compute>.<workspace id>@identity``), never the submitter's.

Above ``services/identity.py`` (principals, tokens) and ``services/role_assignments.py`` (which
builds on identity): making the principal gives it a role.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from cloudlet.domain.roles import Role
from cloudlet.services import audit, identity, role_assignments
from cloudlet.store.schema import Workspace


def compute_identity_token(
    session: Session,
    compute_name: str,
    workspace_id: int,
    identity_spec: dict[str, object] | None,
    lifetime_s: int,
) -> str | None:
    """C13: a cluster with a managed identity gives its jobs a short-lived token of its own principal
    (``<compute>@identity``, Reader on the workspace unless granted more), never the submitter's."""
    if not identity_spec or identity_spec.get("type") in (None, "none"):
        return None
    name = f"{compute_name}.{workspace_id}{identity.IDENTITY_SUFFIX}"
    principal = identity.find_principal(session, name)
    if principal is None:
        actor = audit.system("dispatch")
        principal = identity.create_principal(session, name, actor)
        workspace = session.get(Workspace, workspace_id)
        assert workspace is not None
        role_assignments.assign(session, workspace, principal, Role.READER, actor)
        session.flush()
    token, _ = identity.mint_token(principal.id, identity.installation(session).token_secret, lifetime_s)
    return token
