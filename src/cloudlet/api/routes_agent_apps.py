"""The agent's report of its apps and instance (compute instances; docs/agent-protocol.md): the
apps merge into ``Node.apps``; ``activity``, ``setup``, ``ssh`` and ``disk`` into ``Node.report``
(``services/compute/instance_reports.py``). Node-token auth, before the body is read."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Response
from pydantic import BaseModel, ConfigDict, Field

from cloudlet.api.deps import AppState, app_state, json_response
from cloudlet.api.routing import NodeRoute
from cloudlet.services.compute import instance_reports

router = APIRouter(prefix="/agent/v1", tags=["agent"], route_class=NodeRoute)


class AppStatus(BaseModel):
    model_config = ConfigDict(extra="ignore")
    state: Literal["starting", "ready", "failed"]
    address: str | None = Field(default=None, max_length=255)
    port: int | None = Field(default=None, ge=1, le=65535)
    base_url: str | None = Field(default=None, max_length=512)
    pid: int | None = Field(default=None, ge=0, le=2**31)
    error: str | None = Field(default=None, max_length=64 * 1024)
    log: str | None = Field(default=None, max_length=64 * 1024)


class InstanceReport(BaseModel):
    model_config = ConfigDict(extra="ignore")
    apps: dict[str, AppStatus] = Field(max_length=64)
    activity: dict[str, Any] | None = None
    setup: dict[str, Any] | None = None
    ssh: dict[str, Any] | None = None
    disk: dict[str, Any] | None = None


@router.post("/nodes/{node_id}/apps")
def report_apps(
    node_id: Annotated[str, Path(max_length=32)],
    body: InstanceReport,
    state: AppState = Depends(app_state),
) -> Response:
    extra = instance_reports.clean_report(body.model_dump(exclude_none=True, exclude={"apps"}))
    apps = {name: s.model_dump(exclude_none=True) for name, s in body.apps.items()}
    with state.sessions() as session:  # the route checked its token against this node id
        instance_reports.record(session, node_id, apps, extra)
    return json_response({"ok": True})
