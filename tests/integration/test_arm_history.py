"""The run-history routes azure-ai-ml follows a job by (``jobs.stream``), over a real server and a
real job: the discovery document, a run's details with its log files, and the log files behind
URLs that carry their own signature (fetched with no credentials, as the SDK does)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import RunningServer
from tests.integration.test_access import new_user
from tests.jobs_helpers import served, submit, wait_job


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
    assert body["history"] == srv.endpoint and body["api"] == srv.endpoint
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
    log = httpx.get(url)  # the SDK sends no Authorization header here
    assert log.status_code == 200 and "hello-from-history" in log.text


def test_a_tampered_or_foreign_log_reference_is_refused(srv: RunningServer, finished: str) -> None:
    with srv.client() as api:
        url = api.get(history_path(srv, finished)).json()["logFiles"]["user_logs/std_log.txt"]
    payload, signature = url.rsplit("/", 1)[1].split(".", 1)
    forged = url.rsplit("/", 1)[0] + f"/{payload}.{signature[:-2]}AA"
    assert httpx.get(forged).status_code == 403
    assert httpx.get(url.rsplit("/", 1)[0] + "/not-a-reference").status_code == 403


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
