"""Acceptance: a Slurm location (issue 15, item 3) against real Slurm daemons.

munged, slurmctld and two slurmd run as separate hosts in network namespaces (``tests/slurm_hosts.py``);
the server listens on the namespaces' bridge, and every cloudlet node is a placeholder ``sbatch``
job whose agent runs on a Slurm node, in that node's namespace. Partitions: ``urgent`` (dedicated
nodes, PriorityTier 10) and ``lowpri`` (``tier: low_priority``, PriorityTier 1, preempted by
requeue). Each test uses its own cluster and leaves no job of its own in Slurm.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import slurm_hosts
from tests.conftest import RunningServer
from tests.integration.test_clusters import CHECKPOINTING
from tests.jobs_helpers import (
    agent_nodes,
    create_compute,
    delete_compute,
    job,
    log_text,
    nodes,
    served,
    submit,
    wait_job,
    wait_until,
)

SIZE = "Standard_DS1_v2"  # 1 vCPU: a placeholder takes one of a Slurm node's two CPUs
LOCATION = "hpc"


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurm_hosts.SlurmHosts]:
    lacking = slurm_hosts.missing()
    if lacking:
        message = f"Slurm tests need {', '.join(lacking)} (scripts/setup-tests.sh installs Slurm as root)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    with slurm_hosts.slurm_hosts(Path(tmp_path_factory.mktemp("slurm"))) as hosts:
        yield hosts


@pytest.fixture(scope="module")
def srv(slurm: slurm_hosts.SlurmHosts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "slurm-location", host=slurm_hosts.BRIDGE_ADDRESS)


@pytest.fixture(scope="module")
def api(srv: RunningServer, slurm: slurm_hosts.SlurmHosts) -> Iterator[httpx.Client]:
    with srv.client() as client:
        config = {
            "partition": slurm_hosts.URGENT_PARTITION,
            "low_priority_partition": slurm_hosts.LOW_PARTITION,
            "slurm_conf": str(slurm.conf),
            "bin_dir": "/usr/bin",
        }
        made = client.put(f"/api/v1/locations/{LOCATION}", json={"provider": "slurm", "config": config})
        assert made.status_code in (200, 201), made.text
        yield client


def cluster(max_instances: int = 2, idle: int = 3, **extra: Any) -> dict[str, Any]:
    return {
        "type": "amlcompute",
        "size": SIZE,
        "location": LOCATION,
        "min_instances": 0,
        "max_instances": max_instances,
        "idle_time_before_scale_down": idle,
        **extra,
    }


def placeholders(slurm: slurm_hosts.SlurmHosts, installation: str) -> dict[str, str]:
    """node id -> Slurm state of this installation's placeholder jobs."""
    out = slurm.client(["squeue", "-h", "-o", "%j|%k|%T"]).stdout
    found = {}
    for line in out.splitlines():
        name, comment, state = line.split("|")
        if comment.startswith(f"cloudlet:{installation}:"):
            found[name.removeprefix("cloudlet-")] = state
    return found


def drop(api: httpx.Client, srv: RunningServer, slurm: slurm_hosts.SlurmHosts, name: str) -> None:
    delete_compute(api, srv, name)
    wait_until(
        lambda: not placeholders(slurm, srv.installation), 60, f"{name}'s placeholders to be scancel'ed"
    )
    wait_until(lambda: not agent_nodes(srv.installation), 30, f"{name}'s agents to exit")


def blocker(slurm: slurm_hosts.SlurmHosts, seconds: int) -> str:
    """Another tenant's job that takes both Slurm nodes whole, in the high-priority partition."""
    argv = ["sbatch", "--parsable", "-p", slurm_hosts.URGENT_PARTITION, "-N2", "--exclusive"]
    out = slurm.client([*argv, "--export=NONE", "--output=/dev/null", f"--wrap=sleep {seconds}"]).stdout
    return out.strip().split(";")[0]


def test_cluster_scales_through_sbatch_runs_jobs_on_allocations_and_scancels_idle_nodes(
    api: httpx.Client, srv: RunningServer, slurm: slurm_hosts.SlurmHosts
) -> None:
    name = "slurm-scale"
    create_compute(api, srv, name, cluster(max_instances=2, idle=3))
    try:
        for i in range(2):
            body = {"command": "sleep 3; echo ran on $(hostname -I)", "compute": f"azureml:{name}"}
            submit(api, srv, f"slurm-job-{i}", body)

        def two() -> dict[str, str] | None:
            found = placeholders(slurm, srv.installation)
            return found if len(found) == 2 else None

        running = wait_until(two, 60, "two placeholder allocations in squeue")
        assert set(running) == {n["nodeId"] for n in nodes(api, srv, name)}, running
        for i in range(2):
            done = wait_job(api, srv, f"slurm-job-{i}", timeout=120)
            assert done["status"] == "Completed", done
            text = log_text(api, srv, f"slurm-job-{i}")
            assert re.search(r"ran on 10\.77\.2\.1[12]\b", text), text  # on a Slurm node's host
        addresses = {n["privateIpAddress"] for n in nodes(api, srv, name)}
        assert addresses <= {"10.77.2.11", "10.77.2.12"} and addresses, addresses
        # Idle for 3 s: scale down is scancel; nothing of ours is left in Slurm.
        wait_until(
            lambda: not placeholders(slurm, srv.installation), 90, "idle placeholders to be scancel'ed"
        )
        wait_until(
            lambda: not [n for n in nodes(api, srv, name) if n["state"] != "terminated"] or None,
            30,
            "0 nodes",
        )
    finally:
        drop(api, srv, slurm, name)


def test_a_pending_allocation_shows_slurms_reason_in_list_nodes(
    api: httpx.Client, srv: RunningServer, slurm: slurm_hosts.SlurmHosts
) -> None:
    name = "slurm-pending"
    blocking = blocker(slurm, 600)
    try:
        wait_until(
            lambda: slurm.client(["squeue", "-h", "-j", blocking, "-o", "%T"]).stdout.strip() == "RUNNING",
            30,
            "the blocker to run",
        )
        create_compute(api, srv, name, cluster(max_instances=1, idle=3))
        submit(api, srv, "slurm-waits", {"command": "echo finally", "compute": f"azureml:{name}"})

        def pending() -> dict[str, Any] | None:
            return next((n for n in nodes(api, srv, name) if n.get("status_message")), None)

        node = wait_until(pending, 60, "the node to say why Slurm keeps it pending")
        assert node["nodeState"] == "preparing", node
        assert re.search(r"pending: (Resources|Priority)\b", node["status_message"]), node
        shown = cli_list_nodes(srv, name)
        assert "Slurm has the allocation pending" in shown and node["nodeId"] in shown, shown
        # Slurm runs it once the blocker goes (past the start timeout too: tests/unit/test_engine_pending.py).
        slurm.client(["scancel", blocking])
        done = wait_job(api, srv, "slurm-waits", timeout=120)
        assert done["status"] == "Completed" and log_text(api, srv, "slurm-waits") == "finally\n", done
        [ran] = [n for n in nodes(api, srv, name) if n["nodeId"] == node["nodeId"]]
        assert ran["status_message"] is None, ran
    finally:
        slurm.client(["scancel", blocking], check=False)
        drop(api, srv, slurm, name)


def cli_list_nodes(srv: RunningServer, name: str) -> str:
    env = {**srv.cli_env(), "CLOUDLET_OUTPUT": "table", "COLUMNS": "400"}
    argv = [sys.executable, "-m", "cloudlet", "compute", "list-nodes", "-n", name]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_slurm_preempting_a_low_priority_node_requeues_its_job_from_the_checkpoint(
    api: httpx.Client, srv: RunningServer, slurm: slurm_hosts.SlurmHosts
) -> None:
    name = "slurm-lowpri"
    create_compute(api, srv, name, cluster(max_instances=1, idle=3, tier="low_priority"))
    blocking = ""
    try:
        submit(api, srv, "slurm-ckpt", {"command": CHECKPOINTING, "compute": f"azureml:{name}"})
        wait_until(
            lambda: "step 3\n" in log_text(api, srv, "slurm-ckpt"), 90, "the job to checkpoint a few steps"
        )
        running = job(api, srv, "slurm-ckpt")
        [node_id] = running["attempts"][0]["nodes"]
        assert placeholders(slurm, srv.installation)[node_id] == "RUNNING"
        [lowpri] = slurm.client(["squeue", "-h", "-n", f"cloudlet-{node_id}", "-o", "%P"]).stdout.split()
        assert lowpri == slurm_hosts.LOW_PARTITION

        blocking = blocker(slurm, 6)  # the urgent partition preempts the placeholder (requeue)

        def evicted() -> dict[str, Any] | None:
            found = [n for n in nodes(api, srv, name) if n["nodeId"] == node_id]
            return found[0] if found and found[0]["nodeState"] == "preempted" else None

        node = wait_until(evicted, 60, "the node to be preempted")
        assert node["error"]["code"] == "Preempted", node

        def requeued_job() -> dict[str, Any] | None:
            found = job(api, srv, "slurm-ckpt")
            return found if found["attempt"] >= 2 or found["status"] != "Running" else None

        requeued = wait_until(requeued_job, 30, "the job to be requeued")
        assert requeued["attempts"][0]["reasons"] == ["preempted"], requeued["attempts"]
        done = wait_job(api, srv, "slurm-ckpt", timeout=180)
        assert done["status"] == "Completed", done
        assert done["attempt"] == 2, done["attempts"]
        assert done["attempts"][1]["nodes"] != [node_id], "attempt 2 must run on a new node"
        second = log_text(api, srv, "slurm-ckpt", attempt=2)
        match = re.search(r"attempt 2\nresumed from (\d+)\n", second)
        assert match is not None and int(match.group(1)) >= 3, second
        assert second.endswith("finished\n"), second
        assert node_id not in placeholders(slurm, srv.installation)  # the requeued placeholder is gone
    finally:
        if blocking:
            slurm.client(["scancel", blocking], check=False)
        drop(api, srv, slurm, name)


def test_a_two_node_job_waits_for_both_allocations_and_spans_two_slurm_hosts(
    api: httpx.Client, srv: RunningServer, slurm: slurm_hosts.SlurmHosts
) -> None:
    name = "slurm-multi"
    # 2 vCPUs: each placeholder takes one Slurm node whole, so the two nodes are two hosts.
    create_compute(api, srv, name, {**cluster(max_instances=2, idle=30), "size": "Standard_F2s_v2"})
    argv = ["sbatch", "--parsable", "-p", slurm_hosts.URGENT_PARTITION, "-w", slurm_hosts.NODES[1]]
    out = slurm.client([*argv, "--exclusive", "--export=NONE", "--output=/dev/null", "--wrap=sleep 600"])
    blocking = out.stdout.strip().split(";")[0]
    try:
        body = {
            "command": 'echo "rank $RANK of $WORLD_SIZE, master $MASTER_ADDR"',
            "compute": f"azureml:{name}",
            "resources": {"instance_count": 2},
            "distribution": {"type": "pytorch", "process_count_per_instance": 1},
        }
        submit(api, srv, "slurm-2node", body)

        def one_idle_one_pending() -> list[dict[str, Any]] | None:
            found = nodes(api, srv, name)
            states = sorted((n["state"], bool(n["status_message"])) for n in found)
            return found if states == [("idle", False), ("starting", True)] else None

        wait_until(one_idle_one_pending, 90, "one allocation running and the other pending")
        held = job(api, srv, "slurm-2node")
        assert held["status"] == "Queued" and not held["attempts"], held  # all or nothing
        slurm.client(["scancel", blocking])
        done = wait_job(api, srv, "slurm-2node", timeout=120)
        assert done["status"] == "Completed", done
        ran_on = done["attempts"][0]["nodes"]
        addresses = {n["nodeId"]: n["privateIpAddress"] for n in nodes(api, srv, name)}
        assert sorted(addresses[n] for n in ran_on) == ["10.77.2.11", "10.77.2.12"], (ran_on, addresses)
    finally:
        slurm.client(["scancel", blocking], check=False)
        drop(api, srv, slurm, name)


def test_a_location_reaches_slurm_through_a_login_node_over_ssh(
    api: httpx.Client,
    srv: RunningServer,
    slurm: slurm_hosts.SlurmHosts,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    if not (shutil.which("ssh") and shutil.which("sshd", path="/usr/sbin:/usr/bin")):
        message = "the login-node test needs ssh and sshd (scripts/setup-tests.sh installs openssh-server)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    login = slurm.start_login()
    nodes_dir = tmp_path_factory.mktemp("login-nodes")  # "the cluster's shared filesystem"
    config = {
        "partition": slurm_hosts.URGENT_PARTITION,
        "login": {
            "address": login.address,
            "port": login.port,
            "identity_file": str(login.identity_file),
            "known_hosts": str(login.known_hosts),
        },
        "slurm_conf": str(slurm.conf),
        "bin_dir": "/usr/bin",
        "nodes_dir": str(nodes_dir),
        "python": sys.executable,
    }
    made = api.put("/api/v1/locations/hpc-login", json={"provider": "slurm", "config": config})
    assert made.status_code in (200, 201), made.text
    name = "slurm-login"
    create_compute(api, srv, name, {**cluster(max_instances=1, idle=3), "location": "hpc-login"})
    try:
        submit(api, srv, "slurm-via-login", {"command": "echo via login", "compute": f"azureml:{name}"})
        done = wait_job(api, srv, "slurm-via-login", timeout=120)
        assert done["status"] == "Completed" and log_text(api, srv, "slurm-via-login") == "via login\n", done
        [node_id] = done["attempts"][0]["nodes"]
        assert (nodes_dir / node_id / "placeholder.sh").exists()  # written through the login node
        assert (nodes_dir / node_id / "agent.env").stat().st_mode & 0o777 == 0o600
        wait_until(
            lambda: not placeholders(slurm, srv.installation), 90, "the idle placeholder to be scancel'ed"
        )
        env_file = nodes_dir / node_id / "agent.env"
        wait_until(lambda: not env_file.exists(), 30, "the node's token to go with it")
    finally:
        drop(api, srv, slurm, name)
        api.delete("/api/v1/locations/hpc-login")
