"""The Azure Blob service subset the azure-ai-ml SDK (through ``azure-storage-blob``) uploads
code and local data with, path-style as Azurite serves it: ``{base}/blob/{account}/{container}/{blob}``
where the account is a workspace (``ws<id>``) and the container one of its datastores.

Put Blob, Put Block, Put Block List, Get Blob (ranges), Get Blob Properties, Set Blob Metadata,
Delete Blob, List Blobs (prefix, delimiter, marker, metadata), and a container's create and
properties. Every request carries a signature cloudlet minted (``services/assets/blob_sas.py``); nothing
else authorises it, so these routes take no bearer token. The signature, and its issuer's standing
now (cached as a caller's is), are checked before any of the body is read. Errors are Azure's XML
with ``x-ms-error-code``, which the Azure clients map to their exceptions
(``ResourceNotFoundError``, ``ResourceExistsError``, …).

A container URL may name a folder of the datastore (``…/workspaceblobstore/LocalUpload/<id>``):
``ContainerClient.from_container_url`` then sees ``<id>`` as the container and the rest as the
account's path, so its blob requests still land beneath that folder, and its container-level
requests (list, properties) are answered for the folder as a container of its own.
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import hashlib
import os
import re
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any, TypeVar
from xml.sax.saxutils import escape

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from starlette.requests import ClientDisconnect

from cloudlet.api.body_limits import body_limit
from cloudlet.api.deps import AppState
from cloudlet.domain.errors import CloudletError
from cloudlet.services.access import identity, workspaces
from cloudlet.services.assets import blob_sas
from cloudlet.services.assets.blob_store import CHUNK, BlobError, BlobInfo, BlobStore, Upload, read_range
from cloudlet.services.core.context import Caller
from cloudlet.services.core.storage import relative_parts

router = APIRouter(prefix="/blob", tags=["blob"], include_in_schema=False)
API_VERSION = "2025-01-05"
MAX_PUT_BLOB = 5000 << 20  # Azure's limits
MAX_BLOCK = 4000 << 20
MAX_BLOCK_LIST = 8 << 20
MAX_RESULTS = 5000
T = TypeVar("T")


class _Target:
    """What a request names: the grant its signature carries, the store, the virtual container's
    folder (``vprefix``) and the blob's path segments within the real container."""

    def __init__(
        self, request: Request, grant: blob_sas.Grant, query: dict[str, str], container: str, path: str
    ) -> None:
        state: AppState = request.app.state.cloudlet
        self.grant = grant
        self.query = query
        try:
            self.parts = relative_parts(path, "blob", "a blob name")
            self.store = BlobStore(state.data, self.grant.workspace_id, container)
        except CloudletError as exc:
            raise BlobError("InvalidUri", exc.message, 400) from None
        self.container = container

    def blob(self, permission: str) -> tuple[str, ...]:
        if not self.parts:
            raise BlobError("InvalidUri", "name a blob after the container in the URL", 400)
        self.grant.require(permission, self.parts)
        return self.parts


def _issuer_in_thread(state: AppState, issuer: blob_sas.Issuer) -> Caller:
    with state.read_sessions() as session:
        return identity.issuer(session, issuer.principal_id, issuer.key_id)


async def _target(request: Request, account: str, container: str, path: str) -> _Target:
    """What the request names, under its signature as far as the signature's issuer may still use
    it now (their standing is cached as a caller's is: the store is asked at most every couple of
    seconds per issuer, and never on the event loop)."""
    state: AppState = request.app.state.cloudlet
    query = {k: v for k, v in request.query_params.items()}
    grant = blob_sas.verify(state.token_secret, account, container, query)
    caller = identity.cached_issuer(grant.issuer.principal_id, grant.issuer.key_id)
    if caller is None:
        try:
            caller = await run_in_threadpool(_issuer_in_thread, state, grant.issuer)
        except CloudletError as exc:
            if exc.status != 401:
                raise
            raise blob_sas.refused_issuer(exc.message) from None
    return _Target(request, blob_sas.narrow(grant, caller), query, container, path)


def _headers(extra: dict[str, str] | None = None) -> dict[str, str]:
    headers = {"x-ms-version": API_VERSION, "x-ms-request-id": str(uuid.uuid4())}
    headers.update(extra or {})
    return headers


def _error(request: Request, code: str, message: str, status: int) -> Response:
    body = b""
    if request.method != "HEAD":
        body = (
            '<?xml version="1.0" encoding="utf-8"?><Error>'
            f"<Code>{escape(code)}</Code><Message>{escape(message)}</Message></Error>"
        ).encode()
    return Response(body, status, headers=_headers({"x-ms-error-code": code}), media_type="application/xml")


async def _guard(request: Request, work: Callable[[], Any]) -> Response:
    try:
        result: Response = await work()
        return result
    except (BlobError, blob_sas.SasError) as exc:
        return _error(request, exc.code, exc.message, exc.status)


def _http_date(ns: int) -> str:
    return email.utils.formatdate(ns / 1e9, usegmt=True)


def _info_headers(info: BlobInfo) -> dict[str, str]:
    headers = {
        "ETag": info.etag,
        "Last-Modified": _http_date(info.mtime_ns),
        "x-ms-creation-time": _http_date(info.created_ns),
        "x-ms-blob-type": "BlockBlob",
        "x-ms-lease-state": "available",
        "x-ms-lease-status": "unlocked",
        "x-ms-server-encrypted": "false",
        "Accept-Ranges": "bytes",
        "Content-Type": info.content_type,
    }
    headers.update({f"x-ms-meta-{k}": v for k, v in info.metadata.items()})
    return headers


_META_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


def _metadata(request: Request) -> dict[str, str]:
    found = {k[len("x-ms-meta-") :]: v for k, v in request.headers.items() if k.startswith("x-ms-meta-")}
    for name in found:
        if not _META_NAME.match(name):
            raise BlobError("InvalidMetadata", f"metadata name '{name}' must be a C# identifier", 400)
    if sum(len(k) + len(v) for k, v in found.items()) > 8192:
        raise BlobError("MetadataTooLarge", "metadata is limited to 8 KiB", 400)
    return found


def _declared_md5(request: Request, header: str) -> str | None:
    value = request.headers.get(header)
    if value is None:
        return None
    try:
        if len(base64.b64decode(value, validate=True)) != 16:
            raise ValueError
    except (ValueError, binascii.Error):
        raise BlobError("InvalidMd5", f"{header} is not a base64 MD5 digest", 400) from None
    return value


def _refuse_unchecked(request: Request) -> None:
    """A checksum cloudlet cannot verify is refused, not ignored: nothing is stored unchecked."""
    for header in ("x-ms-content-crc64", "x-ms-structured-body"):
        if header in request.headers:
            raise BlobError(
                "UnsupportedHeader",
                f"{header} is not verified by this service; upload with Content-MD5 instead "
                "(azure-storage-blob: validate_content=True or 'md5')",
                400,
            )


def _content_length(request: Request, limit: int) -> int | None:
    declared = request.headers.get("content-length")
    if declared is None:
        return None
    if not declared.isdigit():
        raise BlobError("InvalidHeaderValue", "Content-Length is not a number", 400)
    if int(declared) > limit:
        raise BlobError("RequestBodyTooLarge", f"the body is larger than {limit >> 20} MiB; use blocks", 413)
    return int(declared)


async def _receive(request: Request, store: BlobStore, limit: int) -> tuple[Upload | None, bytes]:
    """The body, counted and bounded: streamed into a staging file off the event loop once it
    passes 1 MiB, else kept in memory (a small blob then costs one trip to the thread pool).
    Returns the staging upload (if one was begun) and the bytes not yet written to it."""
    upload: Upload | None = None
    buffer = bytearray()
    try:
        async for chunk in request.stream():
            buffer += chunk
            if (upload.size if upload else 0) + len(buffer) > limit:
                raise BlobError("RequestBodyTooLarge", f"the body is larger than {limit >> 20} MiB", 413)
            if len(buffer) >= CHUNK:
                if upload is None:
                    upload = await run_in_threadpool(store.begin)
                await run_in_threadpool(upload.write, bytes(buffer))
                buffer.clear()
    except (BlobError, ClientDisconnect, OSError):
        if upload is not None:
            await run_in_threadpool(upload.discard)
        raise
    return upload, bytes(buffer)


async def _check_room(request: Request, target: _Target, declared: int | None) -> None:
    """Refuse, before reading the body, a write the workspace's storage quota has no room for
    (403 WorkspaceStorageQuotaExceeded; a body of unknown length needs room for one byte)."""
    state: AppState = request.app.state.cloudlet

    def check() -> None:
        with state.read_sessions() as session:
            budget = workspaces.storage_budget(session, state.data, target.grant.workspace_id)
        try:
            budget.check_room(declared or 1)
        except CloudletError as exc:
            raise BlobError(exc.code, exc.message, exc.status) from None

    await _thread(check)


def _finish(
    store: BlobStore, upload: Upload | None, tail: bytes, declared: int | None, md5: str | None
) -> tuple[Upload, str]:
    """The staged upload, complete and checked against the declared size and MD5; its MD5."""
    staged = upload or store.begin()
    try:
        if tail:
            staged.write(tail)
    except BaseException:
        staged.discard()
        raise
    return staged, staged.finish(declared, md5)


async def _thread(fn: Callable[..., T], *args: Any) -> T:
    return await run_in_threadpool(fn, *args)


# -- PUT: blobs, blocks, block lists, metadata, containers ------------------------------------
@router.put("/{account}/{container}")
@router.put("/{account}/{container}/{path:path}")
@body_limit(MAX_PUT_BLOB)  # the Blob service's own limits (a block, a blob) come first
async def put(request: Request, account: str, container: str, path: str = "") -> Response:
    async def work() -> Response:
        target = await _target(request, account, container, path)
        query = target.query
        if query.get("restype") == "container":
            return await _create_container(target)
        comp = query.get("comp")
        if comp == "block":
            return await _put_block(request, target)
        if comp == "blocklist":
            return await _put_block_list(request, target)
        if comp == "metadata":
            parts = target.blob("w")
            info = await _thread(target.store.set_metadata, parts, _metadata(request))
            return Response(status_code=200, headers=_headers(_etag(info)))
        if comp is not None:
            raise BlobError("UnsupportedQueryParameter", f"comp={comp} is not offered by this service", 400)
        return await _put_blob(request, target)

    return await _guard(request, work)


def _etag(info: BlobInfo) -> dict[str, str]:
    return {"ETag": info.etag, "Last-Modified": _http_date(info.mtime_ns)}


async def _create_container(target: _Target) -> Response:
    target.grant.require("c", target.parts)
    if target.parts:  # a folder as a container: it exists once a blob is in it
        return Response(status_code=201, headers=_headers())
    created = await _thread(target.store.create_container)
    if not created:
        raise BlobError("ContainerAlreadyExists", f"container '{target.container}' exists", 409)
    return Response(status_code=201, headers=_headers())


async def _put_blob(request: Request, target: _Target) -> Response:
    parts = target.blob("w")
    blob_type = request.headers.get("x-ms-blob-type", "")
    if blob_type != "BlockBlob":
        raise BlobError(
            "InvalidHeaderValue", f"x-ms-blob-type '{blob_type}': only BlockBlob blobs are offered", 400
        )
    _refuse_unchecked(request)
    md5_header = _declared_md5(request, "content-md5")
    blob_md5 = _declared_md5(request, "x-ms-blob-content-md5")
    exclusive = request.headers.get("if-none-match") == "*"
    declared = _content_length(request, MAX_PUT_BLOB)
    await _check_room(request, target, declared)
    content_type, metadata = request.headers.get("x-ms-blob-content-type"), _metadata(request)
    upload, tail = await _receive(request, target.store, MAX_PUT_BLOB)

    def store() -> tuple[BlobInfo, str]:
        staged, md5 = _finish(target.store, upload, tail, declared, md5_header)
        if blob_md5 is not None and blob_md5 != md5:
            staged.discard()
            raise BlobError("Md5Mismatch", "x-ms-blob-content-md5 does not match the body", 400)
        return target.store.put(parts, staged, md5, content_type, metadata, exclusive), md5

    info, md5 = await _thread(store)
    return Response(
        status_code=201,
        headers=_headers({**_etag(info), "Content-MD5": md5, "x-ms-request-server-encrypted": "false"}),
    )


def _block_id(query: dict[str, str]) -> str:
    block_id = query.get("blockid", "")
    try:
        decoded = base64.b64decode(block_id, validate=True)
    except (ValueError, binascii.Error):
        decoded = b""
    if not decoded or len(decoded) > 64:
        raise BlobError("InvalidQueryParameterValue", "blockid must be base64 of at most 64 bytes", 400)
    return block_id


async def _put_block(request: Request, target: _Target) -> Response:
    parts = target.blob("w")
    block_id = _block_id(target.query)
    _refuse_unchecked(request)
    md5_header = _declared_md5(request, "content-md5")
    declared = _content_length(request, MAX_BLOCK)
    await _check_room(request, target, declared)
    upload, tail = await _receive(request, target.store, MAX_BLOCK)

    def stage() -> str:
        staged, md5 = _finish(target.store, upload, tail, declared, md5_header)
        target.store.stage_block(parts, block_id, staged)
        return md5

    md5 = await _thread(stage)
    return Response(
        status_code=201, headers=_headers({"Content-MD5": md5, "x-ms-request-server-encrypted": "false"})
    )


async def _put_block_list(request: Request, target: _Target) -> Response:
    parts = target.blob("w")
    _refuse_unchecked(request)
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BLOCK_LIST:
            raise BlobError("RequestBodyTooLarge", "the block list is too long", 413)
    md5_header = _declared_md5(request, "content-md5")
    if md5_header is not None and base64.b64encode(hashlib.md5(body).digest()).decode() != md5_header:
        raise BlobError("Md5Mismatch", "the block list's MD5 does not match Content-MD5", 400)
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise BlobError("InvalidXmlDocument", f"the block list is not XML ({exc})", 400) from None
    ids = []
    for item in root:
        if item.tag not in ("Latest", "Uncommitted"):
            raise BlobError(
                "InvalidBlockList",
                f"<{item.tag}> blocks are not offered; list staged blocks as <Latest> or <Uncommitted>",
                400,
            )
        ids.append((item.text or "").strip())
    info = await _thread(
        target.store.commit_blocks,
        parts,
        ids,
        _declared_md5(request, "x-ms-blob-content-md5"),
        request.headers.get("x-ms-blob-content-type"),
        _metadata(request),
        request.headers.get("if-none-match") == "*",
    )
    return Response(
        status_code=201, headers=_headers({**_etag(info), "x-ms-request-server-encrypted": "false"})
    )


# -- GET / HEAD: blobs, listings, container properties ----------------------------------------
@router.get("/{account}/{container}")
@router.get("/{account}/{container}/{path:path}")
@router.head("/{account}/{container}")
@router.head("/{account}/{container}/{path:path}")
async def get(request: Request, account: str, container: str, path: str = "") -> Response:
    async def work() -> Response:
        target = await _target(request, account, container, path)
        if target.query.get("restype") == "container":
            if target.query.get("comp") == "list":
                return await _list(target)
            return await _container_properties(target)
        if target.query.get("comp") is not None:
            raise BlobError("UnsupportedQueryParameter", f"comp={target.query['comp']} is not offered", 400)
        return await _get_blob(request, target)

    return await _guard(request, work)


async def _container_properties(target: _Target) -> Response:
    if "r" not in target.grant.permissions and "l" not in target.grant.permissions:
        target.grant.require("r")
    exists = await _thread(target.store.container_exists)
    if not exists:
        raise BlobError("ContainerNotFound", f"no container '{target.container}'", 404)
    mtime = await _thread(target.store.container_mtime_ns)
    headers = {
        "ETag": f'"0x{mtime:X}"',
        "Last-Modified": _http_date(mtime),
        "x-ms-lease-state": "available",
        "x-ms-lease-status": "unlocked",
        "x-ms-has-immutability-policy": "false",
        "x-ms-has-legal-hold": "false",
    }
    return Response(status_code=200, headers=_headers(headers))


def _parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """[start, end] inclusive of ``bytes=a-b`` / ``bytes=a-``; None for the whole blob."""
    if not header:
        return None
    unit, _, spec = header.partition("=")
    start_text, _, end_text = spec.partition("-")
    if unit.strip() != "bytes" or not start_text.strip().isdigit():
        raise BlobError("InvalidRange", f"range '{header}' is not bytes=START-[END]", 416)
    start = int(start_text)
    end = int(end_text) if end_text.strip().isdigit() else size - 1
    if start >= size or end < start:
        raise BlobError("InvalidRange", f"range '{header}' is outside the blob's {size} bytes", 416)
    return start, min(end, size - 1)


async def _get_blob(request: Request, target: _Target) -> Response:
    parts = target.blob("r")
    opened = await _thread(target.store.open, parts)
    if opened is None:
        raise BlobError("BlobNotFound", f"no blob '{'/'.join(parts)}'", 404)
    fd, info = opened
    headers = _info_headers(info)
    try:
        wanted = _parse_range(request.headers.get("x-ms-range") or request.headers.get("range"), info.size)
    except BlobError:
        await _thread(os.close, fd)
        raise
    status, start, length = 200, 0, info.size
    if wanted is not None:
        status, start, length = 206, wanted[0], wanted[1] - wanted[0] + 1
        headers["Content-Range"] = f"bytes {wanted[0]}-{wanted[1]}/{info.size}"
        if info.content_md5:
            headers["x-ms-blob-content-md5"] = info.content_md5
    elif info.content_md5:
        headers["Content-MD5"] = info.content_md5
    headers["Content-Length"] = str(length)
    if request.method == "HEAD":
        await _thread(os.close, fd)
        return Response(status_code=200, headers=_headers(headers))
    if wanted is not None and request.headers.get("x-ms-range-get-content-md5") == "true":
        data = b"".join(await _thread(lambda: list(read_range(fd, start, length))))
        headers["Content-MD5"] = base64.b64encode(hashlib.md5(data).digest()).decode()
        return Response(data, status, headers=_headers(headers))
    return StreamingResponse(read_range(fd, start, length), status, headers=_headers(headers))


async def _list(target: _Target) -> Response:
    query = target.query
    base = "/".join(target.parts)
    vprefix = f"{base}/" if base else ""
    prefix = query.get("prefix", "")
    delimiter = query.get("delimiter", "")
    marker = query.get("marker", "")
    try:
        max_results = min(int(query.get("maxresults", MAX_RESULTS)), MAX_RESULTS)
    except ValueError:
        raise BlobError("InvalidQueryParameterValue", "maxresults must be a number", 400) from None
    if max_results < 1:
        raise BlobError("InvalidQueryParameterValue", "maxresults must be at least 1", 400)
    full_prefix = vprefix + prefix
    target.grant.require("l")
    granted = "".join(f"{p}/" for p in target.grant.prefix)
    if full_prefix.startswith(granted):
        scope = full_prefix
    elif granted.startswith(full_prefix):
        scope = granted  # a wider listing shows what the signature covers
    else:
        target.grant.require("l", tuple(p for p in full_prefix.split("/") if p))
        scope = full_prefix
    infos = await _thread(target.store.list, scope)
    include = set(query.get("include", "").split(","))
    entries: list[tuple[str, BlobInfo | None]] = []
    seen_prefixes: set[str] = set()
    for info in infos:
        name = info.name[len(vprefix) :]
        if not name.startswith(prefix):
            continue
        if delimiter:
            cut = name.find(delimiter, len(prefix))
            if cut >= 0:
                folder = name[: cut + len(delimiter)]
                if folder not in seen_prefixes:
                    seen_prefixes.add(folder)
                    entries.append((folder, None))
                continue
        entries.append((name, info))
    entries = [e for e in entries if e[0] >= marker] if marker else entries
    page, rest = entries[:max_results], entries[max_results:]
    out = [
        '<?xml version="1.0" encoding="utf-8"?>',
        f'<EnumerationResults ServiceEndpoint="" ContainerName="{escape(target.container)}">',
        f"<Prefix>{escape(prefix)}</Prefix><Marker>{escape(marker)}</Marker>",
        f"<MaxResults>{max_results}</MaxResults>",
        f"<Delimiter>{escape(delimiter)}</Delimiter><Blobs>" if delimiter else "<Blobs>",
    ]
    for name, entry in page:
        if entry is None:
            out.append(f"<BlobPrefix><Name>{escape(name)}</Name></BlobPrefix>")
        else:
            out.append(_blob_xml(name, entry, "metadata" in include))
    out.append(f"</Blobs><NextMarker>{escape(rest[0][0]) if rest else ''}</NextMarker></EnumerationResults>")
    return Response("".join(out).encode(), 200, headers=_headers(), media_type="application/xml")


def _blob_xml(name: str, info: BlobInfo, with_metadata: bool) -> str:
    props = [
        f"<Creation-Time>{_http_date(info.created_ns)}</Creation-Time>",
        f"<Last-Modified>{_http_date(info.mtime_ns)}</Last-Modified>",
        f"<Etag>{escape(info.etag)}</Etag>",
        f"<Content-Length>{info.size}</Content-Length>",
        f"<Content-Type>{escape(info.content_type)}</Content-Type>",
        f"<Content-MD5>{escape(info.content_md5 or '')}</Content-MD5>",
        "<BlobType>BlockBlob</BlobType><AccessTier>Hot</AccessTier><AccessTierInferred>true</AccessTierInferred>",
        "<LeaseStatus>unlocked</LeaseStatus><LeaseState>available</LeaseState>",
        "<ServerEncrypted>false</ServerEncrypted>",
    ]
    meta = ""
    if with_metadata:
        meta = (
            "<Metadata>"
            + "".join(f"<{k}>{escape(v)}</{k}>" for k, v in info.metadata.items())
            + "</Metadata>"
        )
    return f"<Blob><Name>{escape(name)}</Name><Properties>{''.join(props)}</Properties>{meta}</Blob>"


# -- DELETE -------------------------------------------------------------------------------------
@router.delete("/{account}/{container}")
@router.delete("/{account}/{container}/{path:path}")
async def delete(request: Request, account: str, container: str, path: str = "") -> Response:
    async def work() -> Response:
        target = await _target(request, account, container, path)
        if target.query.get("restype") == "container":
            raise BlobError("OperationNotAllowed", "a datastore is not deleted through the Blob service", 403)
        parts = target.blob("d")
        await _thread(target.store.delete, parts)
        return Response(status_code=202, headers=_headers())

    return await _guard(request, work)
