"""Issue 24, defect 5: a job's MLflow tracking token (``services/tracking/tracking_tokens.py``) opens its
own run alone — another job's run is refused to read as to write, and a search shows only its own
— it ends with its job (refused within the caller cache period once the job has completed), and
the store never holds it: the run spec is stored without it and it is signed in on delivery."""

from __future__ import annotations

import sqlite3
import textwrap
from collections.abc import Iterator

import httpx
import pytest

from cloudlet.services.access.identity import CALLER_CACHE_TTL_S
from cloudlet.store import db
from tests.conftest import RunningServer
from tests.jobs_helpers import log_text, served, submit, wait_job, wait_until

pytest.importorskip("mlflow")

BOUND_S = CALLER_CACHE_TTL_S + 3  # a loaded machine's latency on top of the bound

SCRIPT = textwrap.dedent(
    """
    import os, mlflow
    from mlflow.tracking import MlflowClient

    def outcome(call):
        try:
            call()
            return "ALLOWED"
        except Exception as exc:
            return getattr(exc, "error_code", type(exc).__name__)

    other = os.environ["OTHER_JOB"]
    client = MlflowClient()
    with mlflow.start_run() as run:
        mlflow.log_metric("loss", 0.5)
        print("OWN-READ", outcome(lambda: client.get_run(run.info.run_id)))
        print("OTHER-READ", outcome(lambda: client.get_run(other)))
        print("OTHER-HISTORY", outcome(lambda: client.get_metric_history(other, "loss")))
        print("OTHER-ARTIFACTS", outcome(lambda: client.list_artifacts(other)))
        print("OTHER-WRITE", outcome(lambda: client.log_metric(other, "stolen", 1.0)))
        seen = mlflow.search_runs(search_all_experiments=True, output_format="list")
        print("SEARCH", sorted(r.info.run_id for r in seen))
    print("TOKEN", os.environ["MLFLOW_TRACKING_TOKEN"])
    """
)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "mlflow-token")


def _base(srv: RunningServer) -> str:
    return (
        f"{srv.endpoint}/mlflow/v1.0/subscriptions/{srv.subscription_id}/resourceGroups/default"
        "/providers/Microsoft.MachineLearningServices/workspaces/default/api/2.0/mlflow"
    )


def _line(log: str, label: str) -> str:
    found = [line.split(" ", 1)[1] for line in log.splitlines() if line.startswith(label + " ")]
    assert found, (label, log)
    return found[-1]


@pytest.fixture(scope="module")
def finished(srv: RunningServer) -> tuple[str, str]:
    """The log of a job that tried its token on another job's run, and that token."""
    with srv.client() as api:
        submit(api, srv, "tok-other", {"command": "true", "compute": "local"})
        assert wait_job(api, srv, "tok-other", timeout=120)["status"] == "Completed"
        with srv.client() as admin:  # the other run holds a metric to be read
            logged = admin.post(
                _base(srv) + "/runs/log-metric",
                json={"run_id": "tok-other", "key": "loss", "value": 1.0, "timestamp": 1, "step": 0},
            )
            assert logged.status_code == 200, logged.text
        submit(
            api,
            srv,
            "tok-job",
            {
                "command": f"python - <<'EOF'\n{SCRIPT}\nEOF",
                "compute": "local",
                "environment_variables": {"OTHER_JOB": "tok-other", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"},
            },
        )
        done = wait_job(api, srv, "tok-job", timeout=180)
        log = log_text(api, srv, "tok-job")
        assert done["status"] == "Completed", log
    return log, _line(log, "TOKEN")


def test_a_jobs_token_opens_its_own_run_only(finished: tuple[str, str]) -> None:
    log, _ = finished
    assert _line(log, "OWN-READ") == "ALLOWED"
    for label in ("OTHER-READ", "OTHER-HISTORY", "OTHER-ARTIFACTS", "OTHER-WRITE"):
        assert _line(log, label) == "PERMISSION_DENIED", (label, log)
    assert _line(log, "SEARCH") == "['tok-job']"


def test_a_jobs_token_ends_with_the_job(srv: RunningServer, finished: tuple[str, str]) -> None:
    _, token = finished
    headers = {"Authorization": f"Bearer {token}"}

    def refused() -> bool:
        got = httpx.get(_base(srv) + "/runs/get", params={"run_id": "tok-job"}, headers=headers, timeout=30)
        return got.status_code == 401

    wait_until(refused, BOUND_S, "the ended job's token to be refused")
    write = httpx.post(
        _base(srv) + "/runs/log-metric",
        json={"run_id": "tok-job", "key": "late", "value": 1.0, "timestamp": 1, "step": 0},
        headers=headers,
        timeout=30,
    )
    assert write.status_code == 401, write.text
    body = write.json()
    assert body["error_code"] == "UNAUTHENTICATED" and "has ended" in body["message"], body


def test_the_store_holds_no_tracking_token(srv: RunningServer, finished: tuple[str, str]) -> None:
    _, token = finished
    path = db.sqlite_path(db.sqlite_url(srv.home))
    assert path is not None
    with sqlite3.connect(path) as conn:  # through the connection: the WAL's pages too
        dump = "\n".join(conn.iterdump())
    assert "tok-job" in dump  # the job and its run spec are there
    assert token not in dump and "clm_" not in dump and token.split(".")[-1] not in dump
