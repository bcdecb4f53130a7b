"""A job's code uploaded as one archive from a browser (the studio's submit form): a .zip or a
.tar.gz of the code folder's contents, stored as the native snapshot the CLI's upload makes
(``codes/<sha256 of the tar.gz>``, ``codes.upload_snapshot``). A .zip is repacked as a tar.gz,
entries in name order with no timestamps, so the same folder gives the same snapshot each time.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
import zipfile
from pathlib import PurePosixPath

from sqlalchemy.orm import Session

from cloudlet.domain.assets.uploads import DEFAULT_MAX_UNPACKED_FILES, MAX_UPLOAD_BYTES
from cloudlet.domain.errors import validation_error
from cloudlet.services.assets import codes
from cloudlet.services.core.storage import DataRoot
from cloudlet.store.schema import Workspace

FIELD = "code_archive"
ZIP_MAGIC = b"PK\x03\x04"
GZIP_MAGIC = b"\x1f\x8b"


def store(session: Session, data: DataRoot, workspace: Workspace, archive: bytes) -> str:
    """Store ARCHIVE (a .zip or .tar.gz, told by its first bytes) as a code snapshot of the
    workspace (committed, within its storage quota); the document's ``code`` value for it."""
    archive = as_tar_gz(archive)
    digest = hashlib.sha256(archive).hexdigest()
    codes.upload_snapshot(session, data, workspace, digest, archive)
    return f"codes/{digest}"


def as_tar_gz(archive: bytes) -> bytes:
    """ARCHIVE (a .zip or .tar.gz, told by its first bytes) as a checked tar.gz of files and
    folders under safe relative names (a .zip repacked)."""
    if archive.startswith(ZIP_MAGIC):
        return _repack_zip(archive)
    if archive.startswith(GZIP_MAGIC):
        _check_tar(archive)
        return archive
    raise validation_error(FIELD, "the archive must be a .zip or a .tar.gz")


def _safe_name(name: str) -> str:
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts or "\\" in name:
        raise validation_error(FIELD, f"unsafe path in the archive: {name!r}")
    return path.as_posix()


def _check_tar(archive: bytes) -> None:
    """A tar.gz holding only files and folders under safe relative names."""
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            members = tar.getmembers()
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise validation_error(FIELD, f"the .tar.gz could not be read ({exc})") from None
    if len(members) > DEFAULT_MAX_UNPACKED_FILES:
        raise validation_error(FIELD, f"the archive holds over {DEFAULT_MAX_UNPACKED_FILES} entries")
    for member in members:
        _safe_name(member.name)
        if not (member.isfile() or member.isdir()):
            raise validation_error(FIELD, f"the archive may hold only files and folders: {member.name!r}")


def _repack_zip(archive: bytes) -> bytes:
    try:
        zipped = zipfile.ZipFile(io.BytesIO(archive))
        entries = sorted(zipped.infolist(), key=lambda e: e.filename)
    except (zipfile.BadZipFile, OSError) as exc:
        raise validation_error(FIELD, f"the .zip could not be read ({exc})") from None
    if len(entries) > DEFAULT_MAX_UNPACKED_FILES:
        raise validation_error(FIELD, f"the archive holds over {DEFAULT_MAX_UNPACKED_FILES} entries")
    if sum(e.file_size for e in entries) > MAX_UPLOAD_BYTES:
        raise validation_error(FIELD, "the archive unpacks to over 2 GiB")
    raw = io.BytesIO()
    try:
        _write_tar(zipped, entries, raw)
    except (zipfile.BadZipFile, OSError) as exc:  # a member whose bytes do not match its header
        raise validation_error(FIELD, f"the .zip could not be read ({exc})") from None
    return gzip.compress(raw.getvalue(), 6, mtime=0)


def _write_tar(zipped: zipfile.ZipFile, entries: list[zipfile.ZipInfo], raw: io.BytesIO) -> None:
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            name = _safe_name(entry.filename.rstrip("/")) if entry.filename.rstrip("/") else ""
            if not name:
                continue
            info = tarfile.TarInfo(name)
            info.mtime = 0
            if entry.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
                continue
            body = zipped.read(entry)  # bounded: the sizes were summed above
            executable = bool((entry.external_attr >> 16) & 0o100)
            info.size, info.mode = len(body), 0o755 if executable else 0o644
            tar.addfile(info, io.BytesIO(body))
