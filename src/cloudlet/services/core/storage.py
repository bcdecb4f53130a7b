"""Where the data plane keeps bytes: code snapshots, datastores, job logs and outputs.

Everything lives under one data root (``$CLOUDLET_DATA``, default ``<home>/data``); replicas that
share a store must share this folder too. The local provider's nodes read and write it by path;
remote providers will sync through the agent.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
import secrets
import stat
import tarfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO

from cloudlet.domain.assets.uploads import GIB, UnpackBudget, UploadLimits
from cloudlet.domain.errors import CloudletError

# Re-exported (their home is domain/paths.py: the pure rules use them too).
from cloudlet.domain.paths import relative_parts as relative_parts

DEFAULT_DATASTORE = "workspaceblobstore"
# Where Azure ML keeps runs' artifacts (ExperimentRun/dcid.<run>/, which jobs.download reads): the
# same folder as the default datastore here, so a job's artifacts are one tree under either name.
ARTIFACT_DATASTORE = "workspaceartifactstore"
_SAFE_SEGMENT = re.compile(r"^[A-Za-z0-9._-]+$")


def open_beneath(base: Path, parts: tuple[str, ...]) -> int:
    """A read-only descriptor for ``base/parts…`` opened one segment at a time with O_NOFOLLOW:
    a symbolic link anywhere below ``base`` (a user's job or notebook can plant one) is refused
    rather than followed out of it, and no rename race can redirect the open. OSError when it
    does not exist, is a link, or leaves ``base``."""
    fd = _descend(os.open(base, os.O_RDONLY | os.O_DIRECTORY), parts[:-1])
    if not parts:
        return fd
    try:
        return os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    finally:
        os.close(fd)


def read_beneath(base: Path, parts: tuple[str, ...], offset: int = 0, limit: int = 1 << 20) -> bytes | None:
    """Up to ``limit`` bytes of a regular file beneath ``base`` from ``offset`` (a negative
    offset counts from the end); None when there is no such regular file."""
    try:
        fd = open_beneath(base, parts)
    except OSError:
        return None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # a folder: FileIO would raise IsADirectoryError
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as handle:
        handle.seek(max(0, info.st_size + offset) if offset < 0 else offset)
        return handle.read(limit)


class DataRoot:
    def __init__(self, root: Path, limits: UploadLimits | None = None) -> None:
        self.root = root
        self.limits = limits or UploadLimits()
        self.usage_ttl_s = self.limits.usage_ttl_s
        self._usage: dict[int, tuple[float, int]] = {}  # workspace → (when measured, bytes)
        root.mkdir(parents=True, exist_ok=True)
        # Workspaces' data: the server's user alone reaches it; sandboxes see what they are given.
        with contextlib.suppress(PermissionError):
            root.chmod(0o700)

    def workspace(self, ws_id: int) -> Path:
        return self.root / "workspaces" / str(ws_id)

    def usage(self, ws_id: int) -> int:
        """Bytes of regular files in the workspace's folder (datastores, code snapshots, logs):
        what its storage quota counts. A walk of the tree (iterative: a job may nest folders
        deeper than Python recurses), kept USAGE_TTL_S so that an upload of many small files (the
        Blob service: one request each) does not walk it once per file."""
        now = time.monotonic()
        cached = self._usage.get(ws_id)
        if cached is not None and now - cached[0] < self.usage_ttl_s:
            return cached[1]
        total = _tree_bytes(str(self.workspace(ws_id)))
        self._usage[ws_id] = (now, total)
        return total

    def budget(self, ws_id: int, quota_gib: int | None) -> UnpackBudget:
        """What one upload into the workspace may write: the unpack limits, and what is left of
        QUOTA_GIB (None: the server's default)."""
        quota = (quota_gib or self.limits.workspace_storage_gib) * GIB
        return UnpackBudget(self.limits, max(0, quota - self.usage(ws_id)), quota)

    def code(self, ws_id: int, digest: str) -> Path:
        return self.workspace(ws_id) / "codes" / f"{digest}.tar.gz"

    def datastore(self, ws_id: int, name: str = DEFAULT_DATASTORE) -> Path:
        if not _SAFE_SEGMENT.match(name) or name in (".", ".."):  # '..' would be the workspace's folder
            raise CloudletError("ValidationError", f"'{name}' is not a datastore name", "datastore")
        if name == ARTIFACT_DATASTORE:  # Azure ML's run artifacts: here the default's ExperimentRun/
            name = DEFAULT_DATASTORE
        return self.workspace(ws_id) / "datastores" / name

    def datastore_path(self, ws_id: int, name: str, relative: str) -> Path:
        """A path in a datastore, named relative to its root. Links are resolved and the result
        must still be inside the datastore (a link out of it is refused)."""
        base = self.datastore(ws_id, name)
        target = (base / relative.strip("/")).resolve()
        if target != base.resolve() and base.resolve() not in target.parents:
            raise CloudletError("ValidationError", f"path '{relative}' leaves the datastore", "path")
        return target

    def job_dir(self, ws_id: int, job: str, attempt: int) -> Path:
        return self.workspace(ws_id) / "jobs" / job / f"attempt-{attempt}"

    def job_output(self, ws_id: int, job: str, output: str) -> Path:
        return self.datastore(ws_id) / "azureml" / job / output

    def job_artifacts(self, ws_id: int, job: str, attempt: int) -> Path:
        """An attempt's default artifacts: what its processes left in ``./outputs`` and ``./logs``
        (Azure ML keeps them under ``ExperimentRun/dcid.<run>``)."""
        return self.datastore(ws_id) / "ExperimentRun" / f"dcid.{job}" / f"attempt-{attempt}"

    def checkpoints(self, ws_id: int, job: str) -> Path:
        return self.datastore(ws_id) / "checkpoints" / job


def _descend(
    fd: int,
    parts: tuple[str, ...] | list[str],
    make: bool = False,
    on_made: Callable[[int], None] | None = None,
) -> int:
    """From the folder open at ``fd`` (which this takes over) down through ``parts``, one segment
    at a time with O_NOFOLLOW, making missing folders when ``make`` (``on_made`` is told the depth
    of each it made); the last folder's descriptor. A link on the way (planted by a user's job)
    fails the walk instead of being followed."""
    try:
        for depth, part in enumerate(parts):
            if make:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                    if on_made is not None:
                        on_made(depth)
                except FileExistsError:
                    pass
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def makedirs_beneath(base: Path, parts: tuple[str, ...]) -> int:
    """A descriptor of the folder ``base/parts…``, made as needed, walked without following links:
    nothing is ever written through a link planted on the way. OSError otherwise."""
    base.mkdir(parents=True, exist_ok=True)
    return _descend(os.open(base, os.O_RDONLY | os.O_DIRECTORY), parts, make=True)


def unpack_beneath(
    data: bytes | IO[bytes], base: Path, parts: tuple[str, ...], budget: UnpackBudget | None = None
) -> None:
    """Unpack a tar.gz into ``base/parts…``: members pass tarfile's ``data`` filter (no absolute
    paths, no '..', no links out, no devices), and every folder and file is created through
    descriptors without following links, so a link swapped in by a concurrent job cannot
    redirect a write outside the datastore. BUDGET (default: ``UploadLimits()``) bounds the
    entries and bytes written, counted while unpacking. All or nothing: files are written under
    temporary names and renamed into place once the whole archive has unpacked; on any failure
    they and every folder this made (``parts`` included) are removed. ``tarfile.TarError``/
    ``OSError`` on a bad archive, ``CloudletError`` (413/403) past the budget."""
    base.mkdir(parents=True, exist_ok=True)
    unpacker = _Unpacker(base, budget or UnpackBudget(UploadLimits()))
    try:
        unpacker.folder(tuple(parts))
        source = io.BytesIO(data) if isinstance(data, bytes) else data
        with tarfile.open(fileobj=source, mode="r:gz") as archive:
            for member in archive:
                unpacker.budget.add_entry(len(parts) + member.name.count("/") + 1)
                unpacker.member(archive, tarfile.data_filter(member, "/unpack"), tuple(parts))
        unpacker.commit()
    except BaseException:
        unpacker.rollback()
        raise


class _Unpacker:
    """One archive's writes beneath BASE, recorded so that they can be put in place or undone."""

    def __init__(self, base: Path, budget: UnpackBudget) -> None:
        self.base = base
        self.budget = budget
        self.made: list[tuple[str, ...]] = []  # folders this made, outermost first
        self.staged: deque[tuple[tuple[str, ...], str, str]] = deque()  # (folder, temporary, final)

    def _open(self, folders: tuple[str, ...], make: bool = False) -> int:
        fd = os.open(self.base, os.O_RDONLY | os.O_DIRECTORY)
        return _descend(fd, folders, make, lambda depth: self.made.append(folders[: depth + 1]))

    def folder(self, folders: tuple[str, ...]) -> None:
        os.close(self._open(folders, make=True))

    def member(self, archive: tarfile.TarFile, member: tarfile.TarInfo, root: tuple[str, ...]) -> None:
        *inner, name = relative_parts(member.name, "body", "an archive member")
        if not name:
            return
        folders = (*root, *inner)
        if member.isdir():
            self.folder((*folders, name))
            return
        if not (member.issym() or member.isfile()):
            return
        fd = self._open(folders, make=True)
        try:
            short = name.encode()[:100].decode(errors="ignore")  # the name stays within NAME_MAX
            temporary = f".{short}.{secrets.token_hex(6)}.part"
            self.staged.append((folders, temporary, name))
            if member.issym():
                os.symlink(member.linkname, temporary, dir_fd=fd)
                return
            source = archive.extractfile(member)
            assert source is not None
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            out = os.open(temporary, flags, (member.mode or 0o644) & 0o755, dir_fd=fd)
            with os.fdopen(out, "wb") as handle:
                while chunk := source.read(1 << 20):
                    self.budget.add_bytes(len(chunk))
                    handle.write(chunk)
        finally:
            os.close(fd)

    def commit(self) -> None:
        while self.staged:
            folders, temporary, name = self.staged[0]
            fd = self._open(folders)
            try:  # rename(2) replaces a link at NAME itself: nothing is written through it
                os.rename(temporary, name, src_dir_fd=fd, dst_dir_fd=fd)
            finally:
                os.close(fd)
            self.staged.popleft()

    def rollback(self) -> None:
        """Best effort: what cannot be removed (a folder someone else wrote into) stays."""
        for folders, temporary, _ in self.staged:
            with contextlib.suppress(OSError):
                fd = self._open(folders)
                try:
                    os.unlink(temporary, dir_fd=fd)
                finally:
                    os.close(fd)
        for made in reversed(self.made):
            with contextlib.suppress(OSError):
                fd = self._open(made[:-1])
                try:
                    os.rmdir(made[-1], dir_fd=fd)
                finally:
                    os.close(fd)


def pack_beneath(base: Path, parts: tuple[str, ...], compresslevel: int = 9) -> bytes | None:
    """A tar.gz of the file or folder ``base/parts…`` in a tree users' code may write to
    (outputs, datastores): the path is opened beneath ``base`` without following links
    (``open_beneath``) and every entry below it likewise, so a link, or one swapped in while
    packing, is stored as a link and never read through. None when there is nothing there."""
    buffer = io.BytesIO()
    return buffer.getvalue() if pack_beneath_into(buffer, base, parts, compresslevel) else None


def pack_beneath_into(out: IO[bytes], base: Path, parts: tuple[str, ...], compresslevel: int = 9) -> bool:
    """``pack_beneath`` written to OUT (a file: a large folder need not fit in memory); False
    when there is nothing there."""
    try:
        fd = open_beneath(base, parts)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        with tarfile.open(fileobj=out, mode="w:gz", compresslevel=compresslevel) as archive:
            if stat.S_ISDIR(info.st_mode):
                _pack_dir(archive, fd, "")
            elif stat.S_ISREG(info.st_mode):
                member = tarfile.TarInfo(parts[-1] if parts else base.name)
                member.size, member.mtime, member.mode = info.st_size, int(info.st_mtime), 0o644
                with os.fdopen(os.dup(fd), "rb") as handle:
                    archive.addfile(member, handle)
            else:
                return False
    finally:
        os.close(fd)
    return True


@functools.cache
def empty_tar() -> bytes:
    buffer = io.BytesIO()
    tarfile.open(fileobj=buffer, mode="w:gz").close()
    return buffer.getvalue()


def is_folder_beneath(base: Path, parts: tuple[str, ...]) -> bool:
    """Whether ``base/parts…`` is a folder, opened as ``open_beneath`` does (no walk of it)."""
    try:
        fd = open_beneath(base, parts)
    except OSError:
        return False
    try:
        return stat.S_ISDIR(os.fstat(fd).st_mode)
    finally:
        os.close(fd)


def stat_beneath(base: Path, parts: tuple[str, ...]) -> tuple[str, int] | None:
    """("file"|"folder", bytes) of ``base/parts…`` opened as ``open_beneath`` does; None when absent."""
    try:
        fd = open_beneath(base, parts)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode):
            return "file", info.st_size
        if not stat.S_ISDIR(info.st_mode):
            return None
        return "folder", _size_of_dir(fd)
    finally:
        os.close(fd)


def _tree_bytes(top: str) -> int:
    """Bytes of the regular files beneath TOP, links not followed; what cannot be read is skipped."""
    total, folders = 0, [top]
    while folders:
        with contextlib.suppress(OSError), os.scandir(folders.pop()) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
    return total


def _size_of_dir(dir_fd: int) -> int:
    total = 0
    for name in os.listdir(dir_fd):
        with contextlib.suppress(OSError):
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
            elif stat.S_ISDIR(info.st_mode):
                inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
                try:
                    total += _size_of_dir(inner)
                finally:
                    os.close(inner)
    return total


def _pack_dir(archive: tarfile.TarFile, dir_fd: int, prefix: str) -> None:
    for name in sorted(os.listdir(dir_fd)):
        arcname = f"{prefix}{name}"
        if _pack_entry(archive, dir_fd, name, arcname):
            try:
                inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
            except OSError:
                continue  # replaced while packing
            try:
                _pack_dir(archive, inner, arcname + "/")
            finally:
                os.close(inner)


def _pack_entry(archive: tarfile.TarFile, dir_fd: int, name: str, arcname: str) -> bool:
    """Add one entry; True when it is a folder to descend into."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    member = tarfile.TarInfo(arcname)
    member.mtime, member.mode = int(info.st_mtime), stat.S_IMODE(info.st_mode)
    if stat.S_ISDIR(info.st_mode):
        member.type = tarfile.DIRTYPE
        archive.addfile(member)
        return True
    if stat.S_ISLNK(info.st_mode):
        member.type, member.linkname = tarfile.SYMTYPE, os.readlink(name, dir_fd=dir_fd)
        archive.addfile(member)
        return False
    if not stat.S_ISREG(info.st_mode):
        return False  # sockets, fifos, devices: not data
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as handle:
        opened = os.fstat(handle.fileno())
        if not stat.S_ISREG(opened.st_mode):
            return False
        member.size = opened.st_size
        archive.addfile(member, handle)
    return False


def link_once(source: Path, link: Path) -> None:
    """A hard link at LINK to SOURCE (the same file under a second name: a run's log among its
    artifacts, growing with it) unless LINK exists. Hard, not symbolic: readers of the datastore
    never follow symbolic links."""
    link.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.link(source, link)


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
