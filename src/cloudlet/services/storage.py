"""Where the data plane keeps bytes: code snapshots, datastores, job logs and outputs.

Everything lives under one data root (``$CLOUDLET_DATA``, default ``<home>/data``); replicas that
share a store must share this folder too. The local provider's nodes read and write it by path;
remote providers will sync through the agent.
"""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

from cloudlet.domain.errors import CloudletError

DEFAULT_DATASTORE = "workspaceblobstore"
_SAFE_SEGMENT = re.compile(r"^[A-Za-z0-9._-]+$")


class DataRoot:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def workspace(self, ws_id: int) -> Path:
        return self.root / "workspaces" / str(ws_id)

    def code(self, ws_id: int, digest: str) -> Path:
        return self.workspace(ws_id) / "codes" / f"{digest}.tar.gz"

    def datastore(self, ws_id: int, name: str = DEFAULT_DATASTORE) -> Path:
        if not _SAFE_SEGMENT.match(name):
            raise CloudletError("ValidationError", f"'{name}' is not a datastore name", "datastore")
        return self.workspace(ws_id) / "datastores" / name

    def datastore_path(self, ws_id: int, name: str, relative: str) -> Path:
        base = self.datastore(ws_id, name)
        target = (base / relative.strip("/")).resolve()
        if target != base.resolve() and base.resolve() not in target.parents:
            raise CloudletError("ValidationError", f"path '{relative}' leaves the datastore", "path")
        return target

    def job_dir(self, ws_id: int, job: str, attempt: int) -> Path:
        return self.workspace(ws_id) / "jobs" / job / f"attempt-{attempt}"

    def job_output(self, ws_id: int, job: str, output: str) -> Path:
        return self.datastore(ws_id) / "azureml" / job / output

    def checkpoints(self, ws_id: int, job: str) -> Path:
        return self.datastore(ws_id) / "checkpoints" / job


def unpack_tar(data: bytes, destination: Path) -> None:
    """Unpack a tar.gz safely (no absolute paths, no '..', no links out)."""
    destination.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        archive.extractall(destination, filter="data")


def pack_path(path: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        if path.is_dir():
            for item in sorted(path.rglob("*")):
                archive.add(item, arcname=str(item.relative_to(path)), recursive=False)
        else:
            archive.add(path, arcname=path.name)
    return buffer.getvalue()


def append_at(path: Path, offset: int, data: bytes) -> int:
    """Write ``data`` at ``offset`` unless already there (retries are idempotent); return the size."""
    path.parent.mkdir(parents=True, exist_ok=True)
    size = path.stat().st_size if path.exists() else 0
    if offset > size:
        raise CloudletError("LogGap", f"log chunk at {offset} but only {size} bytes received", "offset", 409)
    skip = size - offset
    if skip < len(data):
        with open(path, "ab") as handle:
            handle.write(data[skip:])
            size = handle.tell()
    return size


def folder_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
