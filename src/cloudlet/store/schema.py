"""The store's tables (SQLAlchemy 2 declarative). Migrations in ``migrations/`` must match.

Desired state (the compute's spec, operations asked for) and observed state (node counts,
instance state) live side by side. Rows that reconcilers act on carry a lease
(``lease_owner``, ``lease_expires_at``) and a ``fencing_token`` that grows with each claim.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    func,
    literal_column,
)
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
    # Disabled users keep their name (it owns instances and appears in the audit log) but none of
    # their keys or tokens authenticate. Users are disabled, never deleted: see docs/access.md.
    disabled_on: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class ApiKey(Base):
    __tablename__ = "api_keys"
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id", ondelete="CASCADE"))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_on: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    # Revoked keys stay as rows (listed as Revoked) so that the audit log's key ids keep a referent.
    revoked_on: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    expires_on: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # Recorded at most every few minutes per key (identity.LAST_USED_RESOLUTION), not per request.
    last_used_on: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # The key that a rotation issued in this one's place.
    replaced_by: Mapped[str | None] = mapped_column(String(36), nullable=True)


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
    # Administrator policy (I3): None or True allows compute instances with public SSH access.
    allow_ssh_public_access: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    # Administrator setting: the size a job without ``compute`` runs serverless on (None: the
    # built-in default, services.jobs.jobs.DEFAULT_INSTANCE_TYPE).
    default_instance_type: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # Administrator setting: GiB the workspace's data may take (None: the server's default,
    # domain/assets/uploads.py; uploads past it are refused).
    storage_quota_gib: Mapped[int | None] = mapped_column(Integer, nullable=True)
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
    provider: Mapped[str] = mapped_column(String(32))  # a name in providers.registry.REGISTRY
    # The provider's settings, validated against its configuration model (no secrets in the clear).
    config: Mapped[dict[str, Any]] = mapped_column(default=dict)
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
    # Nodes and operations name a compute by id: on SQLite a deleted compute's id must not come back.
    __table_args__ = (UniqueConstraint("workspace_id", "name"), {"sqlite_autoincrement": True})
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
    # The autoscaler's last decision, in numbers and words (observed: it depends on time and jobs).
    target_node_count: Mapped[int | None] = mapped_column(Integer, nullable=True)
    scale_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    # Instances: schedules fire for occurrences in (schedule_checked_at, now]; each fires once.
    schedule_checked_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    errors: Mapped[list[Any]] = mapped_column(default=list)
    warnings: Mapped[list[Any]] = mapped_column(default=list)
    created_on: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_modified_on: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Operation(Base):
    """A long-running operation on one resource; the reconciler claims it with a lease and drives
    the steps that the resource type's step set (``control/steps.py``) gives its kind."""

    __tablename__ = "operations"
    __table_args__ = (Index("ix_operations_resource", "resource_type", "resource_id"),)
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id"))
    # The target, by type ("computes", as in the resource's ARM path) and row id. No foreign key:
    # the type decides the table, and a delete operation outlives its target's row.
    resource_type: Mapped[str] = mapped_column(String(32))
    # None only on rows carried from stores older than 0008 that had no target id.
    resource_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Kept with the operation: it is shown (and the target's id derived) after the target is gone.
    resource_name: Mapped[str] = mapped_column(String(128))
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


class Node(Base):
    """A cluster (or serverless) node: desired by the autoscaler, made by a provider, run by an agent."""

    __tablename__ = "nodes"
    __table_args__ = (Index("ix_nodes_owner", "owner_type", "owner_id"),)
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id"), index=True)
    # What the node is for: a compute (cluster or instance) or a job (serverless and local jobs),
    # by type and row id; queries go through ``services/compute/nodes.owned_by_*``. No foreign key: the
    # type decides the table, and a node's record outlives a deleted compute. owner_id is None
    # only on rows carried from stores older than 0008 whose owner was already gone.
    owner_type: Mapped[str] = mapped_column(String(16))
    owner_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The operation that made it (compute instances): a retried step finds the node it made.
    operation_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    installation_id: Mapped[str] = mapped_column(String(36))
    location: Mapped[str] = mapped_column(String(64))
    # The key of the provider that made it in ProviderSet: its location's name (older rows: the
    # provider kind, which still resolves).
    provider: Mapped[str] = mapped_column(String(64))
    provider_ref: Mapped[dict[str, Any]] = mapped_column(default=dict)
    size: Mapped[str] = mapped_column(String(64))
    family: Mapped[str] = mapped_column(String(64))
    vcpus: Mapped[int] = mapped_column(Integer)
    memory_gb: Mapped[float] = mapped_column(Float)
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    tier: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(24), index=True)
    # When it entered its state (epoch seconds): the stuck-state table's clock (domain/compute/nodes.py).
    state_since: Mapped[float] = mapped_column(Float)
    token_hash: Mapped[str] = mapped_column(String(64), index=True)
    resources: Mapped[dict[str, Any]] = mapped_column(default=dict)
    usage: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # Apps the agent runs (compute instances): {"jupyterlab": {"state", "port", "base_url", …}}.
    apps: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # An instance node's last report beyond its apps: activity (idleness), setup scripts, sshd, OS disk.
    report: Mapped[dict[str, Any]] = mapped_column(default=dict)
    current_run: Mapped[str | None] = mapped_column(String(40), nullable=True)
    idle_since: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_heartbeat: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    registered_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)


DISPLAY_NAME_KEPT = 256  # characters of a display name kept in its column (and its index)


def _display_name_of_spec(context: Any) -> str | None:
    value = (context.get_current_parameters().get("spec") or {}).get("display_name")
    # Cut: the column is in an index, whose entries have a size limit (PostgreSQL: ~2.7 kB).
    return None if value is None else str(value)[:DISPLAY_NAME_KEPT]


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (UniqueConstraint("workspace_id", "name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id"), index=True)
    name: Mapped[str] = mapped_column(String(128))
    compute_name: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    spec: Mapped[dict[str, Any]] = mapped_column()
    # The document's display_name (its first 256 characters), kept beside it so the job list's name
    # search reads a column, not every job's JSON (services/jobs/job_search.py); filled from SPEC on
    # insert, whoever inserts.
    display_name: Mapped[str | None] = mapped_column(
        String(DISPLAY_NAME_KEPT), nullable=True, default=_display_name_of_spec
    )
    # domain.jobs.job_kind.JobKind: "command" (pipeline, sweep and batch_scoring are reserved).
    kind: Mapped[str] = mapped_column(String(32), default="command", server_default="command")
    # The job that made this one (a pipeline step, a sweep trial); None for a job submitted alone.
    parent_job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id"), nullable=True, index=True)
    # A child's name within its parent (a step's name, a trial's number): unique per parent.
    child_key: Mapped[str | None] = mapped_column(String(255), nullable=True)
    # What determines a pipeline step's outputs, hashed (domain.jobs.parent_jobs: step reuse), and the
    # earlier job whose outputs a reused step took.
    reuse_key: Mapped[str | None] = mapped_column(String(64), nullable=True)
    reused_from: Mapped[str | None] = mapped_column(String(128), nullable=True)
    status: Mapped[str] = mapped_column(String(16), index=True)  # domain.jobs.job_status.JobStatus
    status_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    priority: Mapped[int] = mapped_column(Integer, default=2)
    instance_count: Mapped[int] = mapped_column(Integer, default=1)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer, default=3)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # What submission noticed but did not refuse (e.g. a CUDA image on a CPU size), in words.
    warnings: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    created_by: Mapped[str] = mapped_column(String(128))
    submitted_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # queue_settings.job_tier (issue 31): None is Azure's default tier; "spot" runs only on capacity
    # nobody else wants. A column, not only the spec: the scheduler reads it for the whole queue.
    job_tier: Mapped[str | None] = mapped_column(String(16), nullable=True)
    # Times the scheduler preempted the job to make room (checkpoint and requeue; issue 31). Bounded
    # by the preemption guard; such a requeue does not use one of the job's max_attempts.
    preemptions: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


Index("ix_jobs_parent_child_key", Job.parent_job_id, Job.child_key, unique=True)
Index("ix_jobs_reuse_key", Job.workspace_id, Job.reuse_key)
# The parent-job loop's question on every pass: which parents are still active.
Index("ix_jobs_kind_status", Job.kind, Job.status)
# A compute's queue in scheduling order (spot tier last, priority high first, then FIFO): the head is
# read on every submission and exit, and with the index in that order it is read without a sort.
# The spot test is never NULL (coalesce), so SQLite and PostgreSQL sort it alike (migration 0033).
SPOT_LAST = func.coalesce(Job.job_tier, literal_column("''")) == literal_column("'spot'")
Index(
    "ix_jobs_queue_order",
    Job.workspace_id,
    Job.compute_name,
    Job.status,
    SPOT_LAST,
    Job.priority.desc(),
    Job.submitted_at,
)
# The job list's pages (services/jobs/job_search.py), newest first with ties by id: the top-level list
# (or one parent's children), all jobs, and the same under the filters the list is read with most.
# The top-level one also carries the names, so a name search tests them in the index and reads only
# the matching jobs' rows (2.4x faster over 100,000 jobs on SQLite).
Index(
    "ix_jobs_list_top",
    Job.workspace_id,
    Job.parent_job_id,
    Job.submitted_at,
    Job.id,
    Job.name,
    Job.display_name,
)
Index("ix_jobs_list_all", Job.workspace_id, Job.submitted_at, Job.id)
# The parent last, after the order: a status page's count (up to 10,000 matches) tests top-level in
# the index instead of reading each match's row, and the page still reads in submission order.
Index("ix_jobs_list_status", Job.workspace_id, Job.status, Job.submitted_at, Job.id, Job.parent_job_id)
Index("ix_jobs_list_compute", Job.workspace_id, Job.compute_name, Job.submitted_at, Job.id)
Index("ix_jobs_list_creator", Job.workspace_id, Job.created_by, Job.submitted_at, Job.id)


# How long a job ran; -1 until it ended (a key that grew with the clock would break paging). The
# duration sort orders by this very expression, so it reads this index instead of sorting. No
# parent column between the workspace and the key: PostgreSQL's planner takes "parent IS NULL" as
# a filter, not an equality, so with it there it would not read this index in order (it sorted).
JOB_DURATION = func.coalesce(Job.ended_at - Job.started_at, literal_column("-1.0"))
Index("ix_jobs_list_duration", Job.workspace_id, JOB_DURATION, Job.submitted_at, Job.id)

# Indexes a migration makes only where the store can (PostgreSQL with the pg_trgm extension), so
# not in this model: the name search's trigram index (migration 0027). Schema comparisons skip them.
OPTIONAL_INDEXES = frozenset({"ix_jobs_name_trgm"})


class JobRun(Base):
    """One process group of one attempt of a job on one node (rank)."""

    __tablename__ = "job_runs"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    rank: Mapped[int] = mapped_column(Integer)
    node_id: Mapped[str] = mapped_column(String(32), index=True)
    state: Mapped[str] = mapped_column(String(16), index=True)
    spec: Mapped[dict[str, Any]] = mapped_column()
    pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    reason: Mapped[str | None] = mapped_column(String(32), nullable=True)
    log_size: Mapped[int] = mapped_column(Integer, default=0)
    assigned_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)


# The runs that ended lately (the fair-share usage of a compute is brought up to date from them each
# round, however long its history: services/jobs/fair_usage.py; migration 0033).
Index("ix_job_runs_ended_at", JobRun.ended_at)


class JobResourceBucket(Base):
    """A job's resource samples on one node, downsampled (``domain/jobs/resource_samples.py``): the
    mean (CPU, I/O, network, GPU %) or maximum (memory, disk, GPU memory) of `n` samples within
    [start, start + the level's width). NULL: not measured (no GPU on the node)."""

    __tablename__ = "job_resource_buckets"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    node_id: Mapped[str] = mapped_column(String(32))
    level: Mapped[int] = mapped_column(Integer)
    start: Mapped[float] = mapped_column(Float)
    n: Mapped[int] = mapped_column(Integer)
    cpu_percent: Mapped[float | None] = mapped_column(Float, nullable=True)
    memory_bytes: Mapped[float | None] = mapped_column(Float, nullable=True)
    read_bps: Mapped[float | None] = mapped_column(Float, nullable=True)
    write_bps: Mapped[float | None] = mapped_column(Float, nullable=True)
    disk_used_bytes: Mapped[float | None] = mapped_column(Float, nullable=True)
    net_rx_bps: Mapped[float | None] = mapped_column(Float, nullable=True)
    net_tx_bps: Mapped[float | None] = mapped_column(Float, nullable=True)
    gpu_percent: Mapped[float | None] = mapped_column(Float, nullable=True)
    gpu_memory_bytes: Mapped[float | None] = mapped_column(Float, nullable=True)
    gpu_count: Mapped[float | None] = mapped_column(Float, nullable=True)


Index(
    "ix_job_resource_buckets_key",
    JobResourceBucket.job_id,
    JobResourceBucket.node_id,
    JobResourceBucket.level,
    JobResourceBucket.start,
    unique=True,
)


class CodeAsset(Base):
    __tablename__ = "code_assets"
    __table_args__ = (UniqueConstraint("workspace_id", "hash"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id"))
    hash: Mapped[str] = mapped_column(String(64))
    size: Mapped[int] = mapped_column(Integer)
    created_on: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Asset(Base):
    """One version of a data, model or environment asset (``domain/assets/assets.py``). ``spec`` is the
    validated document (its path an ``azureml://datastores/…`` URI or https); ``archived``
    versions are hidden from lists and ``@latest`` but still resolve by explicit version."""

    __tablename__ = "assets"
    __table_args__ = (UniqueConstraint("workspace_id", "kind", "name", "version"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id"))
    kind: Mapped[str] = mapped_column(String(16))  # data | model | environment
    name: Mapped[str] = mapped_column(String(255))
    version: Mapped[str] = mapped_column(String(64))
    spec: Mapped[dict[str, Any]] = mapped_column()
    archived: Mapped[bool] = mapped_column(Boolean, default=False)
    created_by: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[float] = mapped_column(Float)
    modified_at: Mapped[float] = mapped_column(Float)


class AssetUse(Base):
    """A job's use of an asset version, recorded at submission: an input or its environment
    (resolved then, so a later version does not change a queued job; a version in use by a job
    that has not ended cannot be deleted), or an output to register as a version when the job
    completes (``asset_id`` set once registered)."""

    __tablename__ = "asset_uses"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    role: Mapped[str] = mapped_column(String(16))  # input | environment | output
    field: Mapped[str] = mapped_column(String(300))  # inputs.x, environment, outputs.y
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(255))
    version: Mapped[str | None] = mapped_column(String(64), nullable=True)
    asset_id: Mapped[int | None] = mapped_column(
        ForeignKey("assets.id", ondelete="SET NULL"), nullable=True, index=True
    )


class CodeVersion(Base):
    """A named, versioned code asset as Azure ML has them (``codes/{name}/versions/{v}``): where
    the SDK uploaded it, the content hash it is looked up by, and the native snapshot
    (``code_assets.hash``) a job's ``codeId`` runs."""

    __tablename__ = "code_versions"
    __table_args__ = (
        UniqueConstraint("workspace_id", "name", "version"),
        Index("ix_code_versions_hash", "workspace_id", "hash_sha256"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id"))
    name: Mapped[str] = mapped_column(String(255))
    version: Mapped[str] = mapped_column(String(64))
    code_uri: Mapped[str] = mapped_column(String(2048))
    hash_sha256: Mapped[str | None] = mapped_column(String(64))
    hash_version: Mapped[str | None] = mapped_column(String(16))
    snapshot: Mapped[str] = mapped_column(String(64))
    is_anonymous: Mapped[bool] = mapped_column(Boolean, default=False)
    description: Mapped[str | None] = mapped_column(Text)
    tags: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_by: Mapped[str] = mapped_column(String(255))
    created_on: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class AuditEntry(Base):
    """Who changed what: written in the same transaction as the change (``services/access/audit.py``)."""

    __tablename__ = "audit_log"
    # Integer ids grow with insertion: pages run newest first by id, and a continuation token is
    # the last id a page returned.
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    # A principal's name, or ``system:<component>`` for the control plane itself.
    actor: Mapped[str] = mapped_column(String(160), index=True)
    action: Mapped[str] = mapped_column(String(64), index=True)
    target: Mapped[str] = mapped_column(String(1024), index=True)
    details: Mapped[dict[str, Any]] = mapped_column(default=dict)
    request_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # The front door the change came through (``audit.CHANNELS``); None for the control plane's own.
    channel: Mapped[str | None] = mapped_column(String(16), nullable=True)


class Lease(Base):
    """A named lease with a fencing token (e.g. ``compute:12``: one replica reconciles a cluster)."""

    __tablename__ = "leases"
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    owner: Mapped[str | None] = mapped_column(String(64), nullable=True)
    expires_at: Mapped[float] = mapped_column(Float, default=0.0)
    token: Mapped[int] = mapped_column(Integer, default=0)


# -- experiment tracking (MLflow's tracking API, api/mlflow/; services/tracking/tracking.py) -------------
class TrackingExperiment(Base):
    """An MLflow experiment of a workspace. Times are MLflow's: milliseconds since the epoch."""

    __tablename__ = "tracking_experiments"
    __table_args__ = (UniqueConstraint("workspace_id", "name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id"))
    name: Mapped[str] = mapped_column(String(256))
    lifecycle_stage: Mapped[str] = mapped_column(String(16), default="active")  # active | deleted
    tags: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[int] = mapped_column(BigInteger)


class TrackingRun(Base):
    """An MLflow run. A job's run has the job's name as its id and ``job_id`` set: its status and
    times are read from the job (they follow it); any other run keeps its own."""

    __tablename__ = "tracking_runs"
    __table_args__ = (UniqueConstraint("workspace_id", "run_uuid"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id"))
    experiment_id: Mapped[int] = mapped_column(ForeignKey("tracking_experiments.id"), index=True)
    run_uuid: Mapped[str] = mapped_column(String(128))
    job_id: Mapped[int | None] = mapped_column(
        ForeignKey("jobs.id", ondelete="CASCADE"), nullable=True, unique=True
    )
    name: Mapped[str] = mapped_column(String(256))
    user_id: Mapped[str] = mapped_column(String(256))
    status: Mapped[str] = mapped_column(String(16))  # MLflow's RunStatus (not read for a job's run)
    start_time: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    end_time: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    lifecycle_stage: Mapped[str] = mapped_column(String(16), default="active")
    inputs: Mapped[list[Any]] = mapped_column(default=list)  # log-inputs' dataset inputs
    outputs: Mapped[list[Any]] = mapped_column(default=list)  # log-outputs' models ({model_id, step})


class TrackingMetric(Base):
    """Every value logged for a metric (its history). NaN is kept as ``is_nan`` with value 0: SQLite
    stores a NaN REAL as NULL."""

    __tablename__ = "tracking_metrics"
    __table_args__ = (Index("ix_tracking_metrics_history", "run_id", "key", "step", "timestamp"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("tracking_runs.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(250))
    value: Mapped[float] = mapped_column(Float)
    is_nan: Mapped[bool] = mapped_column(Boolean, default=False)
    timestamp: Mapped[int] = mapped_column(BigInteger)
    step: Mapped[int] = mapped_column(BigInteger, default=0)


class TrackingLatestMetric(Base):
    """A metric's latest value per run (highest step, then timestamp, then value, as MLflow
    orders them), kept on write so that job show and sweeps read one row per metric."""

    __tablename__ = "tracking_latest_metrics"
    run_id: Mapped[int] = mapped_column(ForeignKey("tracking_runs.id", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(String(250), primary_key=True)
    value: Mapped[float] = mapped_column(Float)
    is_nan: Mapped[bool] = mapped_column(Boolean, default=False)
    timestamp: Mapped[int] = mapped_column(BigInteger)
    step: Mapped[int] = mapped_column(BigInteger, default=0)


class TrackingParam(Base):
    """A run's parameter: written once (MLflow refuses a different value for a logged key)."""

    __tablename__ = "tracking_params"
    run_id: Mapped[int] = mapped_column(ForeignKey("tracking_runs.id", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(String(250), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class TrackingTag(Base):
    __tablename__ = "tracking_tags"
    run_id: Mapped[int] = mapped_column(ForeignKey("tracking_runs.id", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(String(250), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class TrackingLoggedModel(Base):
    """An MLflow 3 logged model (``mlflow.<flavor>.log_model``): its artifacts are its run's, under
    ``models/<model id>/``."""

    __tablename__ = "tracking_logged_models"
    __table_args__ = (UniqueConstraint("workspace_id", "model_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id"))
    model_id: Mapped[str] = mapped_column(String(64))
    experiment_id: Mapped[int] = mapped_column(ForeignKey("tracking_experiments.id"))
    run_id: Mapped[int] = mapped_column(ForeignKey("tracking_runs.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(256))
    model_type: Mapped[str | None] = mapped_column(String(256), nullable=True)
    status: Mapped[str] = mapped_column(String(32))  # LOGGED_MODEL_PENDING | _READY | _UPLOAD_FAILED
    status_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    creator: Mapped[str] = mapped_column(String(256))
    tags: Mapped[dict[str, Any]] = mapped_column(default=dict)
    params: Mapped[dict[str, Any]] = mapped_column(default=dict)
    lifecycle_stage: Mapped[str] = mapped_column(String(16), default="active")
    created_at: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[int] = mapped_column(BigInteger)


class OnlineEndpoint(Base):
    """A managed online endpoint (``domain/endpoints/online_endpoints.py``): its validated spec (auth mode,
    traffic, mirror traffic) and its two keys; the gateway (``services/online_gateway.py``) holds a
    copy in memory, refreshed after each change."""

    __tablename__ = "online_endpoints"
    __table_args__ = (UniqueConstraint("workspace_id", "name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id"))
    name: Mapped[str] = mapped_column(String(64))
    spec: Mapped[dict[str, Any]] = mapped_column(default=dict)
    primary_key: Mapped[str] = mapped_column(String(64))
    secondary_key: Mapped[str] = mapped_column(String(64))
    provisioning_state: Mapped[str] = mapped_column(String(32))
    created_by: Mapped[str] = mapped_column(String(255))
    created_on: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class OnlineDeployment(Base):
    """A deployment of an online endpoint: its spec, its state, the stage it is at and why it failed.
    ``generation`` grows with each update, so replicas of an older spec are told apart."""

    __tablename__ = "online_deployments"
    __table_args__ = (UniqueConstraint("endpoint_id", "name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    endpoint_id: Mapped[int] = mapped_column(ForeignKey("online_endpoints.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))
    spec: Mapped[dict[str, Any]] = mapped_column(default=dict)
    provisioning_state: Mapped[str] = mapped_column(String(32))
    stage: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    generation: Mapped[int] = mapped_column(Integer, default=1)
    local: Mapped[bool] = mapped_column(Boolean, default=False)
    created_by: Mapped[str] = mapped_column(String(255))
    created_on: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # The online lease holder's report of its replicas (control/online_serving.py), for every
    # other server's gateway; and autoscale's current count, which a restart starts from.
    serving: Mapped[dict[str, Any] | None] = mapped_column(nullable=True)
    autoscaled_instances: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Until when (epoch seconds) a server that does not hold the online lease holds a request for
    # the deployment with no replica ready: the holder counts it as held (scale from zero).
    demand_until: Mapped[float | None] = mapped_column(Float, nullable=True)


class OnlineDeploymentMetrics(Base):
    """A deployment's request metrics, summed over every worker of every server: each adds what
    its gateway counted since its last flush (``control/online_loop.py``), so ``show`` reports
    the deployment's requests, not one worker's."""

    __tablename__ = "online_deployment_metrics"
    deployment_id: Mapped[int] = mapped_column(
        ForeignKey("online_deployments.id", ondelete="CASCADE"), primary_key=True
    )
    requests: Mapped[int] = mapped_column(BigInteger, default=0)
    failures: Mapped[int] = mapped_column(BigInteger, default=0)
    latency_ms: Mapped[float] = mapped_column(Float, default=0.0)


class BatchEndpoint(Base):
    """A batch endpoint (``domain/endpoints/batch_endpoints.py``): its validated document (name, default
    deployment). Invoking it makes a ``batch_scoring`` job; it owns no nodes."""

    __tablename__ = "batch_endpoints"
    __table_args__ = (UniqueConstraint("workspace_id", "name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id"))
    name: Mapped[str] = mapped_column(String(64))
    spec: Mapped[dict[str, Any]] = mapped_column()
    created_by: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[float] = mapped_column(Float)
    modified_at: Mapped[float] = mapped_column(Float)


class BatchDeployment(Base):
    """A batch endpoint's deployment: its validated document (model, code, environment, cluster,
    mini-batch settings); deleted with its endpoint."""

    __tablename__ = "batch_deployments"
    __table_args__ = (UniqueConstraint("endpoint_id", "name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    endpoint_id: Mapped[int] = mapped_column(ForeignKey("batch_endpoints.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    spec: Mapped[dict[str, Any]] = mapped_column()
    created_by: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[float] = mapped_column(Float)
    modified_at: Mapped[float] = mapped_column(Float)


class SshHostKey(Base):
    """An SSH host's key, learned on first use (``domain/compute/host_keys.py``): per ``scope`` (a location
    name, or ``vm:<compute id>`` for an attached VM), address and port. ``refused_key``: the last
    different key the host presented (refused; ``location update --accept-host-key`` takes it)."""

    __tablename__ = "ssh_host_keys"
    __table_args__ = (UniqueConstraint("scope", "address", "port"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    scope: Mapped[str] = mapped_column(String(80))
    address: Mapped[str] = mapped_column(String(255))
    port: Mapped[int] = mapped_column(Integer)
    key_type: Mapped[str] = mapped_column(String(64))
    key: Mapped[str] = mapped_column(Text)
    first_seen: Mapped[float] = mapped_column(Float)
    refused_key: Mapped[str | None] = mapped_column(Text, nullable=True)
    refused_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class StudioSession(Base):
    """A studio browser session, or a one-time sign-in link (``kind``), for a principal and the
    API key it signed in with (``services/access/studio_sessions.py``). Only the SHA-256 of the cookie's
    (or link's) random value is stored. Who the session stands for is checked on each request as
    an access token minted from that key is (``identity.issuer``): revoking the key or disabling
    the user ends it."""

    __tablename__ = "studio_sessions"
    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))  # "session" or "link"
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id", ondelete="CASCADE"), index=True)
    key_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    csrf_token: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)
    last_seen_at: Mapped[float] = mapped_column(Float)  # written at most every TOUCH_RESOLUTION_S
    expires_at: Mapped[float] = mapped_column(Float)  # the absolute expiry


class LifecycleEvent(Base):
    """One lifecycle change of a job, compute, node, operation or deployment, written in the
    transaction that made it (``services/core/events.py``). ``seq`` orders the feed: on PostgreSQL
    the inserts are serialized to commit order, so a reader that has seen N never misses a lower
    one committed later. Pruned past a retention window (``control/event_retention.py``)."""

    __tablename__ = "events"
    # A pruned seq must never come back (SQLite would reuse the highest after deletes).
    __table_args__ = (Index("ix_events_workspace_seq", "workspace_id", "seq"), {"sqlite_autoincrement": True})
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[float] = mapped_column(Float, index=True)
    # No foreign key: events outlive what they tell of (a deleted compute, a deleted workspace).
    workspace_id: Mapped[int] = mapped_column(Integer)
    type: Mapped[str] = mapped_column(String(16))  # domain.events.EventType
    name: Mapped[str] = mapped_column(String(255))
    compute: Mapped[str | None] = mapped_column(String(64), nullable=True)
    from_state: Mapped[str | None] = mapped_column(String(32), nullable=True)
    to_state: Mapped[str] = mapped_column(String(32))
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class EventHorizon(Base):
    """The feed's pruning mark (one row, id 1): every seq below ``pruned_below`` is gone, so a
    reader that last saw less than ``pruned_below - 1`` missed some (a gap above it is only a
    rolled-back transaction's)."""

    __tablename__ = "event_horizon"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    pruned_below: Mapped[int] = mapped_column(Integer, default=0)


class NotificationDelivery(Base):
    """One notification of a job event to send: an email to a recipient or a call of a webhook
    (``domain/jobs/notifications.py``). Written in the transaction that ends the job (an outbox:
    ``services/jobs/notifications.py``), sent and retried by the notification loop, which records
    each try here (the job's delivery log)."""

    __tablename__ = "notification_deliveries"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))  # "email" or "webhook"
    target: Mapped[str] = mapped_column(String(255))  # the recipient, or the webhook's name
    event: Mapped[str] = mapped_column(String(32))  # "job_completed", "job_failed", "job_cancelled"
    # What the message says (job, status, error, workspace, the studio path): fixed at the event.
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16))  # "pending", "delivered", "failed" (given up)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_status: Mapped[int | None] = mapped_column(Integer, nullable=True)  # HTTP status / SMTP code
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    next_try_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    delivered_at: Mapped[float | None] = mapped_column(Float, nullable=True)


# The notification loop's question on every pass: which deliveries are due.
Index("ix_notification_deliveries_due", NotificationDelivery.state, NotificationDelivery.next_try_at)


class WebhookSecret(Base):
    """A workspace's webhook signing secret (``domain/jobs/webhook_secrets.py``): made and shown
    once by its first rotation, rotated by an Owner, read only by the notification loop to sign.
    Stored as is, as the installation's token secret is: it must be used, not just compared. It
    is never part of a job, a view or a log."""

    __tablename__ = "webhook_secrets"
    workspace_id: Mapped[int] = mapped_column(
        ForeignKey("workspaces.id", ondelete="CASCADE"), primary_key=True
    )
    secret: Mapped[str] = mapped_column(String(64))
    # The secret the last rotation replaced, signing beside the new one until ``previous_until``
    # (epoch seconds); NULL with a time set: the replaced one was the server's own.
    previous_secret: Mapped[str | None] = mapped_column(String(64), nullable=True)
    previous_until: Mapped[float | None] = mapped_column(Float, nullable=True)
    rotated_at: Mapped[float] = mapped_column(Float)


class Team(Base):
    """A group of users that shares a pool's cores (issue 31, weighted fair share). Teams are the
    installation's, like users; a team's share of a pool is a ``TeamShare``."""

    __tablename__ = "teams"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    description: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)


class TeamMember(Base):
    """A user (a principal's name, as jobs record ``created_by``) in a team: one team per user."""

    __tablename__ = "team_members"
    principal_name: Mapped[str] = mapped_column(String(128), primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)


class TeamShare(Base):
    """A team's share (a weight) of one pool's cores and how many cores beyond its entitlement it
    may borrow while others leave them idle (None: any idle capacity; 0: never borrows). A pool is
    a location (``workspace_id`` None) or one compute of a workspace; a compute's own shares, where
    it has any, win over its location's (``domain/jobs/fair_share.py``)."""

    __tablename__ = "team_shares"
    __table_args__ = (UniqueConstraint("team_id", "pool_kind", "workspace_id", "pool_name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    pool_kind: Mapped[str] = mapped_column(String(16))  # "location" or "compute"
    workspace_id: Mapped[int | None] = mapped_column(
        ForeignKey("workspaces.id", ondelete="CASCADE"), nullable=True
    )
    pool_name: Mapped[str] = mapped_column(String(64))  # the location's or the compute's name
    share: Mapped[float] = mapped_column(Float)
    borrow_limit: Mapped[float | None] = mapped_column(Float, nullable=True)


# The scheduler's question each pass: the shares of one pool.
Index("ix_team_shares_pool", TeamShare.pool_kind, TeamShare.workspace_id, TeamShare.pool_name)


class JobSchedule(Base):
    """A job schedule (``az ml schedule``; ``domain/jobs/job_schedule.py``): its document (trigger
    and a full ``create_job`` job document) and what the schedule loop keeps to fire it once per
    fire time (``control/job_schedules.py``)."""

    __tablename__ = "job_schedules"
    __table_args__ = (UniqueConstraint("workspace_id", "name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    spec: Mapped[dict[str, Any]] = mapped_column()  # the schedule document, is_enabled aside
    is_enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    created_by: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    # Fire times after this instant are due (epoch seconds): creation, the last fire acted on, the
    # last enable or trigger change; a fire is recorded here in the transaction that makes its job.
    fired_through: Mapped[float] = mapped_column(Float)
    # The next fire time (NULL: disabled or ended), indexed so the loop reads only due schedules.
    next_fire_at: Mapped[float | None] = mapped_column(Float, nullable=True, index=True)
    last_fired_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_job_name: Mapped[str | None] = mapped_column(String(128), nullable=True)
    # The last fire that could not make its job (bad compute, quota…), with when; cleared by a good one.
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    last_error_at: Mapped[float | None] = mapped_column(Float, nullable=True)
