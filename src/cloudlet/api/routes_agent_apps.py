"""The agent's report of its apps and instance (compute instances; docs/agent-protocol.md): the
apps merge into ``Node.apps``; ``activity``, ``setup``, ``ssh`` and ``disk`` into ``Node.report``
(``services/instance_reports.py``). Node-token auth."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends, Request, Response

from cloudlet.api.deps import AppState, app_state, json_response
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.nodes import FINAL
from cloudlet.services import instance_reports
from cloudlet.services import nodes as node_service
from cloudlet.store.schema import Node

router = APIRouter(prefix="/agent/v1", tags=["agent"])
APP_FIELDS = ("state", "address", "port", "base_url", "pid", "error", "log")


def _clean(status: Any) -> dict[str, Any]:
    if not isinstance(status, dict) or status.get("state") not in ("starting", "ready", "failed"):
        raise CloudletError("InvalidRequest", "an app's state must be starting, ready or failed", "apps")
    return {k: status[k] for k in APP_FIELDS if k in status}


@router.post("/nodes/{node_id}/apps")
def report_apps(
    node_id: str, request: Request, body: Any = Body(default=None), state: AppState = Depends(app_state)
) -> Response:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    reported = (body or {}).get("apps") if isinstance(body, dict) else None
    if not isinstance(reported, dict):
        raise CloudletError("InvalidRequest", "expected {'apps': {name: status}}", "apps")
    extra = instance_reports.clean_report(body)
    with state.sessions.begin() as session:
        node = session.get(Node, node_id)
        if (
            node is None
            or scheme.lower() != "bearer"
            or node.token_hash != node_service.hash_token(token.strip())
        ):
            raise CloudletError("AuthenticationFailed", "unknown node or wrong node token", status=401)
        if node.state in {s.value for s in FINAL}:
            raise CloudletError("NodeGone", f"node {node_id} is {node.state}; stop", status=403)
        apps = {name: _clean(s) for name, s in reported.items()}
        if apps:
            node.apps = {**(node.apps or {}), **apps}
        if extra:
            node.report = {**(node.report or {}), **extra}
    if state.reconciler is not None:  # an instance operation may be waiting for exactly this
        state.reconciler.wake.set()
    return json_response({"ok": True})
