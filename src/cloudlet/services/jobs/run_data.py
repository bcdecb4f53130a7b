"""A run's data over HTTP, for nodes that do not share the server's disk (docs/agent-protocol.md,
"Job data over HTTP"): the agent downloads what the run reads and uploads what it wrote.

Which paths a run may touch is ``domain/jobs/run_data.py``'s rule (its own mounts: inputs read-only);
here they are opened beneath the mount without following links (``services/core/storage.py``), so a
link a job planted in an output folder is never read or written through."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sqlalchemy.orm import Session, sessionmaker

from cloudlet.domain.assets.uploads import UnpackBudget
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs import run_data
from cloudlet.domain.jobs.run_state import RunState
from cloudlet.services.compute.agent_protocol import run_of
from cloudlet.services.core.storage import (
    empty_tar,
    makedirs_beneath,
    open_beneath,
    pack_beneath_into,
    unpack_beneath,
)

FILE, FOLDER = "file", "folder"
CHUNK = 1 << 20
SPOOL_IN_MEMORY = 8 << 20  # a folder's tar.gz beyond this goes to a temporary file, not memory
FAST = 1  # gzip level of a folder sent to a node: models and data barely compress, time does


def target(
    sessions: sessionmaker[Session], run_id: str, token: str, path: str, *, write: bool
) -> run_data.DataTarget:
    """What ``path`` names among the run's mounts, once the run's own node's token checks out
    (401 otherwise); a write to a run that has ended is refused (409)."""
    with sessions() as session:
        run = run_of(session, run_id, token)
        if write and run.state == RunState.EXITED:
            raise CloudletError(
                "RunEnded", f"run {run_id} has ended: its outputs can no longer change", "run", 409
            )
        spec = run.spec or {}
    return run_data.locate(spec, path, write=write)


def _beneath(found: run_data.DataTarget) -> tuple[Path, tuple[str, ...]]:
    """The mount's parent and the segments from it: the mount's own name is opened without
    following a link too (a job could swap its output folder for one)."""
    mount = Path(found.mount.path)
    return mount.parent, (mount.name, *found.parts)


@dataclass(frozen=True)
class Download:
    kind: str  # FILE or FOLDER
    size: int | None
    body: Iterator[bytes]


def _file_chunks(fd: int) -> Iterator[bytes]:
    with os.fdopen(fd, "rb") as handle:
        while chunk := handle.read(CHUNK):
            yield chunk


def _spooled_chunks(spool: IO[bytes]) -> Iterator[bytes]:
    with spool:
        while chunk := spool.read(CHUNK):
            yield chunk


def download(found: run_data.DataTarget) -> Download:
    """A regular file as it is, a folder as a tar.gz (an absent writable folder: an empty one);
    404 when there is nothing there (or only a link, a device, a socket)."""
    base, parts = _beneath(found)
    try:
        fd = open_beneath(base, parts)
    except OSError:
        fd = -1
    if fd >= 0:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode):
            return Download(FILE, info.st_size, _file_chunks(fd))
        os.close(fd)
        if stat.S_ISDIR(info.st_mode):
            spool: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY)  # noqa: SIM115
            try:
                packed = pack_beneath_into(spool, base, parts, compresslevel=FAST)
                size = spool.tell()
                spool.seek(0)
            except BaseException:
                spool.close()
                raise
            if packed:
                return Download(FOLDER, size, _spooled_chunks(spool))
            spool.close()
    elif found.mount.writable and not found.parts:
        empty = empty_tar()  # an output or checkpoint dir nothing was written to yet
        return Download(FOLDER, len(empty), iter([empty]))
    raise CloudletError(
        "RunDataNotFound",
        f"nothing to download at {'/'.join((str(found.mount.index), *found.parts))}",
        run_data.FIELD,
        status=404,
    )


def upload_folder(found: run_data.DataTarget, archive: IO[bytes], budget: UnpackBudget | None = None) -> None:
    """Unpack a tar.gz into the folder the target names (made as needed): files are added or
    replaced, nothing is removed; all or nothing, within BUDGET (default: the unpack limits).
    A bad archive is a 400."""
    import tarfile

    base, parts = _beneath(found)
    try:
        unpack_beneath(archive, base, parts, budget)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise CloudletError(
            "ValidationError", f"the body is not a tar.gz that unpacks beneath the mount: {exc}", "body"
        ) from exc


def upload_file(found: run_data.DataTarget, body: IO[bytes]) -> int:
    """Write one file at the target (its folders made as needed); bytes written."""
    if not found.parts:
        raise CloudletError(
            "ValidationError",
            f"{run_data.FIELD} names mount {found.mount.index} itself, a folder: add the file's name, "
            "or send a tar.gz (Content-Type: application/gzip) to unpack into it",
            run_data.FIELD,
        )
    base, parts = _beneath(found)
    try:
        folder = makedirs_beneath(base, parts[:-1])
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
            out = os.open(parts[-1], flags, 0o644, dir_fd=folder)
        finally:
            os.close(folder)
    except OSError as exc:
        raise CloudletError(
            "ValidationError", f"cannot write {'/'.join(found.parts)} in that mount: {exc.strerror}", "path"
        ) from exc
    total = 0
    with os.fdopen(out, "wb") as handle:
        while chunk := body.read(CHUNK):
            handle.write(chunk)
            total += len(chunk)
    return total
