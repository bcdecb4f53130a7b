"""Acceptance: command jobs over the real HTTP API, on real node agents and real processes.

Live logs, serverless and ``compute: local`` jobs (their nodes are made for the job and gone
after it), submissions that can never run (refused with the reason), and cancel (the whole
process tree dies, the node goes back to idle). One server per module, one warm cluster.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.jobs_helpers import (
    agent_nodes,
    agent_pids,
    cmdlines_with_env,
    create_compute,
    error_of,
    job,
    log_text,
    logs,
    nodes,
    processes_with_env,
    served,
    submit,
    wait_job,
    wait_until,
)

CLUSTER = "jobs-cluster"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "jobs")


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
                "max_instances": 2,
                "idle_time_before_scale_down": 60,  # stays warm for the module
            },
        )
        yield client


def job_processes(installation: str, job_name: str) -> list[int]:
    """Live processes of this installation started for this job (runs carry CLOUDLET_JOB)."""
    mine = set(processes_with_env("CLOUDLET_INSTALLATION", installation))
    return [p for p in processes_with_env("CLOUDLET_JOB", job_name) if p in mine]


# -- logs ------------------------------------------------------------------------------------
def test_logs_stream_while_the_job_runs(api: httpx.Client, srv: RunningServer) -> None:
    submit(api, srv, "live", {"command": "echo first; sleep 2; echo second", "compute": f"azureml:{CLUSTER}"})
    page = wait_until(
        lambda: (p := logs(api, srv, "live"))["data"] and p, 40, "the first line to reach the server"
    )
    assert page["data"] == "first\n", page
    assert page["status"] == "Running", "the first line must be visible before the job ends"
    assert job(api, srv, "live")["status"] == "Running"
    # Continue from next_offset, as a follower does: only the new text comes back.
    rest = wait_until(
        lambda: (
            (p := api.get(f"{srv.ws_path}/jobs/live/logs", params={"offset": page["next_offset"]}).json())[
                "data"
            ]
            and p
        ),
        20,
        "the second line",
    )
    assert rest["data"] == "second\n" and rest["offset"] == len(b"first\n"), rest
    done = wait_job(api, srv, "live")
    assert done["status"] == "Completed" and done["exit_code"] == 0, done
    assert log_text(api, srv, "live") == "first\nsecond\n"
    assert logs(api, srv, "live")["files"] == {"user_logs/std_log.txt": len(b"first\nsecond\n")}


# -- serverless and local jobs (C15, T2) ------------------------------------------------------
@pytest.mark.parametrize(
    "name, body",
    [
        (
            "serverless-hi",
            {
                "command": "echo hi; sleep 1",
                "resources": {"instance_type": "Standard_DS3_v2", "instance_count": 1},
            },
        ),
        ("local-hi", {"command": "echo hi; sleep 1", "compute": "local"}),
    ],
)
def test_job_without_cluster_gets_its_own_node_and_leaves_nothing(
    api: httpx.Client, srv: RunningServer, installation: str, name: str, body: dict[str, Any]
) -> None:
    submitted = submit(api, srv, name, body)
    assert submitted["compute"] == ("local" if "compute" in body else "serverless"), submitted
    running = wait_job(api, srv, name, ("Running", "Completed", "Failed"), timeout=40)
    assert running["status"] == "Running", running
    [node_id] = running["attempts"][0]["nodes"]
    assert agent_pids(installation, node_id), "the job's node must be a live agent while it runs"
    done = wait_job(api, srv, name)
    assert done["status"] == "Completed" and done["exit_code"] == 0, done
    assert log_text(api, srv, name) == "hi\n"
    # The node was made for this job: it goes with it, agent and all.
    wait_until(
        lambda: not processes_with_env("CLOUDLET_NODE_ID", node_id), 15, f"node {node_id}'s processes to exit"
    )
    assert node_id not in agent_nodes(installation)


# -- refused at submission ---------------------------------------------------------------------
def test_job_that_can_never_run_is_refused_with_the_reason(api: httpx.Client, srv: RunningServer) -> None:
    too_wide = api.put(
        f"{srv.ws_path}/jobs/too-wide",
        json={"command": "echo x", "compute": f"azureml:{CLUSTER}", "resources": {"instance_count": 3}},
    )
    error = error_of(too_wide)
    assert too_wide.status_code == 400 and error["code"] == "JobCanNeverRun", error
    assert "instance_count 3" in error["message"] and "max_instances 2" in error["message"], error

    # A CUDA image on a CPU cluster is not refused: a warning, and the job runs on the CPU (as on
    # Azure ML); an incompatible CUDA on a GPU size is (tests/e2e/test_azureml_examples.py).
    cuda = api.put(
        f"{srv.ws_path}/jobs/cuda-on-cpu",
        json={
            "command": "true",
            "compute": f"azureml:{CLUSTER}",
            "environment": {"image": "mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04"},
        },
    )
    assert cuda.status_code == 201, cuda.text
    [warning] = cuda.json()["warnings"]
    assert "CUDA 11.8" in warning and "no GPU" in warning and "runs on the CPU" in warning, warning
    assert wait_job(api, srv, "cuda-on-cpu")["status"] == "Completed"

    missing = api.put(f"{srv.ws_path}/jobs/nowhere", json={"command": "echo x", "compute": "azureml:nope"})
    assert error_of(missing)["code"] == "ComputeNotFound"
    # None of them was recorded.
    for name in ("too-wide", "nowhere"):
        assert api.get(f"{srv.ws_path}/jobs/{name}").status_code == 404


def test_a_taken_job_name_is_refused_even_among_concurrent_submissions(
    api: httpx.Client, srv: RunningServer
) -> None:
    """Names are unique per workspace. Submissions are applied in batches whose first try leaves
    the check to the store's unique index; a batch that fails is replayed request by request, so
    the loser still gets a 409 naming the field, and the winners are unaffected."""
    body = {"command": "true", "compute": f"azureml:{CLUSTER}"}
    submit(api, srv, "taken", body)
    again = api.put(f"{srv.ws_path}/jobs/taken", json={**body, "display_name": "second"})
    error = error_of(again)
    assert again.status_code == 409 and error["code"] == "JobExists" and error["target"] == "name", error
    assert job(api, srv, "taken").get("display_name") is None  # the first job is untouched

    # Eight clients at once: four race for one name, four submit names of their own.
    names = ["race"] * 4 + [f"own-{i}" for i in range(4)]

    def put(name: str) -> int:
        with srv.client() as client:
            return client.put(f"{srv.ws_path}/jobs/{name}", json=body).status_code

    with ThreadPoolExecutor(max_workers=8) as pool:
        codes = list(pool.map(put, names))
    assert sorted(codes[:4]) == [201, 409, 409, 409], codes
    assert codes[4:] == [201] * 4, codes
    for name in ("race", *names[4:]):
        assert wait_job(api, srv, name, timeout=60)["status"] == "Completed"


# -- cancel ----------------------------------------------------------------------------------
def test_cancel_kills_the_whole_process_tree_and_frees_the_node(
    api: httpx.Client, srv: RunningServer, installation: str
) -> None:
    name = "cancel-me"
    submit(
        api, srv, name, {"command": "bash -c 'sleep 60 & sleep 60; wait'", "compute": f"azureml:{CLUSTER}"}
    )
    wait_job(api, srv, name, ("Running",), timeout=40)
    sleeps = wait_until(
        lambda: (
            (found := [c for c in cmdlines_with_env("CLOUDLET_JOB", name) if c[:2] == ["sleep", "60"]])
            and len(found) == 2
            and found
        ),
        15,
        "both sleep 60 processes",
    )
    assert len(sleeps) == 2
    [node_id] = job(api, srv, name)["attempts"][0]["nodes"]
    assert {n["nodeId"]: n["nodeState"] for n in nodes(api, srv, CLUSTER)}[node_id] == "running"

    response = api.post(f"{srv.ws_path}/jobs/{name}/cancel")
    asked = time.monotonic()
    assert response.status_code == 202, response.text
    wait_until(lambda: not job_processes(installation, name), 5, "the job's processes to die", interval=0.05)
    took = time.monotonic() - asked
    assert took <= 2.0, f"the process tree took {took:.2f} s to die"

    done = wait_job(api, srv, name, timeout=15)
    assert done["status"] == "Canceled", done
    wait_until(
        lambda: {n["nodeId"]: n["nodeState"] for n in nodes(api, srv, CLUSTER)}.get(node_id) == "idle",
        10,
        f"node {node_id} to be idle again",
    )
    assert agent_pids(installation, node_id), "cancel must not take the node's agent with it"
    # The freed node takes the next job.
    submit(api, srv, "after-cancel", {"command": "echo next", "compute": f"azureml:{CLUSTER}"})
    assert wait_job(api, srv, "after-cancel", timeout=30)["status"] == "Completed"
