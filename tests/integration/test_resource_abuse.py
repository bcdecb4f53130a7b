"""The resource-abuse battery (issue 24, standing test): every route that takes a body, found in
the server's own OpenAPI document (so a new route is covered without editing this file), plus
the routes the document leaves out (found in the app's route table), gets huge bodies, deeply
nested JSON, slow bodies, archive bombs (routes that take a tar.gz) and huge counts (every
count-like integer of its JSON schema). Each answer must be a 4xx, and between cases the server
must stay healthy: ``/healthz`` answers in under 100 ms.

One real server, with a short body timeout (2 s) and small unpack limits so that the whole
module stays well under a minute."""

from __future__ import annotations

import contextlib
import io
import re
import socket
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from cloudlet.api.app import create_app
from tests.conftest import RunningServer
from tests.jobs_helpers import served

BODY_TIMEOUT_S = 2
HUGE = 1 << 40  # a declared Content-Length past every route's limit
BIG_INT = 2**64  # past every count and past a 64-bit column
COUNT_LIKE = re.compile(
    r"count|instances|nodes|concurren|replicas|max_?(?!length)|limit|size_?gb|trials", re.I
)
DEEP = b"[" * 100_000 + b"]" * 100_000
HEALTHY_S = 0.1
# Routes the app's table lists with a body-taking method that take no body at all.
TAKE_NO_BODY = {("POST", "/signout"): "only clears the sign-in cookie; its body is never read"}


@dataclass(frozen=True)
class Case:
    method: str
    path: str  # with path parameters filled in
    content_type: str  # what the route takes
    schema: dict[str, Any] | None  # its JSON body's schema, resolved lazily

    @property
    def id(self) -> str:
        return f"{self.method} {self.path}"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    env = {
        "CLOUDLET_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
        "CLOUDLET_MAX_UNPACKED_MIB": "8",
        "CLOUDLET_MAX_UNPACKED_FILES": "100",
    }
    yield from served(tmp_path_factory, "abuse", extra_env=env)


@pytest.fixture(scope="module")
def document(srv: RunningServer) -> dict[str, Any]:
    found: dict[str, Any] = httpx.get(srv.endpoint + "/openapi.json", timeout=30).json()
    return found


def _value(name: str, srv: RunningServer) -> str:
    lowered = name.lower()
    if lowered in ("sub", "subscriptionid", "subscription_id"):
        return srv.subscription_id
    if lowered in ("rg", "resourcegroupname", "resource_group"):
        return "default"
    if lowered in ("ws", "workspacename", "workspace"):
        return "default"
    if lowered == "digest":
        return "0" * 64
    return "abuse1"


def _fill(path: str, srv: RunningServer) -> str:
    return re.sub(r"\{([^}:]+)(:[^}]*)?\}", lambda m: _value(m.group(1), srv), path)


def _cases(srv: RunningServer, document: dict[str, Any]) -> list[Case]:
    """Every operation of the document with a request body, then every route of the app with a
    body-taking method that the document leaves out (Blob service, sign-in, instance proxy,
    online scoring)."""
    cases: list[Case] = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            body = operation.get("requestBody") if isinstance(operation, dict) else None
            if not body:
                continue
            content_type, media = next(iter(body["content"].items()))
            cases.append(Case(method.upper(), _fill(path, srv), content_type, media.get("schema")))
    documented = {(c.method, c.path) for c in cases}
    app = create_app(SimpleNamespace())  # type: ignore[arg-type]  # only its route table is read
    for route in app.routes:
        if not hasattr(route, "path") or getattr(route, "include_in_schema", True):
            continue  # the gateway (no path: added below) and the documented routes
        for method in sorted(
            set(getattr(route, "methods", None) or ()) - {"GET", "HEAD", "OPTIONS", "DELETE"}
        ):
            path = _fill(route.path, srv)  # type: ignore[attr-defined]
            if (method, path) not in documented and (method, route.path) not in TAKE_NO_BODY:  # type: ignore[attr-defined]
                cases.append(Case(method, path, "application/octet-stream", None))
    online = f"/online/{srv.subscription_id}/default/default/abuse1/score"  # a plain ASGI route
    cases.append(Case("POST", online, "application/json", None))
    return cases


_health: dict[str, httpx.Client] = {}


def _healthy(srv: RunningServer, after: str) -> None:
    """/healthz in under 100 ms, in one of three tries 50 ms apart, over one kept connection
    (a new client costs the test more than the server's answer): the test machine is shared,
    and a slow scheduling now and then is not the server being tied up (a server that is tied
    up misses all three)."""
    client = _health.get(srv.endpoint)
    if client is None:
        client = _health[srv.endpoint] = httpx.Client(base_url=srv.endpoint, timeout=5)
    for attempt in range(3):
        if attempt:
            time.sleep(0.05)
        started = time.perf_counter()
        answer = client.get("/healthz")
        took = time.perf_counter() - started
        if answer.status_code == 200 and took < HEALTHY_S:
            return
    pytest.fail(f"after {after}: /healthz answered {answer.status_code} in {took * 1000:.0f} ms")


def _raw(srv: RunningServer, case: Case, headers: dict[str, str], body: bytes, key: str) -> int:
    """Send the head and BODY over a plain socket (a declared length may exceed what is sent) and
    return the answer's status; 0 when the server closed without one."""
    where = urlsplit(srv.endpoint)
    with socket.create_connection((where.hostname, where.port), timeout=10) as conn:
        lines = [
            f"{case.method} {case.path} HTTP/1.1",
            f"Host: {where.netloc}",
            f"Authorization: Bearer {key}",
        ]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        with contextlib.suppress(OSError):  # the server may answer and close before it all went
            conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        head = b""
        try:
            while b"\r\n" not in head:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                head += chunk
        except OSError:
            return 0
        return int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else 0


def _bomb() -> bytes:
    buffer = io.BytesIO()
    size = 64 << 20

    class Zeros:
        left = size

        def read(self, n: int = -1) -> bytes:
            n = self.left if n < 0 else min(n, self.left)
            self.left -= n
            return bytes(n)

    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as archive:
        info = tarfile.TarInfo("zeros.bin")
        info.size = size
        archive.addfile(info, Zeros())  # type: ignore[arg-type]
    return buffer.getvalue()


def _resolve(schema: dict[str, Any], document: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        *_, name = schema["$ref"].split("/")
        schema = document["components"]["schemas"][name]
    return schema


def _huge_counts(schema: dict[str, Any] | None, document: dict[str, Any], depth: int = 0) -> Any:
    """An instance of SCHEMA holding only its count-like integers, each set to BIG_INT; None
    when it has none (within 6 levels)."""
    if schema is None or depth > 6:
        return None
    schema = _resolve(schema, document)
    for key in ("anyOf", "oneOf", "allOf"):
        for option in schema.get(key, ()):
            found = _huge_counts(option, document, depth + 1)
            if found is not None:
                return found
    out: dict[str, Any] = {}
    for name, prop in (schema.get("properties") or {}).items():
        resolved = _resolve(prop, document)
        kinds: set[str] = set()
        for option in (resolved, *(_resolve(o, document) for o in resolved.get("anyOf", ()))):
            kind = option.get("type")  # a name, or a list of them (a nullable field's)
            kinds.update(kind if isinstance(kind, list) else [kind] if kind else [])
        if "integer" in kinds and COUNT_LIKE.search(name):
            out[name] = BIG_INT
        else:
            inner = _huge_counts(resolved, document, depth + 1)
            if inner is not None:
                out[name] = inner
    return out or None


def test_every_route_with_a_body_survives_the_battery(srv: RunningServer, document: dict[str, Any]) -> None:
    cases = _cases(srv, document)
    assert len(cases) > 60, "the battery found too few routes: is the document complete?"
    failures: list[str] = []
    refused_as_too_large = 0
    with_counts: list[str] = []
    bomb = _bomb()
    with srv.client() as api:
        for case in cases:
            # 1. a huge body: a declared length past every limit, a little of it sent
            status = _raw(
                srv,
                case,
                {"Content-Type": case.content_type, "Content-Length": str(HUGE)},
                b"x" * 65536,
                srv.api_key,
            )
            refused_as_too_large += status == 413
            if not 400 <= status < 500:
                failures.append(f"huge body: {case.id} → {status}")
            _healthy(srv, f"huge body to {case.id}")
            # 2. deeply nested JSON
            answer = api.request(
                case.method, case.path, content=DEEP, headers={"Content-Type": "application/json"}
            )
            if not 400 <= answer.status_code < 500:
                failures.append(f"deep JSON: {case.id} → {answer.status_code} {answer.text[:200]}")
            _healthy(srv, f"deep JSON to {case.id}")
            # 3. an archive bomb to the routes that take a tar.gz
            if case.content_type == "application/gzip":
                answer = api.request(
                    case.method, case.path, content=bomb, headers={"Content-Type": case.content_type}
                )
                if not 400 <= answer.status_code < 500:
                    failures.append(f"archive bomb: {case.id} → {answer.status_code} {answer.text[:200]}")
                _healthy(srv, f"archive bomb to {case.id}")
            # 4. huge counts in every count-like field of the body's schema
            counts = _huge_counts(case.schema, document) if case.content_type == "application/json" else None
            if counts is not None:
                with_counts.append(case.id)
                answer = api.request(case.method, case.path, json=counts)
                if not 400 <= answer.status_code < 500:
                    failures.append(
                        f"huge counts {counts}: {case.id} → {answer.status_code} {answer.text[:200]}"
                    )
                _healthy(srv, f"huge counts to {case.id}")
    assert failures == [], "\n".join(failures)
    # Most routes read the body after authenticating: the limit itself answers (80 of 95 on
    # 2026-12-06; the others refuse the caller first: agent routes without a node token, the Blob
    # service without a signature, a scoring URI of no endpoint, an instance that does not exist).
    assert refused_as_too_large >= 0.7 * len(cases), (refused_as_too_large, len(cases))
    assert len(with_counts) >= 5, f"huge counts reached only {with_counts}: are count fields still found?"


def test_slow_bodies_time_out_on_every_route_without_tying_up_the_server(
    srv: RunningServer, document: dict[str, Any]
) -> None:
    """Every route at once gets a client that trickles its body a byte at a time: each is
    answered 408 (or closed) about BODY_TIMEOUT_S later, and /healthz stays fast meanwhile."""
    where = urlsplit(srv.endpoint)
    cases = _cases(srv, document)
    conns: list[tuple[Case, socket.socket]] = []
    for case in cases:
        conn = socket.create_connection((where.hostname, where.port), timeout=10)
        head = [
            f"{case.method} {case.path} HTTP/1.1",
            f"Host: {where.netloc}",
            f"Authorization: Bearer {srv.api_key}",
        ]
        head += [f"Content-Type: {case.content_type}", "Content-Length: 1000"]
        conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        conn.setblocking(False)
        conns.append((case, conn))
    answered: dict[str, int] = {}
    deadline = time.monotonic() + BODY_TIMEOUT_S + 10
    try:
        while len(answered) < len(conns) and time.monotonic() < deadline:
            for case, conn in conns:
                if case.id in answered:
                    continue
                try:
                    data = conn.recv(4096)
                    answered[case.id] = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0
                    continue
                except BlockingIOError:
                    pass
                except OSError:
                    answered[case.id] = 0
                    continue
                try:
                    conn.send(b" ")
                except OSError:
                    answered[case.id] = 0
            _healthy(srv, "a round of trickled bytes")
            time.sleep(0.25)
    finally:
        for _, conn in conns:
            conn.close()
    missing = [c.id for c, _ in conns if c.id not in answered]
    assert missing == [], f"still holding a trickled body after {BODY_TIMEOUT_S + 10} s"
    wrong = {k: v for k, v in answered.items() if v != 0 and not 400 <= v < 500}
    assert wrong == {}
    assert sum(v == 408 for v in answered.values()) >= 0.5 * len(conns), answered


@pytest.mark.parametrize(
    ("what", "path", "body"),
    [
        (
            "compute max_instances",
            "computes/abuse-cluster",
            {"type": "amlcompute", "size": "Standard_DS3_v2", "max_instances": BIG_INT},
        ),
        (
            "job instance_count",
            "jobs/abuse-job",
            {"command": "true", "resources": {"instance_type": "Standard_DS3_v2", "instance_count": 10**9}},
        ),
    ],
)
def test_huge_counts_in_real_documents_are_refused(
    srv: RunningServer, what: str, path: str, body: dict[str, Any]
) -> None:
    with srv.client() as api:
        answer = api.put(f"{srv.ws_path}/{path}", json=body)
    assert 400 <= answer.status_code < 500, (what, answer.status_code, answer.text)
    _healthy(srv, what)
