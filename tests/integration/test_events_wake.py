"""The events feed's streams are woken by the commits that record events (``feed_wake.py``), not
only by their poll: with the poll set to 30 s, an event reaches a watcher within a second or two,
on a server of one process and across the workers of ``--workers 2`` (a stream held by one worker,
the change made through the other). What no wake-up reaches, an event committed by a process
outside the server (standing in for another server on a shared store), still arrives by the
fallback poll."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
from sqlalchemy import insert, select

from cloudlet.store import db
from cloudlet.store.schema import LifecycleEvent, Workspace
from tests.conftest import RunningServer
from tests.jobs_helpers import wait_until

LONG_POLL = {"CLOUDLET_EVENTS_POLL_S": "30"}
PROMPT_S = 2.0  # commit → arrival, on a busy 2-core machine (~0.05 s on a quiet one); the poll is 30 s
COMPUTE = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 1}


class Stream(threading.Thread):
    """One ``watch=true`` stream on CLIENT's connection (so on the worker that connection reached):
    records each event with the time it arrived."""

    def __init__(self, srv: RunningServer, client: httpx.Client, since: int) -> None:
        super().__init__(daemon=True)
        self.srv, self.client, self.since = srv, client, since
        self.arrived: list[tuple[float, dict[str, Any]]] = []
        self.open = threading.Event()
        self.stop = threading.Event()
        self.failure: BaseException | None = None

    def run(self) -> None:
        headers = {"Last-Event-ID": str(self.since)}
        try:
            url = f"{self.srv.ws_path}/events"
            with self.client.stream("GET", url, params={"watch": "true"}, headers=headers) as response:
                assert response.status_code == 200, response.read()
                self.open.set()
                for line in response.iter_lines():
                    if self.stop.is_set():
                        return
                    if line.startswith("data: "):
                        self.arrived.append((time.time(), json.loads(line[6:])))
        except BaseException as exc:
            self.failure = exc

    def first(self, name: str) -> tuple[float, dict[str, Any]] | None:
        return next(((at, e) for at, e in list(self.arrived) if e["name"] == name), None)

    def close(self) -> None:
        self.stop.set()
        self.client.close()
        self.join(timeout=20)
        assert self.failure is None or isinstance(self.failure, httpx.HTTPError), self.failure


def _client(srv: RunningServer) -> httpx.Client:
    return httpx.Client(
        base_url=srv.endpoint,
        headers={"Authorization": f"Bearer {srv.api_key}"},
        timeout=httpx.Timeout(10, read=60),
    )


def _replica(client: httpx.Client) -> str:
    return str(client.get("/healthz").json()["replica"])


def _last_seq(client: httpx.Client, srv: RunningServer) -> int:
    since: int | None = None
    while True:
        params = {"limit": 1000} | ({} if since is None else {"since": since})
        body = client.get(f"{srv.ws_path}/events", params=params).json()
        since = int(body["lastSeq"])
        if "nextLink" not in body:
            return since


def _watch(srv: RunningServer, client: httpx.Client) -> Stream:
    stream = Stream(srv, client, _last_seq(client, srv))
    stream.start()
    assert stream.open.wait(30), "the stream did not open"
    time.sleep(0.5)  # its first reads are done: from here on it waits (30 s, or a wake-up)
    return stream


def _make_compute(client: httpx.Client, srv: RunningServer, name: str) -> float:
    """PUT a compute through CLIENT; the time its answer came (its first event is committed)."""
    made = client.put(f"{srv.ws_path}/computes/{name}", json=COMPUTE)
    assert made.status_code in (200, 201), made.text
    return time.time()


def _arrival_after(stream: Stream, name: str, answered: float) -> float:
    """Seconds from the request's answer to the compute's first event on STREAM."""
    wait_until(lambda: stream.first(name) is not None, 40, f"{name}'s first event on the stream")
    found = stream.first(name)
    assert found is not None
    return found[0] - answered


def test_an_event_reaches_a_watcher_at_once_though_its_poll_is_30_s(
    server_factory: Callable[..., RunningServer],
) -> None:
    srv = server_factory(extra_env=LONG_POLL)
    stream = _watch(srv, _client(srv))
    try:
        with _client(srv) as api:
            delays = [
                _arrival_after(stream, f"wake-{i}", _make_compute(api, srv, f"wake-{i}")) for i in range(3)
            ]
    finally:
        stream.close()
    assert max(delays) < PROMPT_S, delays


def test_a_change_through_one_worker_wakes_a_stream_held_by_the_other(
    server_factory: Callable[..., RunningServer],
) -> None:
    srv = server_factory(extra_env={**LONG_POLL, "CLOUDLET_WORKERS": "2"}, timeout=180)
    by_replica: dict[str, httpx.Client] = {}
    spare: list[httpx.Client] = []
    deadline = time.monotonic() + 60
    while len(by_replica) < 2 and time.monotonic() < deadline:  # a connection on each worker
        client = _client(srv)
        replica = _replica(client)
        if replica in by_replica:
            spare.append(client)
        else:
            by_replica[replica] = client
    assert len(by_replica) == 2, "both workers to answer"
    (held, holder), (_other, writer) = sorted(by_replica.items())
    stream = _watch(srv, holder)
    try:
        assert _replica(writer) != held
        delays = [
            _arrival_after(stream, f"far-{i}", _make_compute(writer, srv, f"far-{i}")) for i in range(3)
        ]
    finally:
        stream.close()
        for client in [writer, *spare]:
            client.close()
    assert max(delays) < PROMPT_S, delays


def test_an_event_no_wake_up_reaches_arrives_by_the_fallback_poll(
    server_factory: Callable[..., RunningServer],
) -> None:
    srv = server_factory(extra_env={"CLOUDLET_EVENTS_POLL_S": "2"})
    stream = _watch(srv, _client(srv))
    # Another process commits an event on the server's store: no publisher of the server hears it.
    engine = db.make_engine(db.sqlite_url(srv.home))
    try:
        with engine.begin() as conn:
            ws_id = conn.execute(select(Workspace.id).where(Workspace.name == "default")).scalar_one()
            row = {"at": time.time(), "workspace_id": ws_id, "type": "job", "name": "from-outside"}
            conn.execute(insert(LifecycleEvent), [{**row, "from_state": "Queued", "to_state": "Running"}])
        committed = time.time()
        delay = _arrival_after(stream, "from-outside", committed)
    finally:
        engine.dispose()
        stream.close()
    assert delay < 2.0 + PROMPT_S, delay
