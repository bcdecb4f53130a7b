"""A ``uri_folder`` input at a public Azure Blob "folder" URL (``https://<account>.blob.core.
windows.net/<container>/<prefix>``, or the ``wasbs://`` form submission turns into it): the blobs
beneath the prefix are listed with the Blob service's List Blobs (anonymous, as a public container
allows), each is downloaded through the node's cache (``downloads.fetch``), and the folder the job
reads is laid out of hard links to the cached files (standard library only: the agent ships alone).

Bounded like a single download: the node's byte limit over all the files, ``MAX_BLOBS`` names.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

from cloudlet.agent import downloads

BLOB_HOST_SUFFIX = ".blob.core.windows.net"
MAX_BLOBS = 10_000
MAX_LISTING_BYTES = 16 << 20


def folder_parts(url: str) -> tuple[str, str, str] | None:
    """(``scheme://host/container``, container, prefix) of a Blob service URL; None otherwise."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme.lower() not in ("http", "https") or not parsed.hostname:
        return None
    if not parsed.hostname.lower().endswith(BLOB_HOST_SUFFIX):
        return None
    container, _, prefix = urllib.parse.unquote(parsed.path).lstrip("/").partition("/")
    if not container:
        return None
    return f"{parsed.scheme}://{parsed.netloc}/{container}", container, prefix.strip("/")


def list_blobs(container_url: str, prefix: str, timeout_s: float) -> list[str]:
    """The names of the blobs beneath ``prefix/`` (every page of the listing)."""
    names: list[str] = []
    marker = ""
    while True:
        query = {"restype": "container", "comp": "list", "prefix": f"{prefix}/" if prefix else ""}
        if marker:
            query["marker"] = marker
        request = urllib.request.Request(
            f"{container_url}?{urllib.parse.urlencode(query)}",
            headers={"User-Agent": "cloudlet-agent", "x-ms-version": "2021-08-06"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                body = response.read(MAX_LISTING_BYTES + 1)
        except urllib.error.HTTPError as exc:
            exc.close()
            raise downloads.DownloadFailed(
                f"listing the folder answered HTTP {exc.code} {exc.reason}"
            ) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise downloads.DownloadFailed(f"cannot list the folder: {getattr(exc, 'reason', exc)}") from None
        if len(body) > MAX_LISTING_BYTES:
            raise downloads.DownloadFailed("the folder's listing is too large")
        try:
            root = ET.fromstring(body)
        except ET.ParseError as exc:
            raise downloads.DownloadFailed(
                f"the folder's listing is not the Blob service's XML ({exc})"
            ) from None
        names += [n.text for n in root.iterfind("./Blobs/Blob/Name") if n.text and not n.text.endswith("/")]
        if len(names) > MAX_BLOBS:
            raise downloads.DownloadFailed(f"the folder holds over {MAX_BLOBS} blobs")
        marker = root.findtext("NextMarker") or ""
        if not marker:
            return names


def fetch_folder(
    url: str,
    root: Path,
    *,
    limit: int | None = None,
    read_timeout_s: float | None = None,
    note: Callable[[str], None] = lambda _text: None,
    stop: threading.Event | None = None,
) -> Path | None:
    """The folder of the blobs beneath ``url``; None when nothing is listed there (the URL may be
    a single blob, which ``downloads.fetch`` takes). Raises ``downloads.DownloadFailed``."""
    parts = folder_parts(url)
    if parts is None:
        return None
    container_url, _container, prefix = parts
    limit = downloads.max_bytes() if limit is None else limit
    read_timeout_s = downloads.timeout_s() if read_timeout_s is None else read_timeout_s
    names = list_blobs(container_url, prefix, read_timeout_s)
    if not names:
        return None
    files: list[tuple[str, Path]] = []
    left = limit
    for name in names:
        relative = name[len(prefix) + 1 :] if prefix else name
        if not relative or any(part in ("", ".", "..") for part in relative.split("/")):
            continue  # not a path beneath the folder
        blob_url = f"{container_url}/{urllib.parse.quote(name)}"
        cached = downloads.fetch(blob_url, root, limit=left, read_timeout_s=read_timeout_s, stop=stop)
        left -= cached.stat().st_size
        if left < 0:
            raise downloads.DownloadFailed(f"the folder is over the node's limit of {limit} bytes")
        files.append((relative, cached))
    folder = _lay_out(root, url, files)
    note(f"cloudlet-agent: downloaded the folder {url} ({len(files)} files)\n")
    return folder


def fetch_input(
    url: str,
    kind: str,
    root: Path,
    *,
    note: Callable[[str], None] = lambda _text: None,
    stop: threading.Event | None = None,
) -> tuple[Path, Path]:
    """An http(s) input in the node's cache: (the path the command sees, the folder to bind). A
    ``uri_folder`` at a Blob folder is its blobs; any other URL is one file, in a folder of its own."""
    if kind == "uri_folder":
        folder = fetch_folder(url, root, note=note, stop=stop)
        if folder is not None:
            return folder, folder
    path = downloads.fetch(url, root, note=note, stop=stop)
    return (path if kind == "uri_file" else path.parent), path.parent


def _lay_out(root: Path, url: str, files: list[tuple[str, Path]]) -> Path:
    """A folder of links to the cached files, named by what it holds: never changed once made
    (a running job may be reading it)."""
    listing = "\n".join(f"{relative}\0{cached}" for relative, cached in sorted(files))
    key = hashlib.sha256(f"{url}\n{listing}".encode()).hexdigest()
    folder = root / "folders" / key
    if folder.is_dir():
        return folder
    staging = root / "folders" / f".part-{uuid.uuid4().hex}"
    try:
        for relative, cached in files:
            target = staging / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(cached, target)
            except OSError:
                shutil.copyfile(cached, target)
        for path in [staging, *staging.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)  # the sandbox user reads it
        (root / "folders").chmod(0o755)
        try:
            os.rename(staging, folder)
        except OSError:  # another run made it first: the same content
            shutil.rmtree(staging, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return folder
