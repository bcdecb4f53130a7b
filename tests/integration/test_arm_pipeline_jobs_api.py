"""Pipelines through the ARM facade and run history at the HTTP level (the SDK's own run is in
test_arm_sdk_pipelines.py): the ``x-azureml-token`` a pipeline PUT carries is checked (this
server's JWT, the Azure ML audience, the caller's own); a pipeline's children as run history lists
them (``jobs.list(parent_job_name=…)``), its ARM view with its steps, and its execution log behind
a signed URL (``jobs.stream``). A real server, real jobs on the local compute."""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.integration.test_access import new_user
from tests.jobs_helpers import served, submit, wait_job, wait_until

PIPELINE_BODY = Path(__file__).parents[1] / "data" / "arm_pipeline_jobs" / "pipeline.json"
NATIVE_PIPELINE = {
    "type": "pipeline",
    "display_name": "native-two",
    "settings": {"default_compute": "local"},
    "jobs": {
        "make": {
            "command": "echo made > ${{outputs.o}}/f.txt",
            "outputs": {"o": {"type": "uri_folder"}},
        },
        "use": {
            "command": "cat ${{inputs.d}}/f.txt",
            "inputs": {"d": "${{parent.jobs.make.outputs.o}}"},
        },
    },
}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "arm-pipelines")


def _arm(srv: RunningServer) -> str:
    return (
        f"/subscriptions/{srv.subscription_id}/resourceGroups/default/providers/"
        "Microsoft.MachineLearningServices/workspaces/default"
    )


def _msi_token(srv: RunningServer, credential: str, resource: str) -> str:
    with httpx.Client(verify=ssl.create_default_context(cafile=srv.ca_file)) as tls:
        got = tls.get(
            f"{srv.https_url}/msi/token",
            params={"api-version": "2019-08-01", "resource": resource},
            headers={"X-IDENTITY-HEADER": credential},
        )
    assert got.status_code == 200, got.text
    token: str = got.json()["access_token"]
    return token


def test_the_x_azureml_token_must_be_this_servers_for_azure_ml_and_the_callers(srv: RunningServer) -> None:
    body: dict[str, Any] = json.loads(PIPELINE_BODY.read_text())
    url = f"{_arm(srv)}/jobs/tok-pipe"
    with srv.client() as api:
        other = new_user(api, srv, "pipe-other", "contributor")["api_key"]
        cases = {
            "not-a-jwt": "malformed",
            _msi_token(srv, srv.api_key, "https://storage.azure.com/"): "audience",
            _msi_token(srv, other, "https://ml.azure.cloudlet/.default"): "another principal",
        }
        for token, why in cases.items():
            refused = api.put(url, json=body, headers={"x-azureml-token": token})
            assert refused.status_code == 401, (why, refused.text)
            error = refused.json()["error"]
            assert error["target"] == "x-azureml-token", (why, error)
            assert why in error["message"], (why, error)
        assert api.get(url).status_code == 404  # nothing half-made
        # the caller's own token passes the check (the body then fails on its unregistered components)
        own = _msi_token(srv, srv.api_key, "https://ml.azure.cloudlet/.default")
        passed = api.put(url, json=body, headers={"x-azureml-token": own})
        assert passed.status_code == 400 and "component" in passed.text.lower(), passed.text


def test_a_pipelines_children_view_and_execution_log(srv: RunningServer) -> None:
    with srv.client() as api:
        submit(api, srv, "np-1", NATIVE_PIPELINE)
        assert wait_job(api, srv, "np-1", timeout=120)["status"] == "Completed"
        kids = api.get(f"/history/v1.0{_arm(srv)}/runs/np-1/children")
        assert kids.status_code == 200, kids.text
        runs = kids.json()["value"]
        assert [r["runId"] for r in runs] == ["np-1-make", "np-1-use"], runs
        assert all(r["status"] == "Completed" and r["parentRunId"] == "np-1" for r in runs), runs
        assert api.get(f"/history/v1.0{_arm(srv)}/runs/np-1/children", params={"$top": 1}).json()[
            "value"
        ] == [runs[0]]
        arm = api.get(f"{_arm(srv)}/jobs/np-1").json()["properties"]
        assert arm["jobType"] == "Pipeline" and sorted(arm["jobs"]) == ["make", "use"], arm
        assert arm["jobs"]["use"]["inputs"]["d"] == {
            "job_input_type": "literal",
            "value": "${{parent.jobs.make.outputs.o}}",
        }
        assert api.get(f"{_arm(srv)}/jobs/np-1-use").json()["properties"]["jobType"] == "Command"
        details = api.get(f"/history/v1.0{_arm(srv)}/runs/np-1/details").json()
    assert list(details["logFiles"]) == ["logs/azureml/executionlogs.txt"], details
    log = httpx.get(
        details["logFiles"]["logs/azureml/executionlogs.txt"],
        verify=ssl.create_default_context(cafile=srv.ca_file),
    )
    assert log.status_code == 200
    lines = log.text.splitlines()
    assert [line.split("] ", 1)[1] for line in lines[1:]] == [
        "step make (np-1-make) started",
        "step make (np-1-make) Completed",
        "step use (np-1-use) started",
        "step use (np-1-use) Completed",
        "np-1 Completed",
    ], lines


def test_an_arm_cancel_ends_a_running_pipeline_and_its_steps(srv: RunningServer) -> None:
    sleeper = {
        "type": "pipeline",
        "settings": {"default_compute": "local"},
        "jobs": {"nap": {"command": "sleep 300"}},
    }
    with srv.client() as api:
        submit(api, srv, "np-cancel", sleeper)
        children = f"/history/v1.0{_arm(srv)}/runs/np-cancel/children"
        wait_until(
            lambda: [r["status"] for r in api.get(children).json()["value"]] == ["Running"],
            60,
            "the pipeline's step to run",
        )
        cancel = api.post(f"{_arm(srv)}/jobs/np-cancel/cancel")
        assert cancel.status_code == 202 and cancel.headers["Location"].endswith("/jobs/np-cancel")
        assert wait_job(api, srv, "np-cancel", timeout=60)["status"] == "Canceled"
        assert wait_job(api, srv, "np-cancel-nap", timeout=60)["status"] == "Canceled"
        assert api.get(f"{_arm(srv)}/jobs/np-cancel/cancelStatus").json() == {"status": "Succeeded"}
