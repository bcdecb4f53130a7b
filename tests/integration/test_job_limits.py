"""One job must not take the server down (issue 24, defect 1).

A TensorFlow job of 10,000 workers and 10,000 parameter servers was taken, and placing it built a
copy of the 20,000-task cluster list per task under the store's write lock: 13 GB and an OOM kill,
10,394 run rows. Now such a job is refused at submission with a 400 naming the field, by every way
in (the native API, the ARM facade, a sweep's trial, a serverless job's node count), nothing is
written, and the server stays responsive. Real server, real store.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cloudlet.services.jobs.prepared_specs import LARGE_PROCESSES
from tests.conftest import RunningServer
from tests.integration.test_arm_jobs_api import arm_body, arm_jobs_path
from tests.jobs_helpers import create_compute, delete_compute, served, submit, wait_job

HUGE_TF = {"type": "tensorflow", "worker_count": 10_000, "parameter_server_count": 10_000}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "job-limits")


def _refused(response: httpx.Response, target: str) -> dict[str, Any]:
    assert response.status_code == 400, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["target"] == target and error["code"] == "JobCanNeverRun", error
    assert "at most" in error["message"] and "Lower" in error["message"], error
    return error


def _healthz_s(srv: RunningServer) -> float:
    began = time.monotonic()
    assert httpx.get(srv.endpoint + "/healthz", timeout=5).status_code == 200
    return time.monotonic() - began


def _rows(srv: RunningServer) -> tuple[int, int]:
    with sqlite3.connect(srv.home / "cloudlet.db", timeout=30) as db:
        jobs = db.execute("SELECT count(*) FROM jobs").fetchone()[0]
        runs = db.execute("SELECT count(*) FROM job_runs").fetchone()[0]
    return int(jobs), int(runs)


def test_the_reproducer_is_refused_by_every_way_in_and_nothing_is_written(
    api: httpx.Client, srv: RunningServer
) -> None:
    before = _rows(srv)
    native = api.put(
        f"{srv.ws_path}/jobs/tf-huge", json={"command": "python train.py", "distribution": HUGE_TF}
    )
    _refused(native, "distribution.worker_count")
    on_local = {"command": "true", "compute": "local", "distribution": HUGE_TF}
    _refused(api.put(f"{srv.ws_path}/jobs/tf-huge-local", json=on_local), "distribution.worker_count")
    arm = arm_body("python train.py")
    arm["properties"]["distribution"] = {  # type: ignore[index]
        "distributionType": "TensorFlow",
        "workerCount": 10_000,
        "parameterServerCount": 10_000,
    }
    _refused(api.put(f"{arm_jobs_path(srv)}/tf-huge-arm", json=arm), "distribution.worker_count")
    sweep = {
        "type": "sweep",
        "trial": {"command": "python t.py --b ${{search_space.b}}", "distribution": HUGE_TF},
        "sampling_algorithm": "random",
        "search_space": {"b": {"type": "choice", "values": [1, 2]}},
        "objective": {"goal": "minimize", "primary_metric": "m"},
        "limits": {"max_total_trials": 2},
    }
    _refused(api.put(f"{srv.ws_path}/jobs/tf-huge-sweep", json=sweep), "trial.distribution.worker_count")
    wide = {"command": "true", "resources": {"instance_count": 5_000, "instance_type": "Standard_DS1_v2"}}
    _refused(api.put(f"{srv.ws_path}/jobs/too-wide", json=wide), "resources.instance_count")
    for name in ("tf-huge", "tf-huge-local", "tf-huge-arm", "tf-huge-sweep", "too-wide"):
        assert api.get(f"{srv.ws_path}/jobs/{name}").status_code == 404
    assert _rows(srv) == before  # no job, no run rows
    # Responsive throughout: health answers at once and a real job still runs to the end.
    assert max(_healthz_s(srv) for _ in range(5)) < 1.0
    submit(api, srv, "after", {"command": "echo still-here", "compute": "local"})
    assert wait_job(api, srv, "after", timeout=90)["status"] == "Completed"
    assert _healthz_s(srv) < 1.0


def test_a_large_attempt_is_placed_by_the_pass_that_builds_it_before_the_lock(
    api: httpx.Client, srv: RunningServer
) -> None:
    """More processes than ``prepared_specs.LARGE_PROCESSES``: the submission's and the agent's
    transactions leave it queued, the cluster pass builds its run specs without the write lock and
    places it; every process runs."""
    cluster = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 1}
    create_compute(api, srv, "wide", cluster)
    processes = LARGE_PROCESSES + 2
    doc = {
        "command": "echo rank=$RANK",
        "compute": "azureml:wide",
        "distribution": {"type": "pytorch", "process_count_per_instance": processes},
    }
    submit(api, srv, "wide-job", doc)
    done = wait_job(api, srv, "wide-job", timeout=120)
    assert done["status"] == "Completed", done
    logs = api.get(f"{srv.ws_path}/jobs/wide-job/logs").json()["files"]
    assert len([f for f in logs if f.startswith("user_logs/std_log_process_")]) == processes, logs
    delete_compute(api, srv, "wide")
