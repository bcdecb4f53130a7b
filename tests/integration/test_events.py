"""Acceptance (issue 29, events): the events feed over the real HTTP API, with real agents running
real jobs. A watcher that disconnects for 10 s while 100 jobs run and reconnects with its last
seq (``Last-Event-ID``) has received every transition of every job exactly once, in order per
job; a Reader of one workspace never sees another's; ``cloudlet events`` pages the same feed."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.integration.test_locks_and_roles import assign, new_user
from tests.jobs_helpers import TERMINAL, cli_json, create_compute, job, served, submit, wait_until

CLUSTER = "events-cluster"
JOBS = 100


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    # A heartbeat each second: the watcher's reads wake often enough to be stopped promptly.
    yield from served(tmp_path_factory, "events", extra_env={"CLOUDLET_EVENTS_HEARTBEAT_S": "1"})


@pytest.fixture(scope="module")
def api(srv: RunningServer) -> Iterator[httpx.Client]:
    with srv.client() as client:
        create_compute(
            client,
            srv,
            CLUSTER,
            {
                "type": "amlcompute",
                "size": "Standard_DS3_v2",
                "min_instances": 0,
                "max_instances": 4,
                "idle_time_before_scale_down": 120,
            },
        )
        yield client


def _last_seq(api: httpx.Client, path: str) -> int:
    since: int | None = None
    while True:
        body = api.get(path, params={"limit": 1000} | ({} if since is None else {"since": since})).json()
        since = int(body["lastSeq"])
        if "nextLink" not in body:
            return since


class Watcher(threading.Thread):
    """A client of ``…/events?watch=true``: records each event it receives, and the heartbeats."""

    def __init__(self, srv: RunningServer, since: int, params: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.srv, self.since, self.params = srv, since, params
        self.events: list[dict[str, Any]] = []
        self.heartbeats = 0
        self.stop = threading.Event()
        self.failure: BaseException | None = None

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.srv.api_key}", "Last-Event-ID": str(self.since)}
        try:
            with (
                httpx.Client(base_url=self.srv.endpoint, timeout=httpx.Timeout(10, read=30)) as client,
                client.stream(
                    "GET",
                    f"{self.srv.ws_path}/events",
                    params={"watch": "true", **self.params},
                    headers=headers,
                ) as response,
            ):
                assert response.status_code == 200, response.read()
                assert response.headers["content-type"].startswith("text/event-stream")
                seq = None
                for line in response.iter_lines():
                    if self.stop.is_set():
                        return  # leaving the block closes the connection: a client gone away
                    if line.startswith(": "):
                        self.heartbeats += 1
                    elif line.startswith("id: "):
                        seq = int(line[4:])
                    elif line.startswith("data: "):
                        event = json.loads(line[6:])
                        assert event["seq"] == seq, (event, seq)
                        self.events.append(event)
        except BaseException as exc:  # reported by close()
            self.failure = exc

    def close(self) -> None:
        self.stop.set()
        self.join(timeout=20)
        assert not self.is_alive(), "the watcher did not stop"
        assert self.failure is None, self.failure


def test_a_watcher_that_reconnects_gets_every_job_transition_once_in_order(
    api: httpx.Client, srv: RunningServer
) -> None:
    feed = f"{srv.ws_path}/events"
    start = _last_seq(api, feed)
    names = [f"ev-{i:03d}" for i in range(JOBS)]
    first = Watcher(srv, start, {"type": "job"})
    first.start()
    body = {"command": "sleep 1", "compute": f"azureml:{CLUSTER}"}
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda name: submit(api, srv, name, body), names))
    wait_until(lambda: len(first.events) >= 150, 120, "the watcher to receive its first transitions")
    first.close()
    disconnected_at = first.events[-1]["seq"]
    time.sleep(10)  # the scenario: the client is away for 10 s while the jobs run
    at_reconnect = _last_seq(api, feed)
    second = Watcher(srv, disconnected_at, {"type": "job"})
    second.start()
    finals = {
        name: wait_until(
            lambda n=name: (j := job(api, srv, n))["status"] in TERMINAL and j, 300, f"{name} to end"
        )
        for name in names
    }

    def every_job_ended_in_the_feed() -> bool:
        ended = {e["name"] for e in second.events if e["to_state"] in TERMINAL}
        return set(names) <= ended | {e["name"] for e in first.events if e["to_state"] in TERMINAL}

    wait_until(every_job_ended_in_the_feed, 60, "every job's last transition to reach the watcher")
    second.close()

    received = [e for e in first.events + second.events if e["name"] in finals]
    seqs = [e["seq"] for e in received]
    assert seqs == sorted(set(seqs)), "each event once, in seq order across the reconnection"
    # Jobs moved while the watcher was away, and after it came back.
    assert any(disconnected_at < e["seq"] <= at_reconnect for e in received)
    assert any(e["seq"] > at_reconnect for e in received)
    per_job: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for event in received:
        per_job[event["name"]].append(event)
    for name, moves in per_job.items():
        # The job's whole history, as a chain: submitted (None -> Queued), each move from where
        # the previous one left it, ending where the job ended.
        assert moves[0]["from_state"] is None and moves[0]["to_state"] == "Queued", moves
        for before, after in itertools.pairwise(moves):
            assert after["from_state"] == before["to_state"], moves
        assert moves[-1]["to_state"] == finals[name]["status"] == "Completed", moves
        assert "Running" in [m["to_state"] for m in moves] or "Preparing" in [m["to_state"] for m in moves]
        assert all(m["compute"] == CLUSTER for m in moves)
    # The paged feed holds exactly what the watcher received (nothing missed, nothing extra).
    paged: list[dict[str, Any]] = []
    since = start
    while True:
        page = api.get(feed, params={"since": since, "type": "job", "limit": 1000}).json()
        paged += [e for e in page["value"] if e["name"] in finals]
        since = page["lastSeq"]
        if "nextLink" not in page:
            break
    assert [e["seq"] for e in paged] == seqs


def test_readers_see_only_their_workspace(api: httpx.Client, srv: RunningServer) -> None:
    made = api.put(srv.workspace_path("events-b"), json={"location": "local"})
    assert made.status_code in (200, 201), made.text
    other = srv.workspace_path("events-b")
    created = api.put(f"{other}/computes/b-cluster", json={"type": "amlcompute", "size": "Standard_DS3_v2"})
    assert created.status_code in (200, 201), created.text
    wait_until(
        lambda: any(e["name"] == "b-cluster" for e in api.get(f"{other}/events").json()["value"]),
        30,
        "workspace B's compute events",
    )
    assert any(
        e["name"] == "b-cluster" for e in api.get("/api/v1/events", params={"limit": 1000}).json()["value"]
    )
    key = new_user(api, "events-reader")
    assign(api, srv, "events-reader", "Reader")  # of the default workspace only
    with srv.client(key) as reader:
        own = reader.get(f"{srv.ws_path}/events", params={"limit": 1000})
        assert own.status_code == 200, own.text
        assert own.json()["value"], "a Reader reads its workspace's events"
        assert all(e["name"] != "b-cluster" for e in own.json()["value"])
        assert reader.get(f"{other}/events").status_code == 404
        assert reader.get(f"{other}/events", params={"watch": "true"}).status_code == 404
        assert reader.get("/api/v1/events").status_code == 403  # the all-workspaces feed: admins


def test_an_idle_stream_sends_heartbeats(srv: RunningServer) -> None:
    quiet = Watcher(srv, 0, {"type": "deployment"})  # none in this module
    quiet.start()
    wait_until(lambda: quiet.heartbeats >= 2, 20, "heartbeat comments on an idle stream")
    quiet.close()
    assert quiet.events == []


def test_cli_pages_the_feed_and_refuses_a_bad_filter(api: httpx.Client, srv: RunningServer) -> None:
    submit(api, srv, "ev-cli", {"command": "true", "compute": f"azureml:{CLUSTER}"})
    wait_until(lambda: job(api, srv, "ev-cli")["status"] in TERMINAL, 120, "ev-cli to end")
    listed = cli_json(srv, "events", "--type", "job", "--compute", CLUSTER)
    mine = [e for e in listed if e["name"] == "ev-cli"]
    assert mine[0]["from_state"] is None and mine[-1]["to_state"] == "Completed", mine
    assert all(e["type"] == "job" for e in listed)
    since = mine[0]["seq"]
    later = cli_json(srv, "events", "--since", str(since), "--type", "job")
    assert all(e["seq"] > since for e in later) and later[0]["seq"] == mine[1]["seq"]
    bad = api.get(f"{srv.ws_path}/events", params={"type": "nope"})
    assert bad.status_code == 400, bad.text


def test_cli_watch_follows_new_events(api: httpx.Client, srv: RunningServer) -> None:
    start = _last_seq(api, f"{srv.ws_path}/events")
    argv = [sys.executable, "-m", "cloudlet", "events", "--watch", "--type", "job", "--since", str(start)]
    watch = subprocess.Popen(
        argv, env={**srv.cli_env(), "CLOUDLET_OUTPUT": "json"}, stdout=subprocess.PIPE, text=True
    )
    lines: list[dict[str, Any]] = []
    reader = threading.Thread(
        target=lambda: lines.extend(json.loads(line) for line in watch.stdout or ()), daemon=True
    )
    reader.start()
    try:
        submit(api, srv, "ev-watch", {"command": "true", "compute": f"azureml:{CLUSTER}"})
        wait_until(
            lambda: any(e["name"] == "ev-watch" and e["to_state"] in TERMINAL for e in list(lines)),
            120,
            "cloudlet events --watch to print ev-watch's end",
        )
    finally:
        watch.terminate()
        watch.wait(timeout=20)
    moves = [(e["from_state"], e["to_state"]) for e in lines if e["name"] == "ev-watch"]
    assert moves[0] == (None, "Queued") and moves[-1][1] == "Completed", moves
    assert all(e["seq"] > start for e in lines)
