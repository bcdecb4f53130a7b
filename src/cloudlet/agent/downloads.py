"""http(s) inputs, downloaded by the node before a run starts (standard library only).

The run spec lists them (``downloads``: input name, URL, ``uri_file``/``uri_folder`` and the
placeholder the command and environment carry); ``fetch`` puts each in the node's cache and the
runner puts the cached path where its placeholder was.

The cache is keyed by the URL: ``<root>/<sha256(url)>/`` holds ``meta.json`` (the URL, its
``ETag`` and ``Last-Modified``, the content's SHA-256 and file name) and the content in a folder
named by its own SHA-256, which never changes once written (a running job may be reading it). A
cached URL is asked for again with ``If-None-Match``/``If-Modified-Since``: 304 reuses the cached
copy; new content of the same hash too. A download is bounded (``CLOUDLET_MAX_DOWNLOAD_BYTES``,
default 8 GiB) and has a deadline per read (``CLOUDLET_DOWNLOAD_TIMEOUT_S``, default 60 s).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

DEFAULT_MAX_BYTES = 8 << 30
DEFAULT_TIMEOUT_S = 60.0
CHUNK = 1 << 20
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")

_guard = threading.Lock()
_locks: dict[str, threading.Lock] = {}


class DownloadFailed(RuntimeError):
    """The input could not be downloaded; the message says what and why."""


def max_bytes(env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    raw = (env.get("CLOUDLET_MAX_DOWNLOAD_BYTES") or "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else DEFAULT_MAX_BYTES


def timeout_s(env: Mapping[str, str] | None = None) -> float:
    env = os.environ if env is None else env
    try:
        value = float((env.get("CLOUDLET_DOWNLOAD_TIMEOUT_S") or "").strip() or DEFAULT_TIMEOUT_S)
    except ValueError:
        return DEFAULT_TIMEOUT_S
    return value if value > 0 else DEFAULT_TIMEOUT_S


def cache_root(node_dir: Path, env: Mapping[str, str] | None = None) -> Path:
    """``CLOUDLET_DOWNLOAD_CACHE`` (set by a provider), else a folder of the node that no sandbox
    can write to (a user who could would poison the cache for the next run)."""
    env = os.environ if env is None else env
    configured = (env.get("CLOUDLET_DOWNLOAD_CACHE") or "").strip()
    return Path(configured) if configured else node_dir / "downloads"


def _lock(key: str) -> threading.Lock:
    with _guard:
        return _locks.setdefault(key, threading.Lock())


def file_name(url: str) -> str:
    """The URL's last path segment as a safe file name (``download`` when it has none)."""
    segment = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rstrip("/").rpartition("/")[2])
    name = _SAFE_NAME.sub("_", segment).strip(".")
    return name[:200] or "download"


def _read_meta(entry: Path) -> dict[str, str]:
    try:
        meta = json.loads((entry / "meta.json").read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(meta, dict):
        return {}
    content = entry / str(meta.get("sha256", "")) / str(meta.get("name", ""))
    return {str(k): str(v) for k, v in meta.items()} if meta.get("sha256") and content.is_file() else {}


def _write_meta(entry: Path, meta: dict[str, str]) -> None:
    tmp = entry / f".meta-{uuid.uuid4().hex}"
    tmp.write_text(json.dumps(meta, sort_keys=True))
    tmp.chmod(0o644)
    os.replace(tmp, entry / "meta.json")


def fetch(
    url: str,
    root: Path,
    *,
    limit: int | None = None,
    read_timeout_s: float | None = None,
    note: Callable[[str], None] = lambda _text: None,
    stop: threading.Event | None = None,
) -> Path:
    """The cached file of ``url``, downloaded first when the cache has none or the server has
    newer content. Raises ``DownloadFailed``."""
    limit = max_bytes() if limit is None else limit
    read_timeout_s = timeout_s() if read_timeout_s is None else read_timeout_s
    if urllib.parse.urlsplit(url).scheme.lower() not in ("http", "https"):
        raise DownloadFailed("only http:// and https:// URLs are downloaded")
    key = hashlib.sha256(url.encode()).hexdigest()
    entry = root / key
    with _lock(key):
        entry.mkdir(parents=True, exist_ok=True)
        for folder in (root, entry):
            with contextlib.suppress(OSError):
                folder.chmod(0o755)  # the sandbox user reads the content: pass through
        meta = _read_meta(entry)
        headers = {"User-Agent": "cloudlet-agent"}
        if meta.get("etag"):
            headers["If-None-Match"] = meta["etag"]
        if meta.get("last_modified"):
            headers["If-Modified-Since"] = meta["last_modified"]
        request = urllib.request.Request(url, headers=headers)
        try:
            response = urllib.request.urlopen(request, timeout=read_timeout_s)
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code == 304 and meta:
                note(f"cloudlet-agent: {url}: unchanged, using the node's cached copy\n")
                return entry / meta["sha256"] / meta["name"]
            raise DownloadFailed(f"the server answered HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise DownloadFailed(f"cannot reach it: {reason}") from None
        with response:
            length = response.headers.get("Content-Length")
            if length and length.isdigit() and int(length) > limit:
                raise DownloadFailed(f"it is {int(length)} bytes, over the node's limit of {limit} bytes")
            digest, size, part = _save(response, entry, limit, stop)
            name = file_name(response.geturl() or url)
            etag, modified = response.headers.get("ETag"), response.headers.get("Last-Modified")
        content = entry / digest / name
        if content.is_file():
            part.unlink(missing_ok=True)  # the same bytes as before: keep the copy jobs may be reading
        else:
            content.parent.mkdir(exist_ok=True)
            content.parent.chmod(0o755)
            os.replace(part, content)
        new_meta = {"url": url, "sha256": digest, "name": name, "size": str(size)}
        new_meta.update({k: v for k, v in (("etag", etag), ("last_modified", modified)) if v})
        _write_meta(entry, new_meta)
        note(f"cloudlet-agent: downloaded {url} ({size} bytes, sha256 {digest[:12]})\n")
        return content


def _save(response: Any, entry: Path, limit: int, stop: threading.Event | None) -> tuple[str, int, Path]:
    part = entry / f".part-{uuid.uuid4().hex}"
    sha, size = hashlib.sha256(), 0
    try:
        with open(part, "wb") as out:
            while True:
                if stop is not None and stop.is_set():
                    raise DownloadFailed("the run was stopped during the download")
                try:
                    block = response.read(CHUNK)
                except OSError as exc:
                    raise DownloadFailed(f"the transfer broke off after {size} bytes: {exc}") from None
                if not block:
                    break
                size += len(block)
                if size > limit:
                    raise DownloadFailed(f"it is over the node's limit of {limit} bytes")
                sha.update(block)
                out.write(block)
        part.chmod(0o644)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    return sha.hexdigest(), size, part
