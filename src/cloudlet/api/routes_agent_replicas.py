"""The agents' side of online-deployment replicas (issue 14; ``agent/replicas.py``): an agent
reports the replicas it runs and is answered the ones it should run; it downloads a replica's
code and model here. Node-token auth before the body is read (``NodeRoute`` also checks that
the path's node is the token's); the board is the online runtime's, in this process."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Request, Response
from fastapi.responses import FileResponse
from pydantic import BaseModel, ConfigDict, Field

from cloudlet.api.deps import AppState, app_state, json_response
from cloudlet.api.routing import NodeRoute
from cloudlet.domain.errors import CloudletError

router = APIRouter(prefix="/agent/v1", tags=["agent"], route_class=NodeRoute)
NodeId = Annotated[str, Path(max_length=32)]
ReplicaId = Annotated[str, Path(pattern=r"^r-[0-9a-f]{12}$")]


class ReplicaStatus(BaseModel):
    model_config = ConfigDict(extra="ignore")
    state: Literal["starting", "running", "exited", "failed"]
    address: str | None = Field(default=None, max_length=255)
    port: int | None = Field(default=None, ge=1, le=65535)
    pid: int | None = Field(default=None, ge=0, le=2**31)
    exit_code: int | None = Field(default=None, ge=-(2**31), le=2**32)
    error: str | None = Field(default=None, max_length=8192)
    log: str | None = Field(default=None, max_length=256 * 1024)


class ReplicaReport(BaseModel):
    model_config = ConfigDict(extra="ignore")
    replicas: dict[Annotated[str, Field(max_length=40)], ReplicaStatus] = Field(
        default_factory=dict, max_length=256
    )


@router.post("/nodes/{node_id}/replicas")
def report_replicas(node_id: NodeId, body: ReplicaReport, state: AppState = Depends(app_state)) -> Response:
    """What the node runs → what it should run."""
    statuses = {rid: s.model_dump(exclude_none=True) for rid, s in body.replicas.items()}
    return json_response({"replicas": state.online.hosts.board.report(node_id, statuses)})


@router.get(
    "/nodes/{node_id}/replicas/{replica_id}/{part}",
    responses={200: {"content": {"application/gzip": {}}}},
)
def replica_archive(
    node_id: NodeId,
    replica_id: ReplicaId,
    part: Literal["code", "model"],
    request: Request,
    state: AppState = Depends(app_state),
) -> Response:
    path = state.online.hosts.board.archive(node_id, replica_id, part)
    if path is None or not path.is_file():
        raise CloudletError("ReplicaNotFound", f"node {node_id} runs no replica {replica_id}", status=404)
    return FileResponse(path, media_type="application/gzip")
