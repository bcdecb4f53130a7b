"""Jobs: submission (refuse what can never run), reading, cancelling, logs.

Placement, dispatch and completion are in ``services.jobs.dispatch``; the cluster reconciler calls them.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import Select, and_, bindparam, or_, select
from sqlalchemy.orm import Session, defer

from cloudlet.domain.access.roles import Access
from cloudlet.domain.compute import compute_types
from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.compute.lifecycle import InstanceState, ProvisioningState
from cloudlet.domain.errors import CloudletError, conflict, not_found, validation_error
from cloudlet.domain.jobs import job_inputs, job_kind, job_limits, job_spec, job_status, parent_kinds
from cloudlet.domain.jobs.job_kind import JobKind
from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.domain.jobs.parent_jobs import ParentKind
from cloudlet.domain.jobs.pipeline_jobs import setting_warnings
from cloudlet.domain.paths import parse_datastore_uri
from cloudlet.services.access import workspaces
from cloudlet.services.assets import assets as asset_service
from cloudlet.services.assets import environments as environment_service
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import compute_identity, computes
from cloudlet.services.core import effects
from cloudlet.services.core.batch import Answer, Round, Work
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.services.core.storage import (
    DataRoot,
    empty_tar,
    is_folder_beneath,
    pack_beneath,
    read_beneath,
    relative_parts,
)
from cloudlet.services.jobs import pipelines
from cloudlet.store.schema import Compute, Job, JobRun, Workspace

LOCAL_COMPUTE = "local"
SERVERLESS = "serverless"


_JOB_ID = select(Job.id).where(Job.workspace_id == bindparam("ws"), Job.name == bindparam("name"))


Prepared = tuple[job_spec.CommandJobSpec | None, dict[str, Any]]  # no spec: a parent job
PARENT_TYPES = frozenset(kind.value for kind in (JobKind.PIPELINE, JobKind.SWEEP, JobKind.BATCH_SCORING))


def prepare(body: Any, name: str) -> Prepared:
    """Validate a job document (pure: done before the request touches the store, so the store's
    single writer is not held while pydantic works). Returns the spec and its stored form; a
    parent job's kind validates its own document (``domain.jobs.parent_kinds``) and it has no spec."""
    parent = parent_kind(body)
    if parent is not None:
        return None, parent.parse(body, name)
    spec = job_spec.parse_job(body, name)
    doc = job_inputs.with_blob_urls(spec.model_dump(mode="json", by_alias=True, exclude_none=True))
    doc.pop("$schema", None)
    return spec, doc


def parent_kind(doc: Any) -> ParentKind | None:
    """The kind of parent job a submitted document's ``type`` names; None for other types
    (command jobs, and types ``job_spec`` refuses with its own message). A parent type cloudlet
    cannot run yet is refused, naming it."""
    wanted = doc.get("type") if isinstance(doc, dict) else None
    if not isinstance(wanted, str) or wanted.lower() not in PARENT_TYPES:
        return None
    handler = parent_kinds.KINDS.get(JobKind(wanted.lower()))
    if handler is None:
        raise validation_error(
            "type", f"job type '{wanted}' is not supported yet; submit 'command' jobs", code="InvalidJobType"
        )
    return handler


def submission(
    ref: WorkspaceRef,
    name: str,
    prepared: Prepared,
    caller: Caller,
    data: DataRoot,
) -> Work:
    """The batched work of submitting a prepared job (``control/dispatch_batcher``): its answer,
    after commit, is the job. A cluster with an idle node starts it in the batch's scheduling
    round; one still queued wakes the autoscaler, unless its cluster already wants its maximum
    (it cannot raise it: at a busy cluster's top this saves a pass per submission)."""

    def work(round_: Round) -> Answer:
        session = round_.session
        workspace = workspaces.resolve(session, ref, caller, Access.WRITE, round_.memo)
        job, target = submit(
            session, workspace, name, prepared, caller, data, round_.memo, check_name=round_.alone
        )
        if target is not None:
            round_.fed[target.id] = target
        at_max = target is not None and (target.target_node_count or 0) >= target.spec.get("max_instances", 1)
        round_.rescale_if.append(lambda: job.status == JobStatus.QUEUED and not at_max)
        return lambda _placed: job

    return work


def submit(
    session: Session,
    ws: Workspace,
    name: str,
    prepared: Prepared,
    caller: Caller,
    data: DataRoot,
    memo: dict[Any, Any] | None = None,
    check_name: bool = True,
) -> tuple[Job, Compute | None]:
    """Record a queued job. MEMO (one transaction's lookups) spares a batch of submissions to
    the same compute its query. Without CHECK_NAME a taken name fails the insert (the unique
    constraint) instead of answering 409: for batches, which then replay each request alone."""
    spec, doc = prepared
    if check_name and session.scalar(_JOB_ID, {"ws": ws.id, "name": name}) is not None:
        raise conflict(
            "JobExists",
            f"a job named '{name}' already exists in this workspace; job names are "
            "unique (omit the name to get a generated one)",
            "name",
        )
    if spec is None:
        return _submit_parent(session, ws, name, doc, caller, data), None
    resolved = asset_service.resolve_job(session, ws, doc)  # azureml:name:1 / @latest → its path
    doc = resolved.doc  # resolved first: the CUDA check reads an environment asset's image
    warnings = environment_service.job_warnings(doc)  # first: an inline one may be refused
    compute_name, compute = _target(session, ws, doc, memo if memo is not None else {}, warnings)
    _check_inputs(ws, doc, data)
    if compute is not None:  # the job runs as the cluster's identity: granted now, not at placement
        compute_identity.grant_compute_identity(session, compute.name, ws.id, compute.spec.get("identity"))
    job = Job(
        workspace_id=ws.id,
        name=name,
        compute_name=compute_name,
        spec=doc,
        kind=job_kind.kind_of(doc).value,
        status=job_status.INITIAL.value,  # a new row: nothing to move from
        status_message=_waiting_message(compute),
        priority=job_spec.priority_value(spec),
        job_tier=job_spec.job_tier_value(spec),  # queue_settings.job_tier: spot waits for idle capacity
        instance_count=int(doc.get("resources", {}).get("instance_count", 1)),
        attempt=0,
        max_attempts=3,
        warnings=warnings or None,
        created_by=caller.name,
        submitted_at=time.time(),
    )
    session.add(job)
    session.flush()
    asset_service.record_uses(session, job, resolved.uses)
    return job, compute


def _submit_parent(
    session: Session, ws: Workspace, name: str, doc: dict[str, Any], caller: Caller, data: DataRoot
) -> Job:
    """Record a queued parent job (its kind validated DOC): it takes no node, so no compute
    (dispatch and the autoscaler never see it); the parent-job loop starts its children."""
    warnings: list[str] = []
    if doc.get("type") == JobKind.PIPELINE.value:  # registered components: the store knows them
        doc = pipelines.resolve(session, ws, doc, data)
        pipelines.register_inline(session, ws, doc, caller, data)  # the ids the facade shows resolve
        warnings = setting_warnings(doc)  # what Azure ML ignores, said rather than refused
    job = Job(
        workspace_id=ws.id,
        name=name,
        compute_name=None,
        spec=doc,
        kind=job_kind.kind_of(doc).value,
        status=job_status.INITIAL.value,
        status_message="waiting to start its first children",
        priority=job_spec.PRIORITIES[job_spec.DEFAULT_PRIORITY],
        instance_count=0,
        attempt=0,
        max_attempts=1,
        warnings=warnings or None,
        created_by=caller.name,
        submitted_at=time.time(),
    )
    session.add(job)
    session.flush()
    effects.parent_work(session)
    return job


def _waiting_message(compute: Compute | None) -> str:
    if compute is None or compute.type != ComputeType.COMPUTE_INSTANCE:
        return "waiting for nodes"
    if compute.state == InstanceState.RUNNING:
        return f"waiting for a free vCPU on compute instance '{compute.name}'"
    return (
        f"waiting: compute instance '{compute.name}' is {compute.state}; the job starts when it runs "
        f"(cloudlet compute start -n {compute.name})"
    )


def _target(
    session: Session, ws: Workspace, doc: dict[str, Any], memo: dict[Any, Any], warnings: list[str]
) -> tuple[str, Compute | None]:
    """The compute the job runs on (its name, and its record for a cluster); refuse jobs that can
    never run there (C14, T14); add to WARNINGS what it runs despite."""
    compute_name = doc.get("compute")
    count = int(doc.get("resources", {}).get("instance_count", 1))
    if compute_name is None:
        # No compute: serverless, on the size asked for or the workspace's default (Azure ML's
        # `az ml job create -f hello-world.yml`); the stored document says which it got.
        resources = doc.setdefault("resources", {})
        if not resources.get("instance_type"):
            resources["instance_type"] = workspaces.default_instance_type(ws)
        size = catalogue_service.current(session).require_size(
            str(resources["instance_type"]), ComputeType.AMLCOMPUTE, target="resources.instance_type"
        )
        job_limits.check_serverless_nodes(count)
        _check_cuda(session, size.name, doc, warnings)
        return SERVERLESS, None
    if compute_name == LOCAL_COMPUTE:
        if count != 1:
            raise CloudletError(
                "InvalidJob",
                "compute: local runs one process on this machine; use a cluster for instance_count > 1",
                "resources.instance_count",
            )
        return LOCAL_COMPUTE, None
    key = ("compute", ws.id, compute_name)
    compute = memo.get(key) or computes.find(session, ws, compute_name)
    if compute is None:
        raise CloudletError(
            "ComputeNotFound",
            f"compute '{compute_name}' does not exist in this workspace; create it or use `compute: local`",
            "compute",
            400,
        )
    if compute.type == ComputeType.VIRTUAL_MACHINE and not compute.spec.get("address"):
        raise CloudletError(
            "UnsupportedComputeForJob",
            f"'{compute_name}' is attached by its Azure resource_id only, which cloudlet cannot reach; "
            "attach the VM by 'address' (with ssh_settings) to run jobs on it",
            "compute",
        )
    if compute.type not in compute_types.RUNS_JOBS:
        raise CloudletError(
            "UnsupportedComputeForJob",
            f"'{compute_name}' is {compute.type}; jobs run on compute clusters (amlcompute), compute "
            "instances or `local` here",
            "compute",
        )
    if compute.provisioning_state in (ProvisioningState.DELETING.value, ProvisioningState.FAILED.value):
        raise CloudletError(
            "ComputeNotUsable", f"compute '{compute_name}' is {compute.provisioning_state}", "compute", 409
        )
    max_nodes = int(compute.spec.get("max_instances", 1)) if compute.type == ComputeType.AMLCOMPUTE else 1
    job_limits.check_cluster_nodes(count, max_nodes, compute_name, compute.type)
    _check_cuda(session, compute.size or "", doc, warnings)
    memo[key] = compute
    return compute_name, compute


def _check_cuda(session: Session, size_name: str, doc: dict[str, Any], warnings: list[str]) -> None:
    """T14: a CUDA environment on a GPU size whose GPUs cannot run it is refused; on a size
    without GPUs the job runs on the CPU, with a warning."""
    needed = required_cuda(doc)
    if needed is None:
        return
    catalogue = catalogue_service.current(session)
    size = catalogue.get(size_name)
    if size is None:
        return
    warning = catalogue.job_cuda_warning(size, needed)
    if warning is not None:
        warnings.append(warning)


def required_cuda(doc: dict[str, Any]) -> str | None:
    """The CUDA version a job's environment is built for, read from its image or curated name
    (e.g. ``…/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04``, ``AzureML-pytorch-1.13-…-cuda11.7-gpu``)."""
    env = doc.get("environment")
    values = [env] if isinstance(env, str) else [v for v in (env or {}).values() if isinstance(v, str)]
    text = " ".join(values)
    match = re.search(r"cuda[-_]?(\d+(?:\.\d+)?)", text, flags=re.IGNORECASE)
    return match.group(1) if match else None


def _check_inputs(ws: Workspace, doc: dict[str, Any], data: DataRoot) -> None:
    for name, value in (doc.get("inputs") or {}).items():
        if not isinstance(value, dict) or value.get("type") not in job_spec.PATH_TYPES:
            continue
        path = str(value.get("path", ""))
        if job_inputs.check_scheme(name, path):
            if value.get("type") not in job_inputs.URI_TYPES:  # e.g. a model asset kept at a URL
                raise CloudletError(
                    "UnsupportedInput",
                    f"input '{name}': nodes download http(s) inputs of type uri_file or uri_folder only, "
                    f"not {value.get('type')}; register it from a local copy or a datastore path",
                    f"inputs.{name}.path",
                )
            continue  # http(s): the node downloads it before the process starts
        parsed = parse_datastore_uri(path)
        if parsed is None:
            raise CloudletError(
                "InvalidInput",
                f"input '{name}' path '{path}' is not an azureml://datastores/... "
                "URI; local paths are uploaded by the CLI/client before submission",
                f"inputs.{name}.path",
            )
        datastore, relative = parsed
        if not data.datastore_path(ws.id, datastore, relative).exists():
            raise CloudletError(
                "InputNotFound", f"input '{name}': nothing at {path}; upload it first", f"inputs.{name}.path"
            )


def find_in(session: Session, workspace_id: int, name: str) -> Job | None:
    return session.scalar(select(Job).where(Job.workspace_id == workspace_id, Job.name == name))


def readable(session: Session, ref: WorkspaceRef, caller: Caller, name: str) -> tuple[Workspace, Job]:
    """The workspace and its job NAME, for a caller who may read it (404 otherwise): one query."""
    ws, job = workspaces.resolve_child(session, ref, caller, Access.READ, Job, name)
    if job is None:
        raise not_found("Job", name)
    return ws, job


_JOB_NAMED = select(Job).where(Job.workspace_id == bindparam("ws"), Job.name == bindparam("name"))


def get(session: Session, ws: Workspace, name: str) -> Job:
    job = session.scalar(_JOB_NAMED, {"ws": ws.id, "name": name})
    if job is None:
        raise not_found("Job", name)
    return job


def parent_of(session: Session, job: Job) -> Job | None:
    """The pipeline or sweep JOB is a step or trial of (None for a top-level job)."""
    return session.get(Job, job.parent_job_id) if job.parent_job_id is not None else None


class JobFields(Protocol):
    """What a job's view is made of: a ``Job`` row object, or the plain row a listing reads."""

    id: int
    name: str
    compute_name: str | None
    spec: dict[str, Any]
    status: str
    status_message: str | None
    attempt: int
    exit_code: int | None
    error: Any
    warnings: list[str] | None
    created_by: str
    submitted_at: float
    started_at: float | None
    ended_at: float | None


@dataclass(frozen=True)
class JobPage:
    jobs: Sequence[JobFields]
    next_token: str | None  # continues after the last job of this page; None on the last page


DEFAULT_PAGE = 100
MAX_PAGE = 1000
# A page is read as plain rows of the columns a view shows (no ORM objects: a page of jobs is the
# most expensive read clients poll), with statements built once per kind of filter.
LIST_COLUMNS = (  # what a job list shows of each job (also job_search's, which adds more)
    Job.id,
    Job.name,
    Job.compute_name,
    Job.spec,
    Job.status,
    Job.status_message,
    Job.attempt,
    Job.exit_code,
    Job.error,
    Job.warnings,
    Job.created_by,
    Job.submitted_at,
    Job.started_at,
    Job.ended_at,
)


@functools.cache
def _page_query(by_status: bool, by_compute: bool, after: bool, by_parent: bool = False) -> Select[Any]:
    query = select(*LIST_COLUMNS).where(Job.workspace_id == bindparam("ws"))
    if by_status:
        query = query.where(Job.status == bindparam("status"))
    if by_compute:
        query = query.where(Job.compute_name == bindparam("compute"))
    if by_parent:
        query = query.where(Job.parent_job_id == bindparam("parent"))
    else:  # as on Azure ML: a pipeline's steps and a sweep's trials are listed under their parent
        query = query.where(Job.parent_job_id.is_(None))
    if after:
        query = query.where(
            or_(
                Job.submitted_at < bindparam("submitted"),
                and_(Job.submitted_at == bindparam("submitted"), Job.id < bindparam("job")),
            )
        )
    return query.order_by(Job.submitted_at.desc(), Job.id.desc()).limit(bindparam("limit"))


def list_jobs(
    session: Session,
    ws: Workspace,
    status: str | None = None,
    compute: str | None = None,
    top: int = DEFAULT_PAGE,
    after: str | None = None,
    parent: str | None = None,
) -> JobPage:
    """Jobs newest first, a page at a time: ``after`` is the previous page's ``next_token``
    (keyset paging: a page costs the same however deep it is, and no job is skipped or repeated
    when jobs are added meanwhile). Top-level jobs only; with PARENT, that pipeline's steps or
    sweep's trials."""
    params: dict[str, Any] = {"ws": ws.id, "status": status, "compute": compute, "limit": top + 1}
    if parent is not None:
        params["parent"] = get(session, ws, parent).id
    if after is not None:
        params["submitted"], params["job"] = _decode_page_token(after)
    query = _page_query(bool(status), bool(compute), after is not None, parent is not None)
    rows: list[Any] = list(session.execute(query, params).all())
    if len(rows) <= top:
        return JobPage(rows, None)
    last = rows[top - 1]
    return JobPage(rows[:top], _encode_page_token(last.submitted_at, last.id))


def _encode_page_token(submitted: float, job_id: int) -> str:
    raw = json.dumps([submitted, job_id]).encode()  # floats round-trip exactly through repr
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_page_token(token: str) -> tuple[float, int]:
    try:
        submitted, job_id = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        when = float(submitted)
        if not isinstance(job_id, int) or isinstance(job_id, bool) or not math.isfinite(when):
            raise ValueError(job_id)
    except (ValueError, TypeError, binascii.Error):
        raise CloudletError(
            "ValidationError",
            "$skipToken is not a continuation token of this list; use the nextLink of the previous page",
            "$skipToken",
        ) from None
    return when, job_id


_RUNS_OF = (
    select(JobRun)
    .options(defer(JobRun.spec))  # the run specs (commands, env) are not shown: skip decoding them
    .where(JobRun.job_id == bindparam("job"))
    .order_by(JobRun.attempt, JobRun.rank)
)


def runs_of(session: Session, job: Job) -> list[JobRun]:
    return list(session.scalars(_RUNS_OF, {"job": job.id}))


LOG_PAGE_BYTES = 1 << 20


def log_files(data: DataRoot, job: Job, attempt: int) -> dict[str, int]:
    """An attempt's log files (named relative to its log folder, ``user_logs/std_log.txt``) and
    their sizes; links are not logs."""
    base = data.job_dir(job.workspace_id, job.name, attempt)
    if not base.is_dir():
        return {}
    found = sorted(p for p in base.rglob("*.txt") if p.is_file() and not p.is_symlink())
    return {str(p.relative_to(base)): p.stat().st_size for p in found}


def read_log(data: DataRoot, job: Job, attempt: int | None, file: str, offset: int) -> dict[str, Any]:
    """One page of one of the job's log files. ``file`` names a file beneath the attempt's log
    folder; it is opened there without following links (``storage.read_beneath``)."""
    parts = relative_parts(file, "file", "a log name such as user_logs/std_log.txt")
    if not parts:
        raise CloudletError("ValidationError", "file must name a log, such as user_logs/std_log.txt", "file")
    chosen = chosen_attempt(job, attempt)
    base = data.job_dir(job.workspace_id, job.name, chosen)
    files = log_files(data, job, chosen)
    if base.is_dir() and is_folder_beneath(base, parts):
        raise CloudletError(
            "ValidationError",
            f"'{file}' is a folder, not a log file; name one of its files, such as user_logs/std_log.txt",
            "file",
        )
    chunk = read_beneath(base, parts, offset, LOG_PAGE_BYTES) if base.is_dir() else None
    text, next_offset = "", offset
    if chunk:
        text, next_offset = chunk.decode("utf-8", errors="replace"), offset + len(chunk)
    return {
        "files": files,
        "file": file,
        "offset": offset,
        "data": text,
        "next_offset": next_offset,
        "status": job.status,
        "attempt": chosen,
        "attempts": job.attempt,
    }


def chosen_attempt(job: Job, attempt: int | None) -> int:
    """ATTEMPT (1 up to the job's attempts so far; 1 also before the first has started), or the
    latest when None; a 400 naming the range otherwise."""
    latest = max(job.attempt, 1)
    if attempt is None:
        return latest
    if not 1 <= attempt <= latest:
        so_far = f"{job.attempt} attempt{'s' if job.attempt != 1 else ''} so far"
        raise CloudletError(
            "ValidationError",
            f"attempt {attempt} does not exist: job '{job.name}' has {so_far}; use an attempt from 1 to "
            f"{latest} (job show lists them)",
            "attempt",
        )
    return attempt


def artifacts_archive(data: DataRoot, job: Job, attempt: int | None) -> bytes:
    """A tar.gz of one attempt's default artifacts (``outputs/``, ``logs/``; the latest attempt's
    when None), packed without following the links a job may have left in them."""
    base = data.datastore(job.workspace_id)
    folder = data.job_artifacts(job.workspace_id, job.name, chosen_attempt(job, attempt))
    packed = pack_beneath(base, relative_parts(str(folder.relative_to(base)), "attempt"))
    return packed or empty_tar()
