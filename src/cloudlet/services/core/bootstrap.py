"""First start: installation id, admin key, default subscription / resource group / workspace."""

from __future__ import annotations

import json
import os
import secrets
import uuid
from pathlib import Path

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from cloudlet.providers.registry import DEFAULT_PROVIDER
from cloudlet.services.access import api_keys, audit, identity
from cloudlet.services.access.workspaces import DEFAULT_LOCATION
from cloudlet.services.core.clock import utcnow
from cloudlet.store.schema import Installation, Location, ResourceGroup, Subscription, Workspace

DEFAULT_RESOURCE_GROUP = "default"
DEFAULT_WORKSPACE = "default"
# The local pool: room for a few 4-vCPU nodes on a small machine (overcommitted, see docs).
DEFAULT_LOCAL_CAPACITY = {"vcpus": 64, "memory_gb": 256, "gpus": 0, "overcommit": 8.0}


def bootstrap(session: Session, home: Path) -> Installation:
    """Idempotent; safe when several replicas start at once (the first one does the work)."""
    if session.bind is not None and session.bind.dialect.name == "postgresql":
        session.execute(text("LOCK TABLE installation IN EXCLUSIVE MODE"))
    existing = session.scalar(select(Installation))
    if existing is not None:
        return existing
    now = utcnow()
    inst = Installation(id=str(uuid.uuid4()), token_secret=secrets.token_hex(32), created_on=now)
    session.add(inst)
    actor = audit.system("bootstrap")
    admin = identity.create_principal(session, "admin", actor, is_admin=True)
    key = api_keys.issue(session, admin, actor)
    sub = Subscription(id=str(uuid.uuid4()), display_name="default")
    session.add(sub)
    session.add(
        Location(
            name=DEFAULT_LOCATION, provider=DEFAULT_PROVIDER, config={}, capacity=dict(DEFAULT_LOCAL_CAPACITY)
        )
    )
    session.flush()
    rg = ResourceGroup(subscription_id=sub.id, name=DEFAULT_RESOURCE_GROUP, location=DEFAULT_LOCATION)
    session.add(rg)
    session.flush()
    session.add(
        Workspace(
            resource_group_id=rg.id,
            name=DEFAULT_WORKSPACE,
            location=DEFAULT_LOCATION,
            tags={},
            created_on=now,
        )
    )
    session.flush()
    write_private(home / "credentials", json.dumps({"api_key": key.api_key, "principal": admin.name}))
    return inst


def default_scope(session: Session) -> dict[str, str]:
    sub = session.scalar(select(Subscription).order_by(Subscription.display_name != "default"))
    assert sub is not None
    return {
        "subscription_id": sub.id,
        "resource_group": DEFAULT_RESOURCE_GROUP,
        "workspace": DEFAULT_WORKSPACE,
        "location": DEFAULT_LOCATION,
    }


def write_client_config(
    home: Path, endpoint: str, scope: dict[str, str], extra: dict[str, str] | None = None
) -> None:
    """``config.json`` tells the CLI and client on this machine where the server is (EXTRA: the
    HTTPS listener's URL and CA file, rewritten on each start like the endpoint)."""
    path = home / "config.json"
    current: dict[str, str] = {}
    if path.exists():
        try:
            current = json.loads(path.read_text())
        except json.JSONDecodeError:
            current = {}
    merged = {
        **scope,
        **{k: v for k, v in current.items() if k in scope},
        "endpoint": endpoint,
        **(extra or {}),
    }
    path.write_text(json.dumps(merged, indent=2) + "\n")


def write_private(path: Path, content: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(content + "\n")
    os.chmod(path, 0o600)
