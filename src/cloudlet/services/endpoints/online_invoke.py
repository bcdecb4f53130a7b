"""A scoring request sent on a user's behalf (the studio's Test tab): through the gateway a client
uses (``api/online_gateway.py``, over HTTP), with the endpoint's own key or a fresh ``aml_token``
fetched here for a caller who may list them (the REST ``listKeys``/``token`` need write access:
the route checks it), so the request is exactly one a client would send.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from cloudlet.domain.endpoints import online_endpoints as rules
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.endpoints import online_endpoints as online
from cloudlet.store.schema import OnlineEndpoint

TIMEOUT_S = 60.0
MAX_SHOWN_BYTES = 256 << 10  # the answer shown in a page; the rest is cut (and said so)


@dataclass(frozen=True)
class Invoked:
    status: int
    latency_ms: float
    body: str
    truncated: bool
    deployment: str | None  # the deployment that answered (the gateway's header), when it says


def credential(secret: str, row: OnlineEndpoint) -> str:
    """The bearer a client would send: the primary key, or a token minted now."""
    if row.spec.get("auth_mode") == "aml_token":
        return str(online.token(secret, row)["accessToken"])
    return online.keys(row)["primaryKey"]


def invoke(
    base: str, ref: WorkspaceRef, row: OnlineEndpoint, secret: str, body: bytes, deployment: str | None
) -> Invoked:
    """POST BODY to ROW's scoring URI as a client would; DEPLOYMENT pins one (else traffic decides)."""
    headers = {"Authorization": f"Bearer {credential(secret, row)}", "Content-Type": "application/json"}
    if deployment:
        headers[rules.PINNED_HEADER] = deployment
    import httpx  # here, not at import: ~0.1 s of every server's start for one studio action

    started = time.perf_counter()
    with httpx.Client(timeout=TIMEOUT_S, trust_env=False) as http:
        answer = http.post(online.scoring_uri(base, ref, row.name), content=body, headers=headers)
    latency_ms = (time.perf_counter() - started) * 1000
    raw = answer.content
    text = raw[:MAX_SHOWN_BYTES].decode("utf-8", "replace")
    return Invoked(
        answer.status_code,
        round(latency_ms, 1),
        text,
        len(raw) > MAX_SHOWN_BYTES,
        answer.headers.get(rules.PINNED_HEADER),
    )
