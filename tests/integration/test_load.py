"""Acceptance (issue 10, defect 3): the server under a modest mixed load, and when the store is
exhausted.

* 100 readers (compute show, job list, job show) and 10 submitters for 20 s against a real server
  with a real cluster: every request is answered as it should be (none fails, none times out),
  ``/healthz`` keeps answering, and the control plane keeps working meanwhile: the jobs submitted
  during the load complete (most of them during it), and a cluster created during the load has its
  operation carried out and its node made before the load ends.
* An API pool of one connection and many concurrent requests: those that cannot get a connection
  in time are answered 503 with ``Retry-After`` (never a hang), while the reconcilers, which have
  a pool of their own, carry out an operation all along.
* A writer that cannot get the store's write lock in time (held by another process, SQLite; or a
  table lock, PostgreSQL) is answered 503 too, while readers are not held up.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import psycopg
import pytest

from tests.conftest import RunningServer
from tests.jobs_helpers import create_compute, job, nodes, submit, wait_until
from tests.load_helpers import Background, Load

LOAD_S = 20.0
SIZE = "Standard_DS3_v2"


def cluster(min_n: int, max_n: int, idle: int = 120) -> dict[str, Any]:
    return {
        "type": "amlcompute",
        "size": SIZE,
        "min_instances": min_n,
        "max_instances": max_n,
        "idle_time_before_scale_down": idle,
    }


def _jobs(api: httpx.Client, srv: RunningServer, query: str) -> list[dict[str, Any]]:
    """Every job the list matches, page after page (``nextLink``), at most 50 pages."""
    url: str | None = f"{srv.ws_path}/jobs?{query}"
    value: list[dict[str, Any]] = []
    for _ in range(50):
        if url is None:
            break
        response = api.get(url)
        assert response.status_code == 200, response.text
        value += response.json()["value"]
        url = response.json().get("nextLink")
    return value


@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_mixed_load_answers_every_request_and_the_control_plane_keeps_working(
    server_factory: Callable[..., RunningServer], request: pytest.FixtureRequest, store: str
) -> None:
    db_url = request.getfixturevalue("postgres_url") if store == "postgres" else None
    srv = server_factory(db_url=db_url)
    ws = srv.ws_path
    with srv.client() as api:
        create_compute(api, srv, "busy", cluster(2, 2))
        create_compute(api, srv, "seed", cluster(0, 1, idle=1))
        wait_until(
            lambda: sum(n["state"] == "idle" for n in nodes(api, srv, "busy")) == 2, 60, "2 idle nodes"
        )
        # Job list reads a page of fixed size (the seed cluster's 20 jobs) however many the load adds.
        for i in range(20):
            submit(api, srv, f"seed-{i}", {"command": "true", "compute": "azureml:seed"})
        wait_until(
            lambda: sum(j["status"] == "Completed" for j in _jobs(api, srv, "compute=seed")) == 20,
            60,
            "the seed jobs to complete",
        )
        load = Load(
            reads=(
                ("compute show", f"{ws}/computes/busy"),
                ("job list", f"{ws}/jobs?compute=seed"),
                ("job show", f"{ws}/jobs/seed-0"),
            ),
            submit_path=f"{ws}/jobs/",
            job_body=lambda _name: {"command": "true", "compute": "azureml:busy"},
            prefix="load",
        )
        with Background(srv, load, LOAD_S) as background:
            # Midway, a new cluster with a node: the operation reconciler and the cluster
            # reconciler must carry it out while the API is under load.
            time.sleep(LOAD_S / 4)
            create_compute(api, srv, "late", cluster(1, 1))
            wait_until(
                lambda: [n["state"] for n in nodes(api, srv, "late")] == ["idle"],
                LOAD_S / 2,
                "the late cluster's node to be made during the load",
            )
            late_ready = time.time()
            done_midway: set[str] = set()

            def some_done() -> bool:
                done_midway.update(j["name"] for j in _jobs(api, srv, "compute=busy&status=Completed"))
                return bool(done_midway)

            wait_until(some_done, LOAD_S / 4, "a job of the load to complete during it")
        report = background.join()
        done_during = {j["name"] for j in _jobs(api, srv, "compute=busy&status=Completed")}

        worst = {route: round(s, 3) for route, s in report.worst_s.items()}
        print(
            f"\nanswered {dict(report.answered)}; slowest (s) {worst}; "
            f"healthz worst {report.health_worst_s:.3f} s; mean submit {report.mean_s('submit'):.3f} s"
        )
        assert not report.failures, f"{len(report.failures)} failed, first: {report.failures[:5]}"
        assert report.answered["compute show"] > 200 and report.answered["job list"] > 200, report.answered
        assert report.answered["healthz"] >= LOAD_S * 5, "the health probe was held up"
        assert report.health_worst_s < 2.0, f"/healthz took {report.health_worst_s:.2f} s under the load"
        assert late_ready < report.ended, "the late cluster's node should have come up during the load"
        accepted = set(report.accepted)
        # Writers are not starved by the readers: a submission takes no more than twice as long as
        # a read, on average. The bar is a ratio of latencies, not a rate, so a slower machine (CI's
        # two cores are shared with the other test worker) lowers both sides alike; the rates are
        # bench/mixed_load's to measure. (A count of answers is no bar: the submitters are paced.)
        read_mean_s = report.mean_s(*(route for route, _ in load.reads))
        submit_mean_s = report.mean_s("submit")
        assert len(accepted) >= 5 * load.submitters, f"only {len(accepted)} submissions in {LOAD_S:g} s"
        assert submit_mean_s <= 2 * read_mean_s + 0.05, (
            f"writers starved: a submission took {submit_mean_s * 1000:.0f} ms on average, "
            f"a read {read_mean_s * 1000:.0f} ms"
        )
        # Placement kept going through the load: jobs completed between its middle and its end.
        # (How many it places per second under load is bench/mixed_load's to measure: on two
        # shared cores with PostgreSQL it ranges from under to over half of the submissions.)
        assert done_midway and done_during - done_midway, (
            f"placement stalled: {len(done_midway)} jobs done midway, {len(done_during)} by the end "
            f"of {len(accepted)} accepted"
        )
        for name in sorted(accepted):
            wait_until(lambda n=name: job(api, srv, n)["status"] == "Completed", 60, f"{name} to complete")


# -- an exhausted store ------------------------------------------------------------------------
def _busy_answer(response: httpx.Response) -> None:
    """A 503 as the API renders it: retry after 1 s, in the usual error shape."""
    assert response.headers.get("retry-after") == "1", response.headers
    error = response.json()["error"]
    assert error["code"] == "ServerBusy" and error["target"] is None and error["details"] == [], error


@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_exhausted_api_pool_answers_503_not_a_hang_and_the_reconcilers_go_on(
    server_factory: Callable[..., RunningServer], request: pytest.FixtureRequest, store: str
) -> None:
    db_url = request.getfixturevalue("postgres_url") if store == "postgres" else None
    env = {
        "CLOUDLET_DB_POOL_SIZE": "1",
        "CLOUDLET_DB_WARM_READS": "0",  # every read from the API's pool too (none kept warm)
        "CLOUDLET_DB_POOL_TIMEOUT_S": "0.02",
        "CLOUDLET_API_THREADS": "32",
        "CLOUDLET_FAULT_STEP_DELAY_S": "0.5",  # the create operation's 2 steps take ≥ 1 s
    }
    srv = server_factory(db_url=db_url, extra_env=env)
    with srv.client() as api:
        response = api.put(f"{srv.ws_path}/computes/during", json=cluster(0, 1))
        assert response.status_code == 201, response.text
        operation_url = response.headers["Operation-Location"]

    async def storm() -> tuple[list[tuple[int, float]], list[str], float | None, float]:
        answers: list[tuple[int, float]] = []
        busy: list[httpx.Response] = []
        seen: list[str] = []
        succeeded_at: float | None = None
        headers = {"Authorization": f"Bearer {srv.api_key}"}
        limits = httpx.Limits(max_connections=200)
        async with httpx.AsyncClient(base_url=srv.endpoint, headers=headers, limits=limits, timeout=20) as c:

            async def one(path: str) -> None:
                started = time.monotonic()
                response = await c.get(path)
                answers.append((response.status_code, time.monotonic() - started))
                if response.status_code == 503:
                    busy.append(response)

            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and (succeeded_at is None or not busy):
                await asyncio.gather(*(one(f"{srv.ws_path}/computes") for _ in range(96)))
                health = await c.get("/healthz", timeout=2)
                assert health.status_code == 200
                status = await c.get(operation_url)  # may itself be answered 503: look again later
                if status.status_code == 200:
                    seen.append(status.json()["status"])
                    if status.json()["status"] == "Succeeded" and succeeded_at is None:
                        succeeded_at = time.monotonic()
            storm_end = time.monotonic()
            for response in busy:
                _busy_answer(response)
        return answers, seen, succeeded_at, storm_end

    answers, seen, succeeded_at, storm_end = asyncio.run(storm())
    codes = sorted({code for code, _ in answers})
    assert codes == [200, 503], f"expected some requests to find the pool empty: {codes}"
    slowest = max(took for _, took in answers)
    assert slowest < 5, f"a request took {slowest:.1f} s: it waited instead of being told to retry"
    assert succeeded_at is not None and succeeded_at <= storm_end, f"the operation did not finish: {seen}"
    with srv.client() as api:  # and once the storm is over, the API answers as usual
        assert api.get(f"{srv.ws_path}/computes/during").status_code == 200


@contextlib.contextmanager
def _write_lock_held(srv: RunningServer, db_url: str | None) -> Iterator[None]:
    """Hold the store's write lock from outside the server: another process on the SQLite file,
    or a lock on the operations table (readers pass, writers of operations wait)."""
    if db_url is None:
        conn = sqlite3.connect(srv.home / "cloudlet.db", timeout=10, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
    else:
        with psycopg.connect(db_url) as pg, pg.transaction():
            pg.execute("LOCK TABLE operations IN EXCLUSIVE MODE")
            yield


@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_writer_that_cannot_get_the_write_lock_in_time_is_answered_503(
    server_factory: Callable[..., RunningServer], request: pytest.FixtureRequest, store: str
) -> None:
    db_url = request.getfixturevalue("postgres_url") if store == "postgres" else None
    srv = server_factory(db_url=db_url, extra_env={"CLOUDLET_DB_WRITE_TIMEOUT_S": "0.5"})
    with srv.client() as api:
        create_compute(api, srv, "held", cluster(0, 1))
        with _write_lock_held(srv, db_url):
            started = time.monotonic()
            response = api.put(f"{srv.ws_path}/computes/waits", json=cluster(0, 1))
            took = time.monotonic() - started
            assert response.status_code == 503, response.text
            _busy_answer(response)
            assert took < 3, f"the writer waited {took:.1f} s"
            if db_url is None:  # SQLite: the file's lock holds job submissions (the batcher) too
                started = time.monotonic()
                response = api.put(
                    f"{srv.ws_path}/jobs/waits", json={"command": "true", "compute": "azureml:held"}
                )
                assert response.status_code == 503, response.text
                _busy_answer(response)
                assert time.monotonic() - started < 3
            assert api.get(f"{srv.ws_path}/computes/held").status_code == 200  # readers pass
        # The lock is gone: the same writes go through.
        assert api.put(f"{srv.ws_path}/computes/waits", json=cluster(0, 1)).status_code == 201
        submit(api, srv, "after", {"command": "true", "compute": "azureml:held"})
