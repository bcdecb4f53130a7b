"""Request-scoped plumbing: the unit of work (one session per request) and the caller."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson
from fastapi import Request, Response
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.services.compute.agent_protocol import AgentProtocol
from cloudlet.services.core.batch import Work
from cloudlet.services.core.context import Caller
from cloudlet.services.core.feed_wake import FeedWake
from cloudlet.services.core.notify import NodeNotifier
from cloudlet.services.core.storage import DataRoot
from cloudlet.store import db

if TYPE_CHECKING:
    from cloudlet.control.online_replicas import OnlineRuntime


class ServerURL:
    """The server's own URL, known once its socket is bound (after the parts that hand it to agents
    are built): a callable they hold, set once."""

    def __init__(self, value: str = "") -> None:
        self.value = value

    def __call__(self) -> str:
        return self.value


AML_RESOURCE_ID = "https://ml.azure.cloudlet"  # what azure-ai-ml derives from the portal below
PORTAL = "https://portal.azure.cloudlet"


class HttpsEndpoint:
    """The TLS listener's URL and CA file (known once its socket is bound), and the audiences a
    JWT from ``/msi/token`` may carry here: azure-ai-ml's ``aml_resource_id`` and this server's
    resource-manager URL under each name its certificate carries."""

    def __init__(self) -> None:
        self.value = ""
        self.ca_file = ""
        self.audiences: frozenset[str] = frozenset({AML_RESOURCE_ID})

    def set(self, url: str, ca_file: str, public_host: str = "") -> None:
        """PUBLIC_HOST: the public URL's host (``--public-url``), which the certificate names: an
        SDK on another machine reaches this listener, and asks for tokens, by that name."""
        self.value, self.ca_file = url.rstrip("/"), ca_file
        port = self.value.rsplit(":", 1)[-1]
        hosts = ["127.0.0.1", "localhost", *([public_host] if public_host else [])]
        names = {self.value, *(f"https://{_bracketed(host)}:{port}" for host in hosts)}
        self.audiences = frozenset({AML_RESOURCE_ID, *names})

    def __call__(self) -> str:
        return self.value


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class PassCounts(Protocol):
    @property
    def passes(self) -> int: ...

    @property
    def last_pass_at(self) -> float | None: ...


class ControlLoop(Protocol):
    """A background loop as the server's shell sees it (``control/loop.py``)."""

    name: str

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def counted(self) -> PassCounts: ...


class Batcher(Protocol):
    """Job submissions and run reports, applied in group commits (``control/dispatch_batcher``)."""

    def start(self, loop: asyncio.AbstractEventLoop) -> None: ...

    def stop(self) -> None: ...

    async def apply(self, work: Work, urgent: bool = False) -> Any: ...


@dataclass
class AppState:
    """What the routes reach: built whole by ``server.build_state``; nothing in it is optional."""

    sessions: sessionmaker[Session]
    read_sessions: sessionmaker[Session]
    warm_reads: db.WarmReads  # a request's read session (``Context``), kept between requests
    token_secret: str
    installation_id: str
    home: Path
    data: DataRoot
    url: ServerURL
    notifier: NodeNotifier
    loops: tuple[ControlLoop, ...]  # operations, clusters, instance watch, pipelines and sweeps
    batcher: Batcher
    agents: AgentProtocol
    online: OnlineRuntime  # online endpoints' replicas and the gateway's view (issue 14)
    https: HttpsEndpoint = field(default_factory=HttpsEndpoint)  # the ARM facade's listener
    replica_id: str = ""  # this process's replica (a worker of ``--workers N`` is one each)
    # ``--public-url`` (``domain/public_url.py``): "" when not given, and ``url`` stands for it
    public: ServerURL = field(default_factory=ServerURL)
    # the events feed's open streams and what wakes them (``services/core/feed_wake.py``)
    feed: FeedWake = field(default_factory=FeedWake)

    @property
    def endpoint(self) -> str:
        """The base of every absolute link the server hands out (a job's studio page, an
        instance's apps, a scoring URI): the public URL, else the URL it is bound at. What the
        server dials itself, and what agents dial, stays ``url``."""
        return self.public.value or self.url.value

    def link_base(self, request_base: str) -> str:
        """The base of a link for the caller of a request that reached the server at
        REQUEST_BASE (a sign-in link): the public URL, else the address the caller used."""
        return self.public.value or request_base.rstrip("/")


async def app_state(request: Request) -> AppState:
    state: AppState = request.app.state.cloudlet
    return state


def _reads_only(request: Request) -> bool:
    """A request whose session only reads: a warm read session (``db.WarmReads``) serves it."""
    return request.method in ("GET", "HEAD")


class Context:
    """One request's unit of work: its caller (authenticated by the route before the body was
    read, ``api/routing.py``) and a store session opened on first use, in the endpoint's thread."""

    def __init__(self, state: AppState, request: Request) -> None:
        self.state = state
        self.request = request
        self._session: Session | None = None

    @property
    def caller(self) -> Caller:
        caller: Caller = self.request.state.caller
        return caller

    @property
    def session(self) -> Session:
        if self._session is None:
            if _reads_only(self.request):
                self._session = self.state.warm_reads.lease()
            else:
                self._session = self.state.sessions()
        return self._session

    def close(self) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        if _reads_only(self.request):
            self.state.warm_reads.release(session)
        else:
            session.close()  # the pool's reset rolls back: one ROLLBACK, not two


CONTEXT_KEY = "cloudlet_context"


async def context(request: Request) -> Context:
    """The request's ``Context``. A plain coroutine, not a generator (FastAPI's exit stacks cost
    more than the store queries of a small read): a sync endpoint's session is closed in its own
    thread (``routing._closing_sessions``), an async one's by the route (``end_context``)."""
    ctx = Context(request.app.state.cloudlet, request)
    setattr(request.state, CONTEXT_KEY, ctx)
    return ctx


def end_context(request: Request) -> None:
    """After the endpoint: a session an async endpoint left open is ended off the event loop."""
    ctx: Context | None = getattr(request.state, CONTEXT_KEY, None)
    if ctx is not None and ctx._session is not None:
        session, ctx._session = ctx._session, None
        db.ENDER.end(session, ctx.state.warm_reads.release if _reads_only(request) else None)


def dump_json(data: Any) -> bytes:
    """DATA as compact UTF-8 JSON: orjson (several times faster than ``json.dumps``, which took
    7 % of a job list's CPU under the mixed load), or the standard library for what orjson does
    not take (an integer beyond 64 bits)."""
    try:
        return orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


def json_response(data: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    """Serialise once, here: returning a Response skips FastAPI's second pass over the body."""
    body = dump_json(data)
    return Response(body, status_code=status_code, headers=headers, media_type="application/json")
