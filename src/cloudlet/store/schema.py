"""The store's tables (SQLAlchemy 2 declarative). Migrations in ``migrations/`` must match.

Desired state (the compute's spec, operations asked for) and observed state (node counts,
instance state) live side by side. Rows that reconcilers act on carry a lease
(``lease_owner``, ``lease_expires_at``) and a ``fencing_token`` that grows with each claim.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class Installation(Base):
    __tablename__ = "installation"
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    # Signs short-lived access tokens; shared through the store so every replica can verify them.
    token_secret: Mapped[str] = mapped_column(String(64))
    created_on: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Principal(Base):
    __tablename__ = "principals"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_on: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ApiKey(Base):
    __tablename__ = "api_keys"
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id", ondelete="CASCADE"))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_on: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)


class Subscription(Base):
    __tablename__ = "subscriptions"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    display_name: Mapped[str] = mapped_column(String(128))


class ResourceGroup(Base):
    __tablename__ = "resource_groups"
    __table_args__ = (UniqueConstraint("subscription_id", "name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    subscription_id: Mapped[str] = mapped_column(ForeignKey("subscriptions.id"))
    name: Mapped[str] = mapped_column(String(90))
    location: Mapped[str] = mapped_column(String(64))


class Workspace(Base):
    __tablename__ = "workspaces"
    __table_args__ = (UniqueConstraint("resource_group_id", "name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    resource_group_id: Mapped[int] = mapped_column(ForeignKey("resource_groups.id"))
    name: Mapped[str] = mapped_column(String(64))
    location: Mapped[str] = mapped_column(String(64))
    description: Mapped[str | None] = mapped_column(Text, nullable=True)
    tags: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_on: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class RoleAssignment(Base):
    __tablename__ = "role_assignments"
    __table_args__ = (UniqueConstraint("principal_id", "workspace_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id", ondelete="CASCADE"))
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"))
    role: Mapped[str] = mapped_column(String(16))


class Location(Base):
    __tablename__ = "locations"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    provider: Mapped[str] = mapped_column(String(32))
    capacity: Mapped[dict[str, Any]] = mapped_column(default=dict)


class QuotaLimit(Base):
    """An administrator's override of a default limit (defaults come from the size catalogue)."""

    __tablename__ = "quota_limits"
    __table_args__ = (UniqueConstraint("subscription_id", "location", "name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    subscription_id: Mapped[str] = mapped_column(String(64))
    location: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(64))
    limit: Mapped[int] = mapped_column(Integer)


class CustomSize(Base):
    __tablename__ = "custom_sizes"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    spec: Mapped[dict[str, Any]] = mapped_column()


class ManagementLock(Base):
    __tablename__ = "locks"
    __table_args__ = (UniqueConstraint("scope", "name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    scope: Mapped[str] = mapped_column(String(512), index=True)
    name: Mapped[str] = mapped_column(String(90))
    level: Mapped[str] = mapped_column(String(16))
    notes: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_on: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Compute(Base):
    __tablename__ = "computes"
    __table_args__ = (UniqueConstraint("workspace_id", "name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id"))
    name: Mapped[str] = mapped_column(String(64))
    type: Mapped[str] = mapped_column(String(32))
    location: Mapped[str] = mapped_column(String(64))
    size: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # Desired: the validated YAML document, defaults filled in.
    spec: Mapped[dict[str, Any]] = mapped_column()
    owner: Mapped[str | None] = mapped_column(String(128), nullable=True)
    created_by: Mapped[str] = mapped_column(String(128))
    # Observed.
    provisioning_state: Mapped[str] = mapped_column(String(16))
    state: Mapped[str | None] = mapped_column(String(16), nullable=True)
    current_node_count: Mapped[int] = mapped_column(Integer, default=0)
    errors: Mapped[list[Any]] = mapped_column(default=list)
    warnings: Mapped[list[Any]] = mapped_column(default=list)
    created_on: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_modified_on: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Operation(Base):
    """A long-running operation; the reconciler claims it with a lease and drives its steps."""

    __tablename__ = "operations"
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id"))
    compute_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    compute_name: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), index=True)
    step: Mapped[str] = mapped_column(String(32))
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_by: Mapped[str] = mapped_column(String(128))
    created_on: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    ended_on: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    lease_owner: Mapped[str | None] = mapped_column(String(64), nullable=True)
    lease_expires_at: Mapped[float] = mapped_column(Float, default=0.0)
    fencing_token: Mapped[int] = mapped_column(Integer, default=0)


class OperationStep(Base):
    """Journal of steps carried out: (operation, step) is unique, so a step is done at most once."""

    __tablename__ = "operation_steps"
    __table_args__ = (UniqueConstraint("operation_id", "step"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    operation_id: Mapped[str] = mapped_column(ForeignKey("operations.id", ondelete="CASCADE"), index=True)
    step: Mapped[str] = mapped_column(String(32))
    executor: Mapped[str] = mapped_column(String(64))
    fencing_token: Mapped[int] = mapped_column(Integer)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
