"""Blobs as files: the Blob service subset (``api/blob.py``) kept in a workspace's datastore.

A container is a datastore folder (``DataRoot.datastore``) and a blob is the file at its name, so
jobs read what the SDK uploaded by path, and what jobs write is listed and downloaded as blobs.
Every path is walked beneath its folder without following links (``services/core/storage.py``).

Bytes arrive in a staging folder outside the datastore and appear under their name only when
complete and checked (size, MD5 when the client sends one): a Put Blob by rename, a block list by
assembling its staged blocks; uncommitted blocks are never visible. What the file system does not
keep (content type, MD5, user metadata such as the SDK's ``upload_status`` marker) is a small JSON
beside it in ``blob-meta/``, trusted only while the file's size and mtime are those it describes.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import stat
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cloudlet.services.core.storage import DataRoot, _descend, makedirs_beneath, open_beneath

CHUNK = 1 << 20
MAX_LISTED = 200_000  # a listing walks at most this many files
STALE_UPLOAD_S = 24 * 3600  # a staging file untouched this long was abandoned (its client gone)
STALE_BLOCKS_S = 7 * 24 * 3600  # Azure drops uncommitted blocks after a week
SWEEP_EVERY_S = 3600
_swept: dict[Path, float] = {}


class BlobError(Exception):
    """Azure's error code, a message naming the fix, and the HTTP status."""

    def __init__(self, code: str, message: str, status: int) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


@dataclass
class BlobInfo:
    name: str
    size: int
    mtime_ns: int
    created_ns: int
    content_type: str = "application/octet-stream"
    content_md5: str | None = None  # base64, as Azure sends it
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def etag(self) -> str:
        return f'"0x{self.mtime_ns:X}{self.size:X}"'


class Upload:
    """Bytes being received into a staging file: counted and hashed as they are written."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{uuid.uuid4().hex}.part"
        self._file = open(self.path, "xb")  # noqa: SIM115 - closed by finish/discard
        self.size = 0
        self._md5 = hashlib.md5(usedforsecurity=False)

    def write(self, chunk: bytes) -> None:
        self._file.write(chunk)
        self._md5.update(chunk)
        self.size += len(chunk)

    def finish(self, declared_size: int | None, declared_md5: str | None) -> str:
        """Close the file and check it against what the client declared; the MD5 (base64)."""
        self._file.close()
        md5 = base64.b64encode(self._md5.digest()).decode()
        if declared_size is not None and declared_size != self.size:
            self.discard()
            raise BlobError(
                "InvalidInput",
                f"received {self.size} bytes but Content-Length said {declared_size}; send the whole body",
                400,
            )
        if declared_md5 is not None and declared_md5 != md5:
            self.discard()
            raise BlobError(
                "Md5Mismatch",
                f"the body's MD5 is {md5} but Content-MD5 said {declared_md5}; the upload was corrupted, "
                "send it again",
                400,
            )
        return md5

    def discard(self) -> None:
        self._file.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def _meta_parts(parts: tuple[str, ...]) -> tuple[tuple[str, ...], str]:
    """Where a blob's sidecar lives: folders and files are prefixed apart, so a blob ``a`` and a
    blob ``a/b`` never claim the same sidecar name."""
    return tuple(f"d_{p}" for p in parts[:-1]), f"f_{parts[-1]}.json"


class BlobStore:
    """One container (datastore) of one workspace."""

    def __init__(self, data: DataRoot, workspace_id: int, container: str) -> None:
        self.base = data.datastore(workspace_id, container)
        root = data.workspace(workspace_id)
        self.staging = root / "blob-staging"
        self.blocks = root / "blob-blocks" / container
        self.meta = root / "blob-meta" / container

    # -- containers -------------------------------------------------------------------------
    def container_exists(self) -> bool:
        return self.base.is_dir() and not self.base.is_symlink()

    def create_container(self) -> bool:
        if self.container_exists():
            return False
        self.base.mkdir(parents=True, exist_ok=True)
        return True

    def container_mtime_ns(self) -> int:
        return self.base.stat().st_mtime_ns if self.container_exists() else 0

    # -- writing ----------------------------------------------------------------------------
    def begin(self) -> Upload:
        sweep_stale(self.staging, self.blocks)
        return Upload(self.staging)

    def put(
        self,
        parts: tuple[str, ...],
        upload: Upload,
        md5: str,
        content_type: str | None,
        metadata: dict[str, str],
        exclusive: bool,
    ) -> BlobInfo:
        """Make the staged ``upload`` the blob ``parts`` (refused if ``exclusive`` and it exists)."""
        try:
            info = self._place(upload.path, parts, exclusive)
        finally:
            upload.discard()
        self._discard_blocks(parts)
        return self._write_meta(parts, info, content_type, md5, metadata)

    def stage_block(self, parts: tuple[str, ...], block_id: str, upload: Upload) -> None:
        folder = self._block_folder(parts)
        folder.mkdir(parents=True, exist_ok=True)
        os.replace(upload.path, folder / _block_file(block_id))

    def commit_blocks(
        self,
        parts: tuple[str, ...],
        block_ids: list[str],
        declared_md5: str | None,
        content_type: str | None,
        metadata: dict[str, str],
        exclusive: bool,
    ) -> BlobInfo:
        """Assemble the staged blocks in order into the blob; every one must have been staged."""
        folder = self._block_folder(parts)
        missing = [b for b in block_ids if not (folder / _block_file(b)).is_file()]
        if missing:
            raise BlobError(
                "InvalidBlockList",
                f"{len(missing)} of the listed blocks were never staged (first: {missing[0]}); "
                "Put Block each one before Put Block List",
                400,
            )
        upload = self.begin()
        try:
            for block_id in block_ids:
                with open(folder / _block_file(block_id), "rb") as handle:
                    while chunk := handle.read(CHUNK):
                        upload.write(chunk)
            md5 = upload.finish(None, declared_md5)
        except BaseException:
            upload.discard()
            raise
        return self.put(parts, upload, md5, content_type, metadata, exclusive)

    def set_metadata(self, parts: tuple[str, ...], metadata: dict[str, str]) -> BlobInfo:
        info = self.properties(parts)
        if info is None:
            raise _not_found(parts)
        info.metadata = metadata
        return self._write_meta(parts, info, info.content_type, info.content_md5, metadata)

    def delete(self, parts: tuple[str, ...]) -> None:
        try:
            fd = _descend(os.open(self.base, os.O_RDONLY | os.O_DIRECTORY), parts[:-1])
        except OSError:
            raise _not_found(parts) from None
        try:
            info = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode):
                raise _not_found(parts)
            os.unlink(parts[-1], dir_fd=fd)
        except FileNotFoundError:
            raise _not_found(parts) from None
        finally:
            os.close(fd)
        self._drop_meta(parts)

    # -- reading ----------------------------------------------------------------------------
    def properties(self, parts: tuple[str, ...]) -> BlobInfo | None:
        try:
            fd = open_beneath(self.base, parts)
        except OSError:
            return None
        try:
            return self._info(parts, os.fstat(fd))
        finally:
            os.close(fd)

    def open(self, parts: tuple[str, ...]) -> tuple[int, BlobInfo] | None:
        """A descriptor for reading the blob and its properties; None when there is no such blob."""
        try:
            fd = open_beneath(self.base, parts)
        except OSError:
            return None
        info = self._info(parts, os.fstat(fd))
        if info is None:
            os.close(fd)
            return None
        return fd, info

    def list(self, prefix: str) -> list[BlobInfo]:
        """Every blob whose name starts with ``prefix``, in name order (links are not followed)."""
        found: list[tuple[str, os.stat_result]] = []
        try:
            fd = os.open(self.base, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            return []
        _walk(fd, "", prefix, found)
        infos = []
        for name, st in sorted(found, key=lambda item: item[0].encode()):
            info = self._info(tuple(name.split("/")), st)
            if info is not None:
                infos.append(info)
        return infos

    # -- internals --------------------------------------------------------------------------
    def _info(self, parts: tuple[str, ...], st: os.stat_result) -> BlobInfo | None:
        if not stat.S_ISREG(st.st_mode):
            return None
        info = BlobInfo("/".join(parts), st.st_size, st.st_mtime_ns, st.st_mtime_ns)
        meta = self._read_meta(parts)
        if meta:
            info.content_type = str(meta.get("content_type") or info.content_type)
            info.metadata = {str(k): str(v) for k, v in (meta.get("metadata") or {}).items()}
            info.created_ns = int(meta.get("created_ns") or info.created_ns)
            fresh = meta.get("size") == st.st_size and meta.get("mtime_ns") == st.st_mtime_ns
            info.content_md5 = str(meta["content_md5"]) if fresh and meta.get("content_md5") else None
        return info

    def _place(self, source: Path, parts: tuple[str, ...], exclusive: bool) -> BlobInfo:
        try:
            dir_fd = makedirs_beneath(self.base, parts[:-1])
        except OSError:
            raise BlobError(
                "InvalidBlobOrBlock",
                f"'{'/'.join(parts)}' cannot be written: a file or link stands where it needs a folder",
                409,
            ) from None
        name = parts[-1]
        try:
            os.chmod(source, 0o644)
            try:
                if exclusive:
                    os.link(source, name, dst_dir_fd=dir_fd, follow_symlinks=False)
                else:
                    os.rename(source, name, dst_dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno != 18:  # EXDEV: the datastore is another file system
                    raise
                _copy_into(source, dir_fd, name, exclusive)
            return BlobInfo("/".join(parts), *_stat_pair(os.stat(name, dir_fd=dir_fd, follow_symlinks=False)))
        except FileExistsError:
            raise BlobError(
                "BlobAlreadyExists", f"'{'/'.join(parts)}' exists; upload with overwrite to replace it", 409
            ) from None
        except (IsADirectoryError, NotADirectoryError, PermissionError) as exc:
            raise BlobError(
                "InvalidBlobOrBlock", f"'{'/'.join(parts)}' cannot be written here: {exc.strerror}", 409
            ) from None
        finally:
            os.close(dir_fd)

    def _block_folder(self, parts: tuple[str, ...]) -> Path:
        return self.blocks / hashlib.sha256("/".join(parts).encode()).hexdigest()

    def _discard_blocks(self, parts: tuple[str, ...]) -> None:
        folder = self._block_folder(parts)
        if folder.is_dir():
            for item in folder.iterdir():
                with contextlib.suppress(FileNotFoundError):
                    item.unlink()
            with contextlib.suppress(OSError):
                folder.rmdir()

    def _write_meta(
        self,
        parts: tuple[str, ...],
        info: BlobInfo,
        content_type: str | None,
        md5: str | None,
        metadata: dict[str, str],
    ) -> BlobInfo:
        info.content_type = content_type or "application/octet-stream"
        info.content_md5, info.metadata = md5, metadata
        record = {
            "size": info.size,
            "mtime_ns": info.mtime_ns,
            "created_ns": info.created_ns,
            "content_type": info.content_type,
            "content_md5": md5,
            "metadata": metadata,
        }
        folders, name = _meta_parts(parts)
        fd = makedirs_beneath(self.meta, folders)
        try:
            temp = f".{uuid.uuid4().hex}.tmp"
            out = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd)
            with os.fdopen(out, "w") as handle:
                json.dump(record, handle)
            os.rename(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
        finally:
            os.close(fd)
        return info

    def _read_meta(self, parts: tuple[str, ...]) -> dict[str, Any] | None:
        folders, name = _meta_parts(parts)
        try:
            fd = open_beneath(self.meta, (*folders, name))
        except OSError:
            return None
        with os.fdopen(fd) as handle:
            try:
                data = json.load(handle)
            except ValueError:
                return None
        return data if isinstance(data, dict) else None

    def _drop_meta(self, parts: tuple[str, ...]) -> None:
        folders, name = _meta_parts(parts)
        with contextlib.suppress(OSError):
            fd = _descend(os.open(self.meta, os.O_RDONLY | os.O_DIRECTORY), folders)
            try:
                os.unlink(name, dir_fd=fd)
            finally:
                os.close(fd)


def sweep_stale(staging: Path, blocks: Path, now: float | None = None) -> int:
    """Remove abandoned staging files and blocks never committed, at most once an hour per
    folder per process (an upload begins it, in the thread pool); the count removed."""
    now = time.time() if now is None else now
    if now - _swept.get(staging, 0.0) < SWEEP_EVERY_S:
        return 0
    _swept[staging] = now
    removed = 0
    with contextlib.suppress(FileNotFoundError):
        for item in staging.iterdir():
            with contextlib.suppress(OSError):
                if item.suffix == ".part" and now - item.lstat().st_mtime > STALE_UPLOAD_S:
                    item.unlink()
                    removed += 1
    with contextlib.suppress(FileNotFoundError):
        for folder in blocks.iterdir():
            with contextlib.suppress(OSError):
                if folder.is_symlink() or not folder.is_dir():
                    continue
                staged = list(folder.iterdir())
                if all(now - b.lstat().st_mtime > STALE_BLOCKS_S for b in staged):
                    for block in staged:
                        block.unlink()
                        removed += 1
                    folder.rmdir()
    return removed


def read_range(fd: int, start: int, length: int) -> Iterator[bytes]:
    """The bytes [start, start+length) of an open file in chunks; closes the descriptor."""
    try:
        os.lseek(fd, start, os.SEEK_SET)
        left = length
        while left > 0:
            chunk = os.read(fd, min(CHUNK, left))
            if not chunk:
                break
            left -= len(chunk)
            yield chunk
    finally:
        os.close(fd)


def _block_file(block_id: str) -> str:
    return hashlib.sha256(block_id.encode()).hexdigest()


def _stat_pair(st: os.stat_result) -> tuple[int, int, int]:
    return st.st_size, st.st_mtime_ns, st.st_mtime_ns


def _copy_into(source: Path, dir_fd: int, name: str, exclusive: bool) -> None:
    temp = f".{name}.{uuid.uuid4().hex}.part"
    out = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
    try:
        with open(source, "rb") as src, os.fdopen(out, "wb") as dst:
            while chunk := src.read(CHUNK):
                dst.write(chunk)
        if exclusive:
            os.link(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        else:
            os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=dir_fd)


def _walk(fd: int, path: str, prefix: str, found: list[tuple[str, os.stat_result]]) -> None:
    """Collect the regular files beneath the folder open at ``fd`` (closed here) whose names
    start with ``prefix``, descending only into folders that can hold such names."""
    try:
        for entry in sorted(os.listdir(fd)):
            name = f"{path}{entry}"
            if not (name.startswith(prefix) or prefix.startswith(name)):
                continue
            try:
                st = os.stat(entry, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and name.startswith(prefix):
                if len(found) >= MAX_LISTED:
                    raise BlobError(
                        "InvalidQueryParameterValue",
                        f"more than {MAX_LISTED} blobs match; list with a longer prefix",
                        400,
                    )
                found.append((name, st))
            elif stat.S_ISDIR(st.st_mode) and (
                f"{name}/".startswith(prefix) or prefix.startswith(f"{name}/")
            ):
                try:
                    inner = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except OSError:
                    continue
                _walk(inner, f"{name}/", prefix, found)
    finally:
        os.close(fd)


def _not_found(parts: tuple[str, ...]) -> BlobError:
    return BlobError("BlobNotFound", f"no blob '{'/'.join(parts)}'", 404)
