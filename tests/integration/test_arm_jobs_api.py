"""Jobs through the ARM facade in the shape azure-ai-ml sends them (create, get, list with paging,
cancel), and the run-history routes it follows a job by (``jobs.stream``): the discovery document,
a run's details with its log files, and the log files behind URLs that carry their own signature
(fetched with no credentials, as the SDK does). A real server, real jobs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.integration.test_access import new_user
from tests.jobs_helpers import served, submit, wait_job

ARM_JOBS = Path(__file__).parents[1] / "data" / "arm_jobs"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "arm-history")


@pytest.fixture(scope="module")
def finished(srv: RunningServer) -> str:
    with srv.client() as api:
        submit(api, srv, "hist-1", {"command": "echo hello-from-history", "compute": "local"})
        assert wait_job(api, srv, "hist-1")["status"] == "Completed"
    return "hist-1"


def history_path(srv: RunningServer, job: str, workspace: str = "default") -> str:
    return (
        f"/history/v1.0/subscriptions/{srv.subscription_id}/resourceGroups/default/providers/"
        f"Microsoft.MachineLearningServices/workspaces/{workspace}/runs/{job}/details"
    )


def test_the_discovery_document_names_this_server_for_every_service(srv: RunningServer) -> None:
    body = httpx.get(f"{srv.endpoint}/discovery/workspaces/any").json()  # no credentials
    assert body["history"] == srv.https_url and body["api"] == srv.https_url  # where the SDK goes
    assert set(body) >= {"history", "experimentation", "pipelines", "modelmanagement", "catalog"}


def test_details_list_the_logs_and_their_signed_urls_open_without_credentials(
    srv: RunningServer, finished: str
) -> None:
    with srv.client() as api:
        details = api.get(history_path(srv, finished))
    assert details.status_code == 200, details.text
    body = details.json()
    assert body["runId"] == finished and body["status"] == "Completed" and body["error"] is None
    assert body["endTimeUtc"].endswith("Z") and body["warnings"] == []
    assert "user_logs/std_log.txt" in body["logFiles"]
    url = body["logFiles"]["user_logs/std_log.txt"]
    log = httpx.get(url, verify=str(srv.ca_file))  # the SDK sends no Authorization header here
    assert log.status_code == 200 and "hello-from-history" in log.text


def test_a_tampered_or_foreign_log_reference_is_refused(srv: RunningServer, finished: str) -> None:
    with srv.client() as api:
        url = api.get(history_path(srv, finished)).json()["logFiles"]["user_logs/std_log.txt"]
    payload, signature = url.rsplit("/", 1)[1].split(".", 1)
    forged = url.rsplit("/", 1)[0] + f"/{payload}.{signature[:-2]}AA"
    assert httpx.get(forged, verify=str(srv.ca_file)).status_code == 403
    assert httpx.get(url.rsplit("/", 1)[0] + "/not-a-reference", verify=str(srv.ca_file)).status_code == 403


def test_details_need_a_caller_who_may_read_the_workspace(srv: RunningServer, finished: str) -> None:
    assert httpx.get(srv.endpoint + history_path(srv, finished)).status_code == 401
    with srv.client() as admin:
        outsider = new_user(admin, srv, "hist-outsider")  # no role on the workspace
        reader = new_user(admin, srv, "hist-reader", "Reader")
    with srv.client(outsider["api_key"]) as api:
        assert api.get(history_path(srv, finished)).status_code == 404  # hidden, not forbidden
    with srv.client(reader["api_key"]) as api:
        assert api.get(history_path(srv, finished)).status_code == 200
        assert api.get(history_path(srv, "no-such-job")).status_code == 404


# -- jobs through the ARM facade ------------------------------------------------------------------
def arm_jobs_path(srv: RunningServer, workspace: str = "default") -> str:
    return (
        f"/subscriptions/{srv.subscription_id}/resourceGroups/default/providers/"
        f"Microsoft.MachineLearningServices/workspaces/{workspace}/jobs"
    )


def arm_body(command: str) -> dict[str, object]:
    """A command job as azure-ai-ml 1.35.2 sends it (tests/data/arm_jobs/serverless.json), on the
    ``local`` compute."""
    body: dict[str, Any] = json.loads((ARM_JOBS / "serverless.json").read_text())
    body["properties"].update({"command": command, "computeId": "local", "displayName": "from-the-sdk"})
    body["properties"].pop("environmentId")
    return body


def test_a_job_put_in_the_arm_shape_runs_and_reads_back_in_it(srv: RunningServer) -> None:
    with srv.client() as api:
        put = api.put(f"{arm_jobs_path(srv)}/arm-1", json=arm_body("echo arm-says-hi"))
        assert put.status_code == 201, put.text
        props = put.json()["properties"]
        assert props["jobType"] == "Command" and props["status"] == "Queued"
        assert props["displayName"] == "from-the-sdk"
        page = f"{srv.endpoint}/studio/ws/{srv.subscription_id}/default/default/jobs/arm-1?tab=overview"
        assert props["services"] == {"Studio": {"endpoint": page, "jobServiceType": "Studio"}}
        assert wait_job(api, srv, "arm-1")["status"] == "Completed"
        got = api.get(f"{arm_jobs_path(srv)}/arm-1").json()
        assert got["id"].endswith("/jobs/arm-1") and got["properties"]["status"] == "Completed"
        listed = api.get(arm_jobs_path(srv), params={"listViewType": "ActiveOnly", "$top": 1}).json()
        assert len(listed["value"]) == 1 and "nextLink" in listed  # more than one job: a next page
        names = {j["name"] for j in httpx.get(listed["nextLink"], headers=api.headers).json()["value"]}
        assert names  # the page after the newest
        details = api.get(history_path(srv, "arm-1")).json()
        log_url = details["logFiles"]["user_logs/std_log.txt"]
        assert "arm-says-hi" in httpx.get(log_url, verify=str(srv.ca_file)).text


def test_an_arm_cancel_answers_202_with_a_location_and_the_job_ends_canceled(srv: RunningServer) -> None:
    with srv.client() as api:
        assert api.put(f"{arm_jobs_path(srv)}/arm-sleep", json=arm_body("sleep 300")).status_code == 201
        wait_job(api, srv, "arm-sleep", ("Running",))
        cancel = api.post(f"{arm_jobs_path(srv)}/arm-sleep/cancel")
        assert cancel.status_code == 202 and cancel.headers["Location"].endswith("/jobs/arm-sleep")
        status_url = cancel.headers["Azure-AsyncOperation"]
        assert wait_job(api, srv, "arm-sleep")["status"] == "Canceled"
        with httpx.Client(headers=api.headers, verify=str(srv.ca_file)) as tls:
            done = tls.get(status_url)
        assert done.json() == {"status": "Succeeded"} and done.headers["Retry-After"] == "1"


def test_arm_job_errors_name_the_arm_field(srv: RunningServer) -> None:
    body = arm_body("echo x")
    body["properties"]["jobType"] = "Spark"  # type: ignore[index]
    with srv.client() as api:
        bad = api.put(f"{arm_jobs_path(srv)}/arm-bad", json=body)
        assert bad.status_code == 400 and bad.json()["error"]["target"] == "properties.jobType"
        assert api.get(f"{arm_jobs_path(srv)}/arm-bad").status_code == 404  # nothing half-made
    with srv.client() as admin:
        reader = new_user(admin, srv, "arm-reader", "Reader")
    with srv.client(reader["api_key"]) as api:
        assert api.put(f"{arm_jobs_path(srv)}/arm-r", json=arm_body("echo x")).status_code == 403


def test_an_unknown_code_id_is_looked_up_and_refused_naming_the_field(srv: RunningServer) -> None:
    """A body with a codeId takes the store lookup (the others are translated without one)."""
    body = arm_body("echo x")
    body["properties"]["codeId"] = f"{arm_jobs_path(srv).removesuffix('/jobs')}/codes/nope/versions/1"  # type: ignore[index]
    with srv.client() as api:
        bad = api.put(f"{arm_jobs_path(srv)}/arm-code", json=body)
        assert bad.status_code == 400 and bad.json()["error"]["target"] == "properties.codeId", bad.text
        assert "register it first" in bad.json()["error"]["message"]
        assert api.get(f"{arm_jobs_path(srv)}/arm-code").status_code == 404  # nothing half-made


def test_run_data_answers_for_jobs_download(srv: RunningServer, finished: str) -> None:
    path = history_path(srv, finished).removesuffix(f"/runs/{finished}/details") + "/rundata"
    with srv.client() as api:
        got = api.post(path, json={"runId": finished, "selectRunMetadata": True})
        assert got.status_code == 200, got.text
        meta = got.json()["runMetadata"]
        assert meta["runId"] == finished and meta["status"] == "Completed" and meta["outputs"] == {}
        assert api.post(path, json={"runId": "nope"}).status_code == 404
        assert api.post(path, json={"runId": "../x"}).status_code == 400
