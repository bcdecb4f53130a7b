"""``cloudlet server --workers 2`` (``cloudlet/serving.py``), with the real server, agents and jobs:

- requests are served by both worker processes (``/healthz`` names the replica that answered);
- a job submitted through either worker runs end to end, and the node's long poll, wherever it is
  held, is woken at once: the poll's store recheck is set to 8 s here (not longer: a poll's
  recheck is also the node's heartbeat, lost after 15 s), so a job placed by the worker that does
  not hold the poll would wait 4 s on average without the wake-up;
- a killed worker is started again, and requests meanwhile are answered by the other;
- ``kill -9`` of the supervisor leaves no worker; SIGTERM stops them all;
- with no ``--workers`` the server runs one worker per usable CPU (``auto``, the default).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from cloudlet import serving
from tests.conftest import RunningServer
from tests.jobs_helpers import create_compute, nodes, submit, wait_job, wait_until

WORKERS = {"CLOUDLET_WORKERS": "2", "CLOUDLET_POLL_RECHECK_S": "8"}
WARM = {
    "type": "amlcompute",
    "size": "Standard_DS3_v2",
    "min_instances": 1,
    "max_instances": 1,
    "idle_time_before_scale_down": 600,
}
PROMPT_S = 3.0  # submit → Completed of a `true` job on a busy machine (~0.1 s on a quiet one)
ROUNDS = 4  # each a job through each worker: without the wake-up 4 would wait for the recheck
START_S = 180  # a supervisor and its workers each import the server: 40 s each on a loaded machine


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()
    except OSError:
        return False
    return bool(state) and state[0] != b"Z"


def _workers(supervisor: int) -> list[int]:
    try:
        children = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
    except OSError:
        return []
    pids = []
    for pid in map(int, children):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"cloudlet.serving" in argv and _alive(pid):
            pids.append(pid)
    return sorted(pids)


def _listeners(port: int) -> list[str]:
    """Each listening socket on PORT, as ``ss`` lists it (with the processes that hold it)."""
    out = subprocess.run(
        ["ss", "-ltnpH", f"( sport = :{port} )"], capture_output=True, text=True, check=True
    ).stdout
    return [line for line in out.splitlines() if line.strip()]


def _replica(client: httpx.Client) -> str:
    response = client.get("/healthz")
    assert response.status_code == 200, response.text
    return str(response.json()["replica"])


def _fresh_replicas(srv: RunningServer, count: int) -> list[str]:
    """The replica that answered each of COUNT requests, each on a new connection."""
    return [str(httpx.get(srv.endpoint + "/healthz", timeout=10).json()["replica"]) for _ in range(count)]


def _one_client_per_replica(srv: RunningServer) -> dict[str, httpx.Client]:
    clients: dict[str, httpx.Client] = {}
    for _ in range(200):
        client = srv.client()
        replica = _replica(client)
        if replica in clients:
            client.close()
        else:
            clients[replica] = client
        if len(clients) == 2:
            break
    return clients


def test_two_workers_serve_run_jobs_wake_each_other_and_restart(
    server_factory: Callable[..., RunningServer],
) -> None:
    srv = server_factory(extra_env=WORKERS, timeout=START_S)
    workers = wait_until(lambda: len(w := _workers(srv.process.pid)) == 2 and w, 30, "two workers")
    # One listening socket per port, the supervisor's, that both workers accept from: one queue
    # of new connections, taken by whichever worker is free (not hashed to one per worker).
    listening = _listeners(int(srv.endpoint.rsplit(":", 1)[1]))
    assert len(listening) == 1, listening
    assert all(f"pid={pid}," in listening[0] for pid in (srv.process.pid, *workers)), listening
    clients = _one_client_per_replica(srv)
    assert len(clients) == 2, f"every connection went to one worker: {list(clients)}"
    try:
        api = next(iter(clients.values()))
        create_compute(api, srv, "warm", WARM)
        wait_until(lambda: [n for n in nodes(api, srv, "warm") if n["state"] == "idle"], 60, "a warm node")

        # Each job through each worker in turn: one of them holds the node's poll, the other
        # places work for it and must wake it.
        for round_no in range(ROUNDS):
            for replica, client in sorted(clients.items()):
                name = f"j{round_no}-{replica.rsplit('-', 1)[1]}"
                began = time.monotonic()
                submit(client, srv, name, {"command": "true", "compute": "azureml:warm"})
                done = wait_job(client, srv, name, timeout=60)
                took = time.monotonic() - began
                assert done["status"] == "Completed", done
                assert took < PROMPT_S, f"{name} submitted through {replica} took {took:.1f} s to complete"

        # A pipeline through each worker: its steps hand off whichever worker records an exit
        # (the parent-job loop's wake is shared, like the reconcilers').
        for replica, client in sorted(clients.items()):
            name = f"pipe-{replica.rsplit('-', 1)[1]}"
            step = {"type": "command", "compute": "azureml:warm"}
            pipeline = {
                "type": "pipeline",
                "jobs": {
                    "a": {
                        **step,
                        "command": "echo hi > ${{outputs.o}}/x",
                        "outputs": {"o": {"type": "uri_folder"}},
                    },
                    "b": {
                        **step,
                        "command": "cat ${{inputs.i}}/x",
                        "inputs": {"i": "${{parent.jobs.a.outputs.o}}"},
                    },
                },
            }
            submit(client, srv, name, pipeline)
            done = wait_job(client, srv, name, timeout=60)
            assert done["status"] == "Completed", done

        # Kill one worker while a kept-alive client keeps asking: at most the request in flight on
        # the killed worker's connection fails; the client's next connection reaches the other.
        errors: list[str] = []
        answered = [0]
        stop = threading.Event()

        def keep_asking() -> None:
            with srv.client() as client:
                while not stop.is_set():
                    try:
                        client.get("/healthz").raise_for_status()
                        answered[0] += 1
                    except httpx.HTTPError as exc:
                        errors.append(repr(exc))

        asker = threading.Thread(target=keep_asking, daemon=True)
        asker.start()
        victim = workers[0]
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: not _alive(victim), 10, f"worker {victim} to die")
        assert set(_fresh_replicas(srv, 10)) <= set(clients)  # the survivor answers every new connection
        for client in clients.values():  # including the one whose worker died (a new connection)
            assert _replica(client) in clients
        restarted = wait_until(
            lambda: len(w := _workers(srv.process.pid)) == 2 and victim not in w and w,
            60,
            "a restarted worker",
        )
        wait_until(lambda: set(_fresh_replicas(srv, 20)) == set(clients), 60, "both replicas answering again")
        stop.set()
        asker.join(timeout=30)
        assert answered[0] > 0
        assert len(errors) <= 1, errors
    finally:
        for client in clients.values():
            client.close()

    # kill -9 of the supervisor: no worker outlives it.
    srv.kill()
    wait_until(lambda: not any(_alive(pid) for pid in restarted), 10, f"workers {restarted} to exit")


def test_sigterm_stops_every_worker(server_factory: Callable[..., RunningServer]) -> None:
    srv = server_factory(extra_env=WORKERS, timeout=START_S)
    workers = wait_until(lambda: len(w := _workers(srv.process.pid)) == 2 and w, 30, "two workers")
    srv.process.send_signal(signal.SIGTERM)
    assert srv.process.wait(timeout=40) == 0
    assert not any(_alive(pid) for pid in workers), workers


def test_the_default_is_a_worker_per_usable_cpu(server_factory: Callable[..., RunningServer]) -> None:
    """``cloudlet server`` with no ``--workers`` and no ``CLOUDLET_WORKERS`` serves with ``auto``:
    one worker per CPU this process may run on (at most 8), under a supervisor."""
    expected = min(len(os.sched_getaffinity(0)), serving.MAX_AUTO_WORKERS)
    srv = server_factory(workers=None, timeout=START_S)
    if expected == 1:  # a host with one usable CPU: one server process, no supervisor
        assert not _workers(srv.process.pid)
        assert " workers on " not in srv.log_path.read_text()
        return
    workers = wait_until(
        lambda: len(w := _workers(srv.process.pid)) == expected and w, 60, f"{expected} workers"
    )
    assert f": {expected} workers on " in srv.log_path.read_text()
    # every worker serves: a new connection each time, until each replica has answered
    wanted = {f"-{slot}" for slot in range(expected)}
    answered: set[str] = set()

    def every_worker_answered() -> bool:
        answered.update(replica[replica.rindex("-") :] for replica in _fresh_replicas(srv, 4))
        return answered == wanted

    wait_until(every_worker_answered, 60, f"each of {sorted(wanted)} answering")
    assert all(_alive(pid) for pid in workers)
