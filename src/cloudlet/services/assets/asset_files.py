"""The bytes behind data assets, and what is known of an environment's builds.

- ``tree``: the files of a version's datastore path (a file, or a folder walked without following
  links, at most ``TREE_LIMIT`` entries); ``download``: one of them, or the folder as a tar.gz;
- ``upload_file``: one file of a browser's upload into ``LocalUpload/<batch>/`` of the default
  datastore (as the CLI's uploads land under ``LocalUpload/<hash>/``), within the workspace's
  storage budget; ``upload_uri`` is the batch's datastore URI, which a new version names;
- ``job_output_path``: ``azureml://jobs/<job>/outputs/<name>[/paths/<path>]`` (Azure ML's way to
  name a job's output) as the datastore URI where that output is, so a version can be registered
  from it (data and models alike, through ``assets.write``);
- ``build_log``: environments are built on each node when a job first needs them
  (``nodekit/envs.py``), into the run's log; nothing is stored per environment. The log shown is
  the newest job that used the version: its ``cloudlet-agent`` lines about the environment.
"""

from __future__ import annotations

import io
import os
import re
import stat
import tarfile
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.domain.errors import CloudletError, conflict, not_found, validation_error
from cloudlet.domain.paths import parse_datastore_uri
from cloudlet.services.access import workspaces
from cloudlet.services.assets.codes import PENDING_UPLOAD_FOLDER
from cloudlet.services.core.storage import (
    DEFAULT_DATASTORE,
    DataRoot,
    open_beneath,
    pack_beneath,
    read_beneath,
    relative_parts,
    stat_beneath,
    unpack_beneath,
)
from cloudlet.services.jobs import job_outputs
from cloudlet.services.jobs import jobs as job_service
from cloudlet.store.schema import Asset, AssetUse, Job, Workspace

TREE_LIMIT = 1000  # entries listed from one version's folder
DOWNLOAD_LIMIT = 256 << 20  # one file sent from the page
BATCH = re.compile(r"^[0-9a-f]{32}$")  # an upload's folder, made by the page's server
JOB_OUTPUT = re.compile(
    r"^azureml://jobs/(?P<job>[^/]+)/outputs/(?P<output>[^/]+)(?:/paths/(?P<path>.*)|/)?$"
)


@dataclass(frozen=True)
class Entry:
    path: str  # relative to the version's path
    size: int
    depth: int


@dataclass
class Tree:
    kind: str  # file | folder | missing | remote
    entries: list[Entry] = field(default_factory=list)
    truncated: bool = False


def located_in(ws: Workspace, asset: Asset, data: DataRoot) -> tuple[Any, tuple[str, ...]] | None:
    """The datastore folder and the parts of ASSET's path in it; None for a path not in a datastore."""
    at = parse_datastore_uri(str(asset.spec.get("path") or ""))
    if at is None:
        return None
    return data.datastore(ws.id, at[0]), relative_parts(at[1], "path")


def tree(ws: Workspace, asset: Asset, data: DataRoot) -> Tree:
    located = located_in(ws, asset, data)
    if located is None:
        return Tree("remote")
    base, parts = located
    try:
        fd = open_beneath(base, parts)
    except OSError:
        return Tree("missing")
    try:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode):
            return Tree("file", [Entry(parts[-1] if parts else "", info.st_size, 0)])
        found = Tree("folder")
        _walk(fd, "", 0, found)
        return found
    finally:
        os.close(fd)


def _walk(fd: int, prefix: str, depth: int, found: Tree) -> None:
    """Entries beneath the folder FD, in name order, folders before their files; links skipped."""
    with os.scandir(fd) as listing:
        entries = sorted(listing, key=lambda e: e.name)
    for entry in entries:
        if len(found.entries) >= TREE_LIMIT:
            found.truncated = True
            return
        if entry.is_symlink():
            continue
        path = f"{prefix}{entry.name}"
        if entry.is_dir(follow_symlinks=False):
            found.entries.append(Entry(path + "/", 0, depth))
            try:
                child = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError:
                continue
            try:
                _walk(child, path + "/", depth + 1, found)
            finally:
                os.close(child)
        elif entry.is_file(follow_symlinks=False):
            found.entries.append(Entry(path, entry.stat(follow_symlinks=False).st_size, depth))


def download(ws: Workspace, asset: Asset, data: DataRoot, file: str | None) -> tuple[bytes, str]:
    """FILE of the version (relative to its path; its own file when it is one), or the whole
    folder as a tar.gz when None: (bytes, file name)."""
    located = located_in(ws, asset, data)
    if located is None:
        raise not_found("File", str(asset.spec.get("path")))
    base, parts = located
    wanted = (*parts, *relative_parts(file, "file")) if file else parts
    found = stat_beneath(base, wanted)
    if found is None or (file and found[0] != "file"):
        raise not_found("File", file or str(asset.spec.get("path")))
    if found[1] > DOWNLOAD_LIMIT:  # read whole into memory: a larger one is the CLI's to fetch
        raise CloudletError(
            "PayloadTooLarge",
            f"{found[1]:,} bytes is more than the studio sends ({DOWNLOAD_LIMIT >> 20} MiB); download it "
            f"with the CLI: cloudlet datastore download -n {base.name} -p {'/'.join(wanted)}",
            "file",
            413,
        )
    body = read_beneath(base, wanted, limit=DOWNLOAD_LIMIT) if found[0] == "file" else None
    if body is not None:
        return body, wanted[-1] if wanted else asset.name
    packed = pack_beneath(base, wanted)
    if packed is None:
        raise not_found("File", file or str(asset.spec.get("path")))
    return packed, f"{asset.name}-{asset.version}.tar.gz"


def upload_uri(batch: str, file: str | None = None) -> str:
    """The datastore URI of upload BATCH (a folder), or of FILE in it."""
    if not BATCH.fullmatch(batch):
        raise validation_error("upload", "not an upload of this form; choose the files again")
    tail = "/".join(relative_parts(file, "file")) if file else ""
    return f"azureml://datastores/{DEFAULT_DATASTORE}/paths/{PENDING_UPLOAD_FOLDER}/{batch}/{tail}"


def upload_file(session: Session, data: DataRoot, ws: Workspace, batch: str, path: str, body: bytes) -> str:
    """Write one uploaded file at PATH (relative, as the browser gave it) in upload BATCH, through
    the same checked unpacking the datastore's uploads use (no link followed, the storage budget
    counted). Its datastore URI."""
    uri = upload_uri(batch, path)
    parts = relative_parts(path, "file")
    if not parts:
        raise validation_error("file", "an uploaded file needs a name")
    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w:gz") as archive:
        member = tarfile.TarInfo("/".join(parts))
        member.size = len(body)
        member.mode = 0o644
        archive.addfile(member, io.BytesIO(body))
    base = data.datastore(ws.id, DEFAULT_DATASTORE)
    if stat_beneath(base, (PENDING_UPLOAD_FOLDER, batch, *parts)) is not None:
        # An upload's files are written once: a registered version's bytes never change under it.
        raise conflict(
            "AlreadyUploaded", f"'{path}' is already in this upload; choose the files again", "file"
        )
    budget = workspaces.storage_budget(session, data, ws.id)
    try:
        unpack_beneath(packed.getvalue(), base, (PENDING_UPLOAD_FOLDER, batch), budget)
    except OSError as exc:  # a file where a folder is needed, or the reverse
        raise CloudletError(
            "InvalidPath", f"cannot write '{path}': {exc.strerror or exc}", "file", 409
        ) from None
    return uri


def job_output_path(session: Session, ws: Workspace, uri: str) -> tuple[str, str] | None:
    """``azureml://jobs/<job>/outputs/<name>[/paths/<path>]`` as (the datastore URI of that output,
    or of PATH in it; the job's name). A 400 naming ``path`` when the job or output does not exist
    or PATH leaves the output; None for any other URI."""
    found = JOB_OUTPUT.fullmatch(uri.strip())
    if found is None:
        return None
    job = job_service.find_in(session, ws.id, found["job"])
    if job is None:
        raise validation_error("path", f"no job '{found['job']}' in this workspace")
    outputs = job_outputs.outputs(session, job)
    if found["output"] not in outputs:
        named = ", ".join(sorted(outputs)) or "none"
        raise validation_error(
            "path", f"job '{job.name}' has no output '{found['output']}' (its outputs: {named})"
        )
    base = str(outputs[found["output"]]["path"])
    inner = (found["path"] or "").strip("/")
    if not inner:
        return base, job.name
    return f"{base.rstrip('/')}/{'/'.join(relative_parts(inner, 'path'))}", job.name  # no '..'


def job_outputs_of(session: Session, ws: Workspace, job_name: str) -> dict[str, dict[str, Any]]:
    """A job's outputs (name → type and path), for a form to pick one; empty when no such job."""
    job = job_service.find_in(session, ws.id, job_name)
    return job_outputs.outputs(session, job) if job is not None else {}


def recent_jobs(session: Session, ws: Workspace, limit: int = 50) -> list[str]:
    """The workspace's newest job names (a form offers them), by the jobs' workspace index."""
    query = select(Job.name).where(Job.workspace_id == ws.id).order_by(Job.id.desc()).limit(limit)
    return list(session.scalars(query))


# -- environments -------------------------------------------------------------------------------
@dataclass
class BuildLog:
    state: str  # "not built yet", "built", "reused", "failed", "building", … (said on the page)
    job: str | None = None
    attempt: int = 0
    lines: list[str] = field(default_factory=list)


_ENV_LINE = re.compile(r"^cloudlet-agent: .*(environment|Preparing|image|pip|conda|venv)", re.IGNORECASE)
LOG_READ = 1 << 20  # the run log's first MiB: the environment is prepared before the command


def build_log(session: Session, data: DataRoot, asset: Asset) -> BuildLog:
    """The environment version's latest build as the services can see it: the newest job that used
    it, and its log's environment lines (see the module's docstring)."""
    query = (
        select(Job)
        .join(AssetUse, AssetUse.job_id == Job.id)
        .where(AssetUse.asset_id == asset.id, AssetUse.role == "environment", Job.attempt > 0)
        .order_by(Job.id.desc())
        .limit(1)
    )
    job = session.scalar(query)
    if job is None:
        return BuildLog("not built yet")
    lines: list[str] = []
    for file in job_service.log_files(data, job, job.attempt):
        chunk = job_service.read_log(data, job, job.attempt, file, 0)["data"][:LOG_READ].splitlines()
        marked = [i for i, line in enumerate(chunk) if _ENV_LINE.match(line)]
        if marked:  # the agent's lines and the build tool's output between them
            lines.extend(chunk[marked[0] : marked[-1] + 1])
    text = "\n".join(lines)
    if "could not" in text or "failed" in text.lower():
        state = "failed"
    elif " built in " in text:
        state = "built"
    elif " reused " in text:
        state = "reused"
    elif "using the node's Python" in text:
        state = "nothing to build: the node's Python"
    else:
        state = "building" if job.ended_at is None else "no build logged"
    return BuildLog(state, job.name, job.attempt, lines)
