"""Request-scoped plumbing: the unit of work (one session per request) and the caller."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import Depends, Request, Response
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control.clusters import ClusterReconciler
from cloudlet.control.dispatch_batcher import DispatchBatcher
from cloudlet.control.instance_watch import InstanceWatch
from cloudlet.control.notify import NodeNotifier
from cloudlet.control.reconciler import OperationReconciler
from cloudlet.domain.errors import CloudletError
from cloudlet.services import dispatch, identity
from cloudlet.services.context import Caller
from cloudlet.services.storage import DataRoot
from cloudlet.store import db


@dataclass
class AppState:
    sessions: sessionmaker[Session]
    read_sessions: sessionmaker[Session]
    token_secret: str
    installation_id: str
    home: Path
    reconciler: OperationReconciler | None
    data: DataRoot
    notifier: NodeNotifier = field(default_factory=NodeNotifier)
    clusters: ClusterReconciler | None = None
    endpoint: str = ""
    instance_watch: InstanceWatch | None = None
    batcher: DispatchBatcher | None = None  # job submissions and run reports (group commit)

    def dispatch_batcher(self) -> DispatchBatcher:
        assert self.batcher is not None, "the dispatch batcher starts with the app"
        return self.batcher

    def after_commit(self, wake_nodes: list[str], rescale: bool = False) -> None:
        """Wake the agents whose work changed; wake the cluster loop only when demand changed in
        a way that may need nodes made or released (placement itself happens inline)."""
        for node_id in set(wake_nodes):
            self.notifier.notify(node_id)
        if rescale and self.clusters is not None:
            self.clusters.wake.set()


async def app_state(request: Request) -> AppState:
    state: AppState = request.app.state.cloudlet
    return state


class Context:
    """One request's unit of work. The caller is authenticated on first use, inside the (sync)
    endpoint, so a request makes a single hop to the thread pool."""

    def __init__(self, session: Session, token: str, state: AppState, request: Request) -> None:
        self.session = session
        self.state = state
        self.request = request
        self._token = token
        self._caller: Caller | None = None

    @property
    def caller(self) -> Caller:
        if self._caller is None:
            self._caller = identity.authenticate(self.session, self._token, self.state.token_secret)
        return self._caller

    def commit(
        self, wake_nodes: list[str] | None = None, rescale: bool = False, operations: bool = False
    ) -> None:
        self.session.commit()
        self.state.notifier.deliver(dispatch.deliveries(self.session))
        if operations and self.state.reconciler is not None:
            self.state.reconciler.wake.set()
        self.state.after_commit(wake_nodes or [], rescale)


def bearer_token(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise CloudletError(
            "AuthenticationFailed",
            "missing 'Authorization: Bearer <key>' header; the admin key is in $CLOUDLET_HOME/credentials",
            status=401,
        )
    return token.strip()


async def context(request: Request, state: AppState = Depends(app_state)) -> AsyncIterator[Context]:
    token = bearer_token(request)
    factory = state.read_sessions if request.method in ("GET", "HEAD") else state.sessions
    session = factory()
    try:
        yield Context(session, token, state, request)
    finally:
        if session.in_transaction():  # it holds a connection: ending it is store I/O, off the loop
            db.ENDER.end(session)
        else:
            session.close()  # no connection: nothing but bookkeeping


def json_response(data: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    """Serialise once, here: returning a Response skips FastAPI's second pass over the body."""
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
    return Response(body, status_code=status_code, headers=headers, media_type="application/json")
