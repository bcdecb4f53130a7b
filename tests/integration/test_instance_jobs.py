"""Acceptance: a compute instance as a job target (issue 4, item 9; I11). Jobs sent to an instance
run side by side, one per vCPU, the rest wait in queue order; a job may run several processes on
it (``process_count_per_instance``); stopping the instance requeues what ran on it.

One server and one 2-vCPU instance for the module, without JupyterLab (``CLOUDLET_INSTANCE_APPS``
empty): a real node, a real agent and real job processes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.instance_helpers import act, create_instance
from tests.jobs_helpers import error_of, job, log_text, logs, served, submit, wait_job, wait_until

NAME = "ci-jobs"
# Each job prints when it started and ended (epoch seconds) around a 1-second sleep.
TIMED = "date +%s.%N; sleep 1; date +%s.%N"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "instance-jobs", extra_env={"CLOUDLET_INSTANCE_APPS": ""})


@pytest.fixture(scope="module")
def instance(api: httpx.Client, srv: RunningServer) -> dict[str, Any]:
    return create_instance(api, srv, NAME, size="Standard_DS2_v2")


def _interval(api: httpx.Client, srv: RunningServer, name: str) -> tuple[float, float]:
    start, end = (float(line) for line in log_text(api, srv, name).split())
    return start, end


def _most_at_once(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    running = most = 0
    for _, delta in events:
        running += delta
        most = max(most, running)
    return most


def test_four_one_second_jobs_on_two_vcpus_run_two_at_a_time(
    api: httpx.Client, srv: RunningServer, instance: dict[str, Any]
) -> None:
    names = [f"pair-{i}" for i in range(4)]
    for name in names:
        submit(api, srv, name, {"command": TIMED, "compute": f"azureml:{NAME}"})
    done = [wait_job(api, srv, name, timeout=60) for name in names]
    assert [d["status"] for d in done] == ["Completed"] * 4, done
    intervals = [_interval(api, srv, name) for name in names]
    assert _most_at_once(intervals) == 2, intervals
    # Queue order: the last two started only after one of the first two ended.
    first_end = min(end for _, end in intervals[:2])
    assert all(start >= first_end for start, _ in intervals[2:]), intervals


def test_several_processes_on_the_instance(
    api: httpx.Client, srv: RunningServer, instance: dict[str, Any]
) -> None:
    body = {
        "command": "echo rank $RANK of $WORLD_SIZE",
        "compute": f"azureml:{NAME}",
        "distribution": {"type": "pytorch", "process_count_per_instance": 2},
    }
    submit(api, srv, "two-procs", body)
    assert wait_job(api, srv, "two-procs", timeout=60)["status"] == "Completed"
    files = logs(api, srv, "two-procs")["files"]
    assert {"user_logs/std_log_process_0.txt", "user_logs/std_log_process_1.txt"} <= set(files), files


def test_more_than_one_machine_is_refused(
    api: httpx.Client, srv: RunningServer, instance: dict[str, Any]
) -> None:
    body = {"command": "true", "compute": f"azureml:{NAME}", "resources": {"instance_count": 2}}
    response = api.put(f"{srv.ws_path}/jobs/too-wide", json=body)
    error = error_of(response)
    assert error["code"] == "JobCanNeverRun" and error["target"] == "resources.instance_count", error
    assert api.get(f"{srv.ws_path}/jobs/too-wide").status_code == 404  # nothing half-created


def test_stop_requeues_running_jobs_and_start_runs_the_queue(
    api: httpx.Client, srv: RunningServer, instance: dict[str, Any]
) -> None:
    # Attempt 1 would run for a minute; the attempt after the restart finishes at once.
    body = {"command": 'if [ "$CLOUDLET_ATTEMPT" = 1 ]; then sleep 60; fi; echo attempt $CLOUDLET_ATTEMPT'}
    submit(api, srv, "long", {**body, "compute": f"azureml:{NAME}"})
    wait_job(api, srv, "long", ("Running",), timeout=30)
    act(api, srv, NAME, "stop")
    stopped = job(api, srv, "long")
    assert stopped["status"] == "Queued" and "stopped" in stopped["status_message"], stopped
    submit(api, srv, "waits", {"command": "echo later", "compute": f"azureml:{NAME}"})
    waiting = job(api, srv, "waits")
    assert waiting["status"] == "Queued" and "Stopped" in waiting["status_message"], waiting
    act(api, srv, NAME, "start")
    for name in ("long", "waits"):
        assert wait_job(api, srv, name, timeout=60)["status"] == "Completed", job(api, srv, name)
    assert log_text(api, srv, "long", attempt=2).strip() == "attempt 2"
    wait_until(
        lambda: api.get(f"{srv.ws_path}/computes/{NAME}").json().get("state") == "Running",
        30,
        "the instance to be Running",
    )
