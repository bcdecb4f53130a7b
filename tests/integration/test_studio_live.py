"""The studio's live streams over HTTP (issue 27 item 5): metric points as they are logged (and a
resume from ``Last-Event-ID`` that repeats and loses none), a pipeline's steps as they change, a
compute list's and a compute's state as it changes; a Reader's stream works, a revoked key ends
it, another workspace's stream is a 404, and a session holds a bounded number of streams."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest

from cloudlet.studio.live import MAX_STREAMS, RECHECK_S
from tests.conftest import RunningServer
from tests.instance_helpers import act, create_instance
from tests.integration.test_studio_sessions import PRINCIPALS, new_user
from tests.jobs_helpers import served, submit, wait_job, wait_until
from tests.studio_http import events, sign_in, studio_client


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    # Instances without JupyterLab: these tests need the machine's states, not the app.
    # Samples every second: the Monitoring stream's test waits for one.
    env = {"CLOUDLET_INSTANCE_APPS": "", "CLOUDLET_MONITOR_INTERVAL_S": "1"}
    yield from served(tmp_path_factory, "studio-live", extra_env=env)


def studio(srv: RunningServer, *parts: str, rg: str = "default", ws: str = "default") -> str:
    return f"/studio/ws/{srv.subscription_id}/{rg}/{ws}/" + "/".join(parts)


def tracking(srv: RunningServer) -> str:
    return (
        f"/mlflow/v1.0/subscriptions/{srv.subscription_id}/resourceGroups/default/providers/"
        "Microsoft.MachineLearningServices/workspaces/default/api/2.0/mlflow"
    )


def log(api: httpx.Client, srv: RunningServer, run: str, key: str, steps: range) -> None:
    now = int(time.time() * 1000)
    batch = [{"key": key, "value": s / 10, "timestamp": now + s, "step": s} for s in steps]
    answer = api.post(f"{tracking(srv)}/runs/log-batch", json={"run_id": run, "metrics": batch})
    assert answer.status_code == 200, answer.text


def points_of(data: str) -> dict[str, list[float]]:
    """A ``points`` event's steps per key (the page's job's run)."""
    body: dict[str, Any] = json.loads(data)
    return {key: runs[next(iter(runs))][0] for key, runs in body["metrics"].items()}


def test_metric_points_arrive_as_logged_and_resume_from_last_event_id(srv: RunningServer) -> None:
    with srv.client() as api, studio_client(srv) as client:
        submit(api, srv, "metered", {"command": "sleep 120", "compute": "local"})
        log(api, srv, "metered", "loss", range(3))
        sign_in(client, srv.api_key)
        url = studio(srv, "jobs", "metered", "metrics", "live")
        with client.stream("GET", url) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            stream = events(response)
            kind, first_id, data = next(stream)
            assert kind == "points" and points_of(data) == {"loss": [0.0, 1.0, 2.0]}, data
            sent = time.monotonic()
            log(api, srv, "metered", "loss", range(3, 5))
            log(api, srv, "metered", "acc", range(2))  # a new key: its points come as they are logged
            seen: dict[str, list[float]] = {}
            while seen != {"loss": [3.0, 4.0], "acc": [0.0, 1.0]}:
                kind, last_id, data = next(stream)
                assert kind == "points", (kind, data)
                for key, steps in points_of(data).items():
                    seen.setdefault(key, []).extend(steps)
            print(f"\nlogged → event: {time.monotonic() - sent:.2f} s")
            assert time.monotonic() - sent < 2.0
        assert first_id is not None and last_id is not None and int(last_id) > int(first_id)
        # Resumed after the first event: the points after it, each once, none before it.
        resumed: dict[str, list[float]] = {}
        with client.stream("GET", url, headers={"Last-Event-ID": first_id}) as response:
            for kind, _, data in events(response):
                assert kind == "points", (kind, data)
                for key, steps in points_of(data).items():
                    resumed.setdefault(key, []).extend(steps)
                if sum(map(len, resumed.values())) >= 4:
                    break
        assert resumed == {"loss": [3.0, 4.0], "acc": [0.0, 1.0]}, resumed
        assert api.post(f"{srv.ws_path}/jobs/metered/cancel").status_code == 202
        wait_job(api, srv, "metered", timeout=60)
        with client.stream("GET", url, headers={"Last-Event-ID": last_id}) as response:
            kinds = [kind for kind, _, _ in events(response)]  # a final job: nothing new, then the end
        assert kinds == ["end"], kinds


def sampled(data: str) -> int:
    """How many samples a ``monitoring`` event's buckets hold, over every node."""
    body: dict[str, Any] = json.loads(data)
    return sum(sum(node["series"]["n"]) for node in body["nodes"])


def test_resource_samples_arrive_as_stored_and_the_stream_ends_with_the_job(srv: RunningServer) -> None:
    with srv.client() as api, studio_client(srv) as client:
        submit(api, srv, "sampled", {"command": "sleep 120", "compute": "local"})
        sign_in(client, srv.api_key)
        url = studio(srv, "jobs", "sampled", "monitoring", "live")
        with client.stream("GET", url) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            stream = events(response)
            kind, _, data = next(stream)  # what is stored now, maybe nothing yet
            assert kind == "monitoring", (kind, data)
            first = json.loads(data)
            assert first["job"] == "sampled" and first["final"] is False, first
            counts, shown = [sampled(data)], [data]
            # Samples come with the agent's polls: events until two polls' samples were sent, each
            # event different from the one before (sent when something changed, only then).
            while len(set(counts)) < 3:
                kind, _, data = next(stream)
                assert kind == "monitoring", (kind, data)
                assert data != shown[-1]
                counts.append(sampled(data))
                shown.append(data)
            assert counts == sorted(counts), counts
            (node,) = json.loads(data)["nodes"]
            assert node["gpu"] is False and "memory_bytes" in node["series"], node
            assert api.post(f"{srv.ws_path}/jobs/sampled/cancel").status_code == 202
            kinds = []
            for kind, _, data in stream:  # the samples up to its end, then the end
                kinds.append(kind)
                if kind == "monitoring":
                    last = json.loads(data)
            assert kinds[-1] == "end" and set(kinds[:-1]) == {"monitoring"}, kinds
            assert last["final"] is True, last
        # A final job's stream: what was stored, then the end.
        with client.stream("GET", url) as response:
            kinds = [kind for kind, _, _ in events(response)]
        assert kinds == ["monitoring", "end"], kinds


def test_a_pipelines_steps_arrive_as_they_change_and_the_stream_ends(srv: RunningServer) -> None:
    step = {"compute": "local", "outputs": {"out": None}}
    pipeline = {
        "type": "pipeline",
        "jobs": {
            "first": {**step, "command": "sleep 3; echo a > ${{outputs.out}}/a"},
            "second": {
                **step,
                "command": "cat ${{inputs.x}}/a",
                "inputs": {"x": "${{parent.jobs.first.outputs.out}}"},
            },
        },
    }
    with srv.client() as api, studio_client(srv) as client:
        submit(api, srv, "piped", pipeline)
        sign_in(client, srv.api_key)
        shown: list[str] = []
        with client.stream("GET", studio(srv, "jobs", "piped", "children", "live")) as response:
            assert response.status_code == 200
            for kind, _, data in events(response):
                if kind == "end":
                    break
                assert kind == "children", (kind, data)
                shown.append(data)
        assert 'id="steps"' in shown[0] and "<html" not in shown[0], shown[0]
        assert len(shown) >= 2 and len(set(shown)) == len(shown)  # sent when it changed, only then
        last = shown[-1]
        assert last.count("Completed") >= 2, last  # both steps, as they ended
        assert wait_job(api, srv, "piped", timeout=60)["status"] == "Completed"


def test_a_compute_state_change_reaches_the_list_and_the_computes_page(srv: RunningServer) -> None:
    with srv.client() as api, studio_client(srv) as client:
        create_instance(api, srv, "watched-ci")
        sign_in(client, srv.api_key)
        lists = client.stream("GET", studio(srv, "compute", "_live"), params={"tab": "instances"})
        page = client.stream("GET", studio(srv, "compute", "watched-ci", "live"))
        with lists as rows, page as status:
            assert rows.status_code == 200 and status.status_code == 200
            row_events, status_events = events(rows), events(status)
            kind, _, data = next(row_events)
            assert kind == "rows" and "watched-ci" in data and "Running" in data, data
            kind, _, data = next(status_events)
            assert kind == "status" and "Running" in data and "<html" not in data, data
            stopping = threading.Thread(target=act, args=(api, srv, "watched-ci", "stop"))
            stopping.start()
            try:
                kind, _, data = next(e for e in row_events if "Stopp" in e[2])
                assert kind == "rows"
                kind, _, data = next(e for e in status_events if "Stopp" in e[2])
                assert kind == "status"
            finally:
                stopping.join()


def test_a_readers_stream_works_until_the_key_is_revoked(srv: RunningServer) -> None:
    with srv.client() as api, studio_client(srv) as reader:
        submit(api, srv, "read-only", {"command": "sleep 120", "compute": "local"})
        log(api, srv, "read-only", "m", range(2))
        sign_in(reader, new_user(api, srv, "live-reader"))
        with reader.stream("GET", studio(srv, "jobs", "read-only", "metrics", "live")) as response:
            assert response.status_code == 200
            stream = events(response)
            assert next(stream)[0] == "points"
            key_id = api.get(f"{PRINCIPALS}/live-reader/keys").json()["value"][0]["id"]
            assert api.delete(f"{PRINCIPALS}/live-reader/keys/{key_id}").status_code == 204
            started = time.monotonic()
            kind, _, data = next(stream)
            assert (kind, json.loads(data)) == ("end", {"reason": "no longer allowed"})
            assert time.monotonic() - started < RECHECK_S + 5
        assert api.post(f"{srv.ws_path}/jobs/read-only/cancel").status_code == 202


def test_another_workspaces_streams_are_404(srv: RunningServer) -> None:
    with srv.client() as api, studio_client(srv) as outsider:
        submit(api, srv, "not-theirs", {"command": "true", "compute": "local"})
        other = f"/api/v1/subscriptions/{srv.subscription_id}/resourceGroups/team/workspaces/other"
        assert api.put(other, json={}).status_code in (200, 201)
        key = new_user(api, srv, "live-outsider", role=None)
        assigned = api.put(f"{other}/roleAssignments/live-outsider", json={"role": "Reader"})
        assert assigned.status_code == 200, assigned.text
        sign_in(outsider, key)
        for parts in (
            ("jobs", "not-theirs", "metrics", "live"),
            ("jobs", "not-theirs", "children", "live"),
            ("jobs", "not-theirs", "monitoring", "live"),
            ("compute", "_live"),
            ("compute", "any-compute", "live"),
        ):
            assert outsider.get(studio(srv, *parts)).status_code == 404, parts
        assert (
            outsider.get(studio(srv, "jobs", "no-such", "metrics", "live", rg="team", ws="other")).status_code
            == 404
        )


def test_a_session_holds_a_bounded_number_of_streams(srv: RunningServer) -> None:
    with srv.client() as api, studio_client(srv) as client:
        submit(api, srv, "many-eyes", {"command": "sleep 120", "compute": "local"})
        sign_in(client, srv.api_key)
        url = studio(srv, "jobs", "many-eyes", "live")
        with ExitStack() as held:
            reading = []  # kept: a dropped line iterator would close its response
            for _ in range(MAX_STREAMS):
                response = held.enter_context(client.stream("GET", url))
                assert response.status_code == 200
                reading.append(response.iter_lines())
                next(reading[-1])  # the stream has begun: it counts
            assert client.get(url, timeout=5).status_code == 429

        def opens() -> bool:  # closed, they no longer count
            with client.stream("GET", url) as response:
                return response.status_code == 200

        wait_until(opens, 10, "a stream opened again")
        assert api.post(f"{srv.ws_path}/jobs/many-eyes/cancel").status_code == 202
