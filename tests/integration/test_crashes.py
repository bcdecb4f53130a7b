"""Acceptance: crashes of the control plane and of node agents, with real processes and kill -9.

* The server is killed (SIGKILL) while jobs run and queue on a cluster, and restarted on the same
  home and port (agents dial the URL they were started with). Every job completes exactly once,
  the agents reconnect and keep serving, and after scale-down no process of the installation is
  left.
* A node agent is killed (SIGKILL) while its job runs: the node is declared lost, its leftover
  job processes are killed, and the job is requeued and completes on another node.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import RunningServer, server_argv, server_env
from tests.jobs_helpers import (
    Recorder,
    agent_nodes,
    agent_pids,
    compute,
    create_compute,
    installation_id,
    job,
    log_text,
    nodes,
    processes_with_env,
    reap_installation,
    served,
    submit,
    wait_job,
    wait_until,
)


def cluster(idle: int) -> dict[str, object]:
    return {
        "type": "amlcompute",
        "size": "Standard_DS3_v2",
        "min_instances": 0,
        "max_instances": 2,
        "idle_time_before_scale_down": idle,
    }


def restart_on_same_port(old: RunningServer, timeout: float = 60) -> RunningServer:
    """Start a server on ``old``'s home and port (``old`` must be dead): the agents it launched
    know only that URL. ``conftest.start_server`` binds a fresh port, so it cannot do this."""
    assert old.process.poll() is not None, "kill the old server first"
    port = urlsplit(old.endpoint).port
    assert port is not None
    log_path = old.home / f"server-restart-{time.time_ns()}.log"
    env = server_env(old.home, old.env)
    cmd = server_argv(old.home, port)
    with open(log_path, "wb") as log:
        process = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"restarted server exited:\n{log_path.read_text()}")
        try:
            if httpx.get(old.endpoint + "/healthz", timeout=1).status_code == 200:
                return RunningServer(
                    old.home, process, old.endpoint, old.api_key, old.subscription_id, log_path, old.env
                )
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"restarted server did not become ready:\n{log_path.read_text()}")


SCRIPT = 'echo "run $CLOUDLET_JOB attempt $CLOUDLET_ATTEMPT"; sleep 4; echo "end $CLOUDLET_JOB"'


@pytest.mark.parametrize("phase", ["jobs-running", "nodes-starting"])
def test_server_killed_mid_flight_every_job_completes_once_and_nothing_leaks(
    server_factory: Callable[..., RunningServer], phase: str
) -> None:
    """``jobs-running``: 2 jobs run and 2 queue on the cluster's 2 nodes when the server dies.
    ``nodes-starting``: the cluster is scaling 0 → 2 (node records made, agents booting)."""
    # Local nodes register within ~0.1 s: a simulated boot time keeps them preparing long
    # enough for the crash to land while they start.
    boot = {"CLOUDLET_BOOT_DELAY_S": "2"} if phase == "nodes-starting" else {}
    first = server_factory(extra_env=boot)
    installation = installation_id(first)
    servers = [first]
    try:
        with first.client() as api:
            create_compute(api, first, "crash", cluster(idle=3))
            names = [f"crash-{i}" for i in range(4)]
            for name in names:
                submit(api, first, name, {"command": SCRIPT, "compute": "azureml:crash"})
            if phase == "jobs-running":
                wait_until(
                    lambda: (
                        sorted(job(api, first, n)["status"] for n in names)
                        == ["Queued", "Queued", "Running", "Running"]
                    ),
                    40,
                    "two jobs running and two queued",
                )
            else:
                wait_until(
                    lambda: (
                        (listed := nodes(api, first, "crash"))
                        and all(n["nodeState"] == "preparing" for n in listed)
                    ),
                    20,
                    "the cluster to be making nodes",
                )
            serving = {n["nodeId"] for n in nodes(api, first, "crash")}
            pids = {node: agent_pids(installation, node) for node in serving}
            if phase == "jobs-running":
                assert len(serving) == 2 and all(len(p) == 1 for p in pids.values()), pids

        first.kill()  # SIGKILL: no shutdown of any kind
        if phase == "jobs-running":
            assert agent_nodes(installation) == serving, "agents must outlive the control plane"
        second = restart_on_same_port(first)
        servers.append(second)
        assert installation_id(second) == installation

        with second.client() as api:
            done = [wait_job(api, second, n, timeout=90) for n in names]
            for name, result in zip(names, done, strict=True):
                assert result["status"] == "Completed", result
                assert result["attempt"] == 1 and len(result["attempts"]) == 1, (name, result["attempts"])
                assert log_text(api, second, name) == f"run {name} attempt 1\nend {name}\n", name
            # The same agents (same node ids, same processes) served the jobs queued at the crash.
            used = {node for result in done for node in result["attempts"][0]["nodes"]}
            if phase == "jobs-running":
                assert used == serving, (used, serving)
            else:  # nodes whose agent had started before the crash were adopted, not replaced
                started = {node for node, p in pids.items() if p}
                assert started <= used, (started, used)
            for node, before in pids.items():
                # An agent seen before the crash is the one that serves (or has ended); a node whose
                # launch was still in flight then may have its first agent now, but never two.
                now = agent_pids(installation, node)
                assert len(now) <= 1, f"node {node} has more than one agent: {now}"
                assert not before or now in ([], before), f"node {node} got a second agent: {before} → {now}"
            # Scale-down after the idle time ends every agent and job process of this installation.
            try:
                wait_until(
                    lambda: (
                        compute(api, second, "crash")["current_node_count"] == 0
                        and not nodes(api, second, "crash")
                    ),
                    30,
                    "the cluster to scale to 0",
                )
            except AssertionError as exc:  # say what is still there
                shown = compute(api, second, "crash")
                raise AssertionError(
                    f"{exc}\nnodes: {nodes(api, second, 'crash')}\nscale: {shown.get('scale_message')} "
                    f"current {shown.get('current_node_count')}\nagents: {agent_nodes(installation)}"
                ) from None
        wait_until(
            lambda: not processes_with_env("CLOUDLET_INSTALLATION", installation),
            10,
            "every process of the installation to exit",
        )
    finally:
        for server in servers:
            server.kill()
        reap_installation(installation)


# -- an agent dies -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "agent-crash")


def test_killed_agent_node_is_lost_and_its_job_completes_elsewhere(srv: RunningServer) -> None:
    installation = installation_id(srv)
    name = "orphaned"
    with srv.client() as api:
        create_compute(api, srv, "lossy", cluster(idle=3))
        with Recorder(srv, "lossy", [name]) as rec:
            submit(
                api,
                srv,
                name,
                {
                    "command": 'echo "attempt $CLOUDLET_ATTEMPT"; sleep 3; echo done',
                    "compute": "azureml:lossy",
                },
            )
            wait_until(lambda: "attempt 1\n" in log_text(api, srv, name), 40, "attempt 1 to start")
            [node_id] = job(api, srv, name)["attempts"][0]["nodes"]
            [agent] = agent_pids(installation, node_id)
            leftovers = [p for p in processes_with_env("CLOUDLET_NODE_ID", node_id) if p != agent]
            assert leftovers, "the job's processes should be running on the node"
            killed_at = time.monotonic()
            os.kill(agent, signal.SIGKILL)

            requeued = wait_until(
                lambda: (
                    (j := job(api, srv, name))["attempts"] and "lost" in j["attempts"][0]["reasons"] and j
                ),
                20,
                "the job's first attempt to end as lost",
            )
            noticed = time.monotonic() - killed_at
            # The provider sweep (every 2 s) sees the dead process long before LOST_AFTER_S (15 s).
            assert noticed < 10, f"the dead agent was noticed only after {noticed:.1f} s"
            assert requeued["status"] in ("Queued", "Preparing", "Running"), requeued
            done = wait_job(api, srv, name, timeout=40)
        assert not rec.errors, rec.errors
        assert done["status"] == "Completed", done
        assert [a["attempt"] for a in done["attempts"]] == [1, 2], done["attempts"]
        assert done["attempts"][0]["reasons"] == ["lost"], done["attempts"]
        assert done["attempts"][1]["nodes"] != [node_id], "attempt 2 must run on another node"
        assert log_text(api, srv, name, attempt=2) == "attempt 2\ndone\n"
        assert "done" not in log_text(api, srv, name, attempt=1)
        # The API showed the node as lost (Azure: unusable) before it was released.
        marked = [
            n
            for s in rec.snapshots
            for n in s.nodes
            if n["nodeId"] == node_id and (n["error"] or {}).get("code")
        ]
        assert marked and all(n["error"]["code"] == "NodeLost" for n in marked), marked
        assert {(n["state"], n["nodeState"]) for n in marked} == {("lost", "unusable")}
        # Its orphaned job processes were killed with it, and no agent serves it any more.
        wait_until(
            lambda: not processes_with_env("CLOUDLET_NODE_ID", node_id),
            10,
            "the lost node's processes to die",
        )
        # The record stays listed as lost, for post-mortem, while its machine is gone.
        listed = {n["nodeId"]: n for n in nodes(api, srv, "lossy")}
        assert listed[node_id]["state"] == "lost" and listed[node_id]["nodeState"] == "unusable"
