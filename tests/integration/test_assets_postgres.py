"""Assets on PostgreSQL: versions, @latest and archive, a job that reads a data version and
registers a model when it completes, and the refused delete of a version a running job uses —
the same rules as on SQLite (tests/e2e/test_assets_cli.py), through the store PostgreSQL serves."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from cloudlet.client import Data, MLClient
from tests.conftest import RunningServer
from tests.jobs_helpers import create_compute, log_text, submit, wait_job, wait_until


@pytest.mark.postgres
def test_assets_on_postgresql(
    server_factory: Callable[..., RunningServer], postgres_url: str, tmp_path: Path
) -> None:
    srv = server_factory(db_url=postgres_url)
    (tmp_path / "rows.txt").write_text("on postgres\n", encoding="utf-8")
    with MLClient(home=srv.home) as client:
        first = client.data.create_or_update(
            Data(name="rows", path=str(tmp_path / "rows.txt"), type="uri_file")
        )
        second = client.data.create_or_update(Data(name="rows", path=first.path, type="uri_file"))
        assert (first.version, second.version) == ("1", "2")
        client.data.archive("rows", version="2")
        assert client.data.get("rows", label="latest").version == "1"
        assert [d.version for d in client.data.list("rows", list_view_type="all")] == ["2", "1"]
    with srv.client() as api:
        cluster = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 1}
        create_compute(api, srv, "pg-cluster", cluster)
        body = {
            "command": "cat ${{inputs.rows}} > ${{outputs.m}}/seen.txt; cat ${{inputs.rows}}; sleep 3",
            "compute": "azureml:pg-cluster",
            "inputs": {"rows": {"type": "uri_file", "path": "azureml:rows@latest"}},
            "outputs": {"m": {"type": "custom_model", "name": "pg-model"}},
        }
        submit(api, srv, "pg-job", body)
        wait_until(lambda: log_text(api, srv, "pg-job") == "on postgres\n", 60, "the job to read its input")
        refused = api.delete(f"{srv.ws_path}/data/rows/versions/1")
        assert refused.status_code == 409 and "pg-job" in refused.json()["error"]["message"], refused.text
        assert wait_job(api, srv, "pg-job", timeout=60)["status"] == "Completed"
        model = api.get(f"{srv.ws_path}/models/pg-model").json()
        assert (model["version"], model["job_name"]) == ("1", "pg-job"), model
        assert api.delete(f"{srv.ws_path}/data/rows/versions/1").status_code == 204
        assert api.get(f"{srv.ws_path}/jobs/pg-job").json()["assets"][0]["version"] == "1"
