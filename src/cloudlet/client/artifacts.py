"""Code snapshots and data uploads: deterministic tar.gz packing, ignore rules, raw HTTP transfers.

``pack_folder(path)`` returns ``(tar.gz bytes, sha256 hex of those bytes)``. The archive is
deterministic — entries sorted, mtimes/uids/owner names zeroed, modes reduced to 0644/0755, gzip
header mtime 0 and no file name — so the same folder content always gives the same bytes and hash
(on one zlib build), whatever the files' timestamps. The server checks a code snapshot's body
against that hash (``PUT {ws}/codes/{sha256}``).

Ignored while packing code: ``.git``, ``__pycache__`` and ``.venv`` at any depth, plus the simple
glob lines of ``.amlignore`` at the folder's top (or, when there is none, ``.gitignore``): blank
lines and ``#`` comments are skipped, ``!`` negations are not supported (skipped), a trailing
``/`` matches directories only, a pattern with a ``/`` matches the path from the top, one without
matches the name at any depth.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import io
import os
import stat
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import quote

import httpx

from cloudlet.client._rest import (
    HttpResponseError,
    ResourceNotFoundError,
    RestClient,
    ServiceRequestError,
    raise_for_response,
)

ALWAYS_IGNORED = frozenset({".git", "__pycache__", ".venv"})
IGNORE_FILES = (".amlignore", ".gitignore")
DEFAULT_DATASTORE = "workspaceblobstore"
UPLOAD_PREFIX = "LocalUpload"
_GZIP_LEVEL = 6


# ----------------------------------------------------------------------------------------------
# Ignore rules.


@dataclass(frozen=True)
class IgnoreRule:
    pattern: str
    dir_only: bool
    anchored: bool

    def matches(self, rel: str, is_dir: bool) -> bool:
        if self.dir_only and not is_dir:
            return False
        if self.anchored:
            return fnmatch.fnmatchcase(rel, self.pattern)
        return fnmatch.fnmatchcase(PurePosixPath(rel).name, self.pattern)


def parse_ignore(text: str) -> list[IgnoreRule]:
    """Simple ``.gitignore``-style glob lines → rules (negations and escapes unsupported)."""
    rules: list[IgnoreRule] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        if line.startswith("**/"):
            line = line[3:]
        anchored = "/" in line
        line = line.lstrip("/")
        if line:
            rules.append(IgnoreRule(line, dir_only, anchored))
    return rules


def load_ignore_rules(root: str | Path) -> list[IgnoreRule]:
    """Rules of ``.amlignore`` at ``root`` (which takes precedence), else of ``.gitignore``."""
    for name in IGNORE_FILES:
        path = Path(root) / name
        if path.is_file():
            return parse_ignore(path.read_text(encoding="utf-8", errors="replace"))
    return []


def is_ignored(rel: str, is_dir: bool, rules: list[IgnoreRule]) -> bool:
    if PurePosixPath(rel).name in ALWAYS_IGNORED:
        return True
    return any(rule.matches(rel, is_dir) for rule in rules)


def list_files(root: str | Path, ignore: bool = True) -> list[str]:
    """Relative POSIX paths (sorted) of the files — and empty directories, with a trailing ``/`` —
    to pack from ``root``. Symlinks to files are followed; symlinks to directories are skipped."""
    base = Path(root)
    rules = load_ignore_rules(base) if ignore else []
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        rel_dir = Path(dirpath).relative_to(base).as_posix()
        prefix = "" if rel_dir == "." else rel_dir + "/"
        kept_dirs = []
        for d in sorted(dirnames):
            full = Path(dirpath) / d
            if full.is_symlink():
                continue
            if ignore and is_ignored(prefix + d, True, rules):
                continue
            kept_dirs.append(d)
        dirnames[:] = kept_dirs
        kept_files = []
        for f in sorted(filenames):
            full = Path(dirpath) / f
            if not full.is_file():  # dangling link, socket, fifo …
                continue
            if ignore and is_ignored(prefix + f, False, rules):
                continue
            kept_files.append(prefix + f)
        out.extend(kept_files)
        if prefix and not kept_dirs and not kept_files:
            out.append(prefix)
    return sorted(out)


# ----------------------------------------------------------------------------------------------
# Packing.


def _info(name: str, *, is_dir: bool, size: int = 0, executable: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if is_dir else tarfile.REGTYPE
    info.mode = 0o755 if (is_dir or executable) else 0o644
    info.size = size
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _gzip(tar_bytes: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=_GZIP_LEVEL, mtime=0) as gz:
        gz.write(tar_bytes)
    return buf.getvalue()


def _pack(entries: list[tuple[str, Path | None]]) -> tuple[bytes, str]:
    """``(archive name, source path or None for a directory)`` → (tar.gz bytes, sha256 hex)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, source in sorted(entries, key=lambda e: e[0]):
            if source is None:
                tar.addfile(_info(name.rstrip("/"), is_dir=True))
                continue
            data = source.read_bytes()
            executable = bool(source.stat().st_mode & stat.S_IXUSR)
            tar.addfile(_info(name, is_dir=False, size=len(data), executable=executable), io.BytesIO(data))
    data = _gzip(raw.getvalue())
    return data, hashlib.sha256(data).hexdigest()


def pack_folder(path: str | Path, ignore: bool = True) -> tuple[bytes, str]:
    """Pack a folder's contents (paths relative to it) → (tar.gz bytes, sha256 hex of the bytes)."""
    root = Path(path)
    if not root.is_dir():
        raise NotADirectoryError(f"{root} is not a folder")
    entries: list[tuple[str, Path | None]] = [
        (rel, None if rel.endswith("/") else root / rel) for rel in list_files(root, ignore)
    ]
    return _pack(entries)


def pack_path(path: str | Path, arcname: str | None = None, ignore: bool = False) -> tuple[bytes, str]:
    """Pack a file or folder under one top-level entry ``arcname`` (default: its base name)."""
    source = Path(path)
    top = arcname or source.resolve().name
    if source.is_file():
        return _pack([(top, source)])
    if not source.is_dir():
        raise FileNotFoundError(f"{source} does not exist")
    entries: list[tuple[str, Path | None]] = [(top + "/", None)]
    for rel in list_files(source, ignore):
        entries.append((f"{top}/{rel}", None if rel.endswith("/") else source / rel))
    return _pack(entries)


def content_hash_folder(path: str | Path) -> str:
    """The snapshot hash ``pack_folder`` gives (the id of ``{ws}/codes/{hash}``)."""
    return pack_folder(path)[1]


def unpack(data: bytes, dest: str | Path) -> list[str]:
    """Extract a tar.gz into ``dest`` (created); refuses absolute paths, ``..`` and links.

    Returns the relative paths of the files written.
    """
    target = Path(dest)
    target.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
        members = tar.getmembers()
        for member in members:
            name = PurePosixPath(member.name)
            if name.is_absolute() or ".." in name.parts:
                raise ValueError(f"unsafe path in archive: {member.name}")
            if not (member.isfile() or member.isdir()):
                raise ValueError(f"unsupported entry in archive: {member.name}")
        for member in members:
            out = target.joinpath(*PurePosixPath(member.name).parts)
            if member.isdir():
                out.mkdir(parents=True, exist_ok=True)
                continue
            out.parent.mkdir(parents=True, exist_ok=True)
            extracted = tar.extractfile(member)
            assert extracted is not None
            out.write_bytes(extracted.read())
            out.chmod(0o755 if member.mode & 0o100 else 0o644)
            written.append(PurePosixPath(member.name).as_posix())
    return written


# ----------------------------------------------------------------------------------------------
# Raw HTTP (bytes bodies, HEAD) on top of RestClient.


def raw_request(
    rest: RestClient,
    method: str,
    path: str,
    *,
    content: bytes | None = None,
    content_type: str | None = None,
    accept: str | None = None,
    params: dict[str, str] | None = None,
) -> httpx.Response:
    """Like ``RestClient.send`` but with a raw body / non-JSON answer; raises for 4xx/5xx."""
    headers = rest._headers()
    if content_type:
        headers["Content-Type"] = content_type
    if accept:
        headers["Accept"] = accept
    try:
        response = rest._http.request(method, path, content=content, headers=headers, params=params)
    except httpx.TimeoutException as exc:
        raise ServiceRequestError(f"request to {rest.endpoint} timed out: {exc}") from exc
    except httpx.TransportError as exc:
        raise ServiceRequestError(
            f"cannot reach the cloudlet server at {rest.endpoint} ({exc}); is `cloudlet server` running?"
        ) from exc
    raise_for_response(response)
    return response


def exists(rest: RestClient, path: str) -> bool:
    """``HEAD path`` (``GET`` when HEAD is not allowed): 2xx → True, 404 → False."""
    try:
        raw_request(rest, "HEAD", path)
        return True
    except ResourceNotFoundError:
        return False
    except HttpResponseError as exc:  # 405 from a server without HEAD routes
        if exc.status_code != 405:
            raise
    try:
        raw_request(rest, "GET", path)
        return True
    except ResourceNotFoundError:
        return False


def datastore_path(ws: str, path: str, datastore: str = DEFAULT_DATASTORE) -> str:
    return f"{ws}/datastores/{quote(datastore, safe='')}/paths/{quote(path.strip('/'), safe='/')}"


def datastore_uri(path: str, datastore: str = DEFAULT_DATASTORE) -> str:
    return f"azureml://datastores/{datastore}/paths/{path.strip('/')}"


@dataclass
class Upload:
    """What ``upload_code`` / ``upload_data`` did. ``skipped``: the server already had it."""

    kind: str  # "code" or "data"
    local_path: str
    hash: str
    size: int
    uri: str  # "codes/<sha256>" or "azureml://datastores/<ds>/paths/LocalUpload/<hash>/<name>"
    skipped: bool


def pack_code(folder: Path | None, includes: Sequence[Path] = ()) -> tuple[bytes, str]:
    """A code snapshot: FOLDER's contents (a single file: that file), plus each of INCLUDES (a
    component's ``additional_includes``) at the top under its own name, as Azure ML copies them.
    A ``ValueError`` names an include whose name is already taken."""
    entries: list[tuple[str, Path | None]] = []
    if folder is not None and folder.is_file():
        entries.append((folder.name, folder))
    elif folder is not None:
        entries += [(rel, None if rel.endswith("/") else folder / rel) for rel in list_files(folder)]
    taken = {name.rstrip("/").split("/", 1)[0] for name, _ in entries}
    for include in includes:
        top = include.name
        if top in taken:
            raise ValueError(f"'{top}' is already in the code snapshot (the code folder or another include)")
        taken.add(top)
        if include.is_file():
            entries.append((top, include))
            continue
        entries.append((top + "/", None))
        entries += [
            (f"{top}/{rel}", None if rel.endswith("/") else include / rel) for rel in list_files(include)
        ]
    return _pack(entries)


def upload_code(
    rest: RestClient, ws: str, folder: str | Path | None, includes: Sequence[Path] = ()
) -> Upload:
    """Snapshot a code folder (or a single file), with INCLUDES (``pack_code``), and
    ``PUT {ws}/codes/{sha256}`` unless present."""
    source = Path(folder) if folder is not None else None
    if includes or source is None:
        data, digest = pack_code(source, includes)
    elif source.is_file():
        data, digest = pack_path(source)
    else:
        data, digest = pack_folder(source)
    path = f"{ws}/codes/{digest}"
    skipped = exists(rest, path)
    if not skipped:
        raw_request(rest, "PUT", path, content=data, content_type="application/gzip")
    what = str(source) if source is not None else ", ".join(str(p) for p in includes)
    return Upload("code", what, digest, len(data), f"codes/{digest}", skipped)


def upload_data(rest: RestClient, ws: str, local: str | Path, datastore: str = DEFAULT_DATASTORE) -> Upload:
    """Upload a local file or folder to ``LocalUpload/<hash>/<name>`` in a datastore unless present.

    The archive holds one top entry ``<name>`` and is ``PUT`` at ``LocalUpload/<hash>``, so the file
    or folder lands at ``LocalUpload/<hash>/<name>`` (checked first with ``HEAD``).
    """
    source = Path(local)
    if not source.exists():
        raise FileNotFoundError(f"{source} does not exist")
    name = source.resolve().name
    data, digest = pack_path(source, name)
    folder = f"{UPLOAD_PREFIX}/{digest}"
    final = f"{folder}/{name}"
    skipped = exists(rest, datastore_path(ws, final, datastore))
    if not skipped:
        raw_request(
            rest, "PUT", datastore_path(ws, folder, datastore), content=data, content_type="application/gzip"
        )
    return Upload("data", str(source), digest, len(data), datastore_uri(final, datastore), skipped)


def download_bytes(rest: RestClient, path: str, params: dict[str, str] | None = None) -> bytes:
    """``GET`` a binary resource (a tar.gz) and return its body."""
    return raw_request(rest, "GET", path, accept="application/gzip, */*", params=params).content


def upload_to_path(
    rest: RestClient, ws: str, local: str | Path, destination: str, datastore: str = DEFAULT_DATASTORE
) -> Upload:
    """Put a local folder's contents (or a file) beneath ``destination`` in a datastore, as
    ``az storage blob upload-batch --destination-path`` does: what samples then read at
    ``azureml://datastores/<datastore>/paths/<destination>/…``. Files already there are replaced."""
    source = Path(local)
    if source.is_dir():
        data, digest = pack_folder(source, ignore=False)
    elif source.is_file():
        data, digest = pack_path(source)
    else:
        raise FileNotFoundError(f"{source} does not exist")
    target = destination.strip("/")
    raw_request(
        rest, "PUT", datastore_path(ws, target, datastore), content=data, content_type="application/gzip"
    )
    return Upload("data", str(source), digest, len(data), datastore_uri(target, datastore), False)


def download_from_path(
    rest: RestClient, ws: str, path: str, destination: str | Path, datastore: str = DEFAULT_DATASTORE
) -> list[str]:
    """Download a datastore file or folder into ``destination``; the relative paths written."""
    where = f"{ws}/datastores/{quote(datastore, safe='')}/download/{quote(path.strip('/'), safe='/')}"
    return unpack(download_bytes(rest, where), destination)
