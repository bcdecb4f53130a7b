"""Acceptance: batch endpoints (issue 14, item 4) on a real server, real agents and real processes.

1,000 rows in 10 files, one file per mini-batch, on a cluster at 0 nodes, driven by the CLI: the
cluster scales, the job completes, one mini-batch that fails once (a marker file) is retried, and
the predictions file downloaded through `cloudlet job download --output-name score` has 1,000
rows. A deployment whose failures pass error_threshold, invoked over a data asset, fails the job
naming it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import RunningServer
from tests.jobs_helpers import (
    cli_json,
    compute,
    create_compute,
    finished_parent,
    job,
    log_text,
    served,
)

CLUSTER = "batch-cluster"
SCORE = """\
import os

def init():
    global started
    started = os.getpid()

def run(mini_batch):
    rows = []
    for path in mini_batch:
        name = os.path.basename(path)
        marker = os.path.join(os.getcwd(), "failed-once-" + name)
        if name == os.environ.get("FAIL_ONCE") and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("failing " + name + " once")
        if name == os.environ.get("FAIL_ALWAYS"):
            raise RuntimeError("always failing " + name)
        with open(path) as f:
            rows += [name + "," + line.strip() for line in f if line.strip()]
    return rows
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "batch", extra_env={"CLOUDLET_INSTANCE_APPS": ""})


@pytest.fixture(scope="module")
def api(srv: RunningServer) -> Iterator[httpx.Client]:
    with srv.client() as client:
        body = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 1}
        create_compute(client, srv, CLUSTER, {**body, "idle_time_before_scale_down": 120})
        yield client


def cli(srv: RunningServer, *args: str, cwd: Path | None = None) -> Any:
    return cli_json(srv, *args, cwd=cwd, timeout=60)


def finished(api: httpx.Client, srv: RunningServer, name: str) -> dict[str, Any]:
    return finished_parent(api, srv, name, timeout=120)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("batch-project")
    (root / "src").mkdir()
    (root / "src" / "score.py").write_text(SCORE)
    rows = root / "rows"
    rows.mkdir()
    for part in range(10):
        lines = "".join(f"{part * 100 + i}\n" for i in range(100))
        (rows / f"part-{part:02d}.csv").write_text(lines)
    return root


def deployment(root: Path, name: str, **fields: Any) -> Path:
    doc = {
        "$schema": "https://azuremlschemas.azureedge.net/latest/modelBatchDeployment.schema.json",
        "name": name,
        "endpoint_name": "scorer",
        "code_configuration": {"code": "src", "scoring_script": "score.py"},
        "compute": f"azureml:{CLUSTER}",
        "mini_batch_size": 1,
        "max_concurrency_per_instance": 2,
        "retry_settings": {"max_retries": 2, "timeout": 60},
        "output_action": "append_row",
        "output_file_name": "predictions.csv",
        **fields,
    }
    path = root / f"{name}.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_invoke_scales_retries_and_writes_1000_rows(
    api: httpx.Client, srv: RunningServer, project: Path
) -> None:
    assert compute(api, srv, CLUSTER)["current_node_count"] == 0
    cli(srv, "batch-endpoint", "create", "-n", "scorer")
    spec = deployment(project, "blue", environment_variables={"FAIL_ONCE": "part-03.csv"})
    made = cli(srv, "batch-deployment", "create", "-f", str(spec), "--set-default")
    assert made["code_configuration"]["code"].startswith("codes/")
    assert cli(srv, "batch-endpoint", "show", "-n", "scorer")["defaults"] == {"deployment_name": "blue"}
    started = cli(
        srv, "batch-endpoint", "invoke", "-n", "scorer", "--input", "rows", "--job-name", "b1", cwd=project
    )
    assert started["type"] == "batch_scoring"
    done = finished(api, srv, "b1")
    assert done["status"] == "Completed", done
    (child,) = done["children"]
    assert child["key"] == "score" and child["status"] == "Completed"
    text = log_text(api, srv, child["name"])
    assert "mini-batch 3 failed (attempt 1 of 3), retrying" in text, text
    assert "10 mini-batches scored, 0 failed" in text, text
    out = project / "out"
    cli(srv, "job", "download", "-n", "b1", "--output-name", "score", "-p", str(out))
    predictions = next(out.rglob("predictions.csv")).read_text().splitlines()
    assert len(predictions) == 1000
    assert predictions[0] == "part-00.csv,0" and predictions[-1] == "part-09.csv,999"
    jobs = cli(srv, "batch-endpoint", "list-jobs", "-n", "scorer")
    assert [j["name"] for j in jobs] == ["b1"]
    nodes = compute(api, srv, CLUSTER)["current_node_count"]
    assert nodes == 1  # scaled from 0 for the job (and kept warm: idle_time_before_scale_down)


def test_error_threshold_exceeded_fails_the_job_naming_it(
    api: httpx.Client, srv: RunningServer, project: Path
) -> None:
    if api.get(f"{srv.ws_path}/batchEndpoints/scorer").status_code == 404:
        cli(srv, "batch-endpoint", "create", "-n", "scorer")
    fields = {"environment_variables": {"FAIL_ALWAYS": "part-05.csv"}, "error_threshold": 0}
    cli(srv, "batch-deployment", "create", "-f", str(deployment(project, "strict", **fields)))
    # Over a data asset this time (the first test scored a local folder).
    cli(srv, "data", "create", "-n", "rows", "-v", "1", "--type", "uri_folder", "--path", "rows", cwd=project)
    invoke = ("batch-endpoint", "invoke", "-n", "scorer", "--input", "azureml:rows:1", "-d", "strict")
    cli(srv, *invoke, "--job-name", "b2")
    done = finished(api, srv, "b2")
    assert done["status"] == "Failed", done
    assert "error_threshold" in done["status_message"], done
    child = job(api, srv, "b2-score")
    assert "error_threshold exceeded: 1 files failed in mini-batches [5]" in log_text(api, srv, child["name"])


def test_refusals_name_the_field(api: httpx.Client, srv: RunningServer) -> None:
    base = f"{srv.ws_path}/batchEndpoints"
    assert api.put(f"{base}/e2e", json={"name": "e2e"}).status_code == 201
    bad = api.put(f"{base}/e2e/deployments/dep1", json={"compute": "nope", "code_configuration": {}})
    assert bad.status_code == 400 and bad.json()["error"]["target"].startswith("code_configuration")
    body = {"compute": "nope", "code_configuration": {"code": "codes/" + "0" * 64, "scoring_script": "s.py"}}
    bad = api.put(f"{base}/e2e/deployments/dep1", json=body)
    assert bad.status_code == 400 and bad.json()["error"]["target"] == "compute", bad.text
    bad = api.post(f"{base}/e2e/invoke", json={"input": "azureml:rows:1"})
    assert bad.status_code == 400 and "--deployment-name" in bad.json()["error"]["message"], bad.text
    assert api.delete(f"{base}/e2e").status_code == 204


def test_cli_lists_updates_and_deletes(api: httpx.Client, srv: RunningServer, project: Path) -> None:
    """After the invocations above: blue (default) and strict are on scorer."""
    assert [e["name"] for e in cli(srv, "batch-endpoint", "list")] == ["scorer"]
    listed = cli(srv, "batch-deployment", "list", "-e", "scorer")
    assert [d["name"] for d in listed] == ["blue", "strict"]
    shown = cli(srv, "batch-deployment", "show", "-n", "strict", "-e", "scorer")
    assert shown["error_threshold"] == 0 and shown["mini_batch_size"] == 1
    refused = api.delete(f"{srv.ws_path}/batchEndpoints/scorer/deployments/blue")
    assert refused.status_code == 409 and "--set-default" in refused.json()["error"]["message"]
    updated = cli(srv, "batch-endpoint", "update", "-n", "scorer", "--set", "defaults.deployment_name=strict")
    assert updated["defaults"] == {"deployment_name": "strict"}
    cli(srv, "batch-deployment", "delete", "-n", "blue", "-e", "scorer")
    cli(srv, "batch-endpoint", "delete", "-n", "scorer")
    assert api.get(f"{srv.ws_path}/batchEndpoints/scorer").status_code == 404
    assert job(api, srv, "b1")["status"] == "Completed"  # its jobs stay


ENV_SCORE = """\
import os, sys

def init():
    import toolz  # only the deployment's registered environment has it
    print("scoring with toolz in", os.path.dirname(toolz.__file__), flush=True)

def run(mini_batch):
    return [os.path.basename(path) for path in mini_batch]
"""


def test_a_registered_environment_is_pinned_and_its_scoring_job_runs_in_it(
    api: httpx.Client, srv: RunningServer, project: Path
) -> None:
    """``environment: azureml:batch-env@latest`` names an environment the CLI registered: the
    deployment pins its newest version (inline, as a job's), the scoring child's node builds it
    and the driver and the scoring script run in it; an unknown version is refused at once, with
    the field and the fix, not at invoke."""
    for version, doc in (("1", {"image": "python:3.11-slim"}), ("2", {"pip": ["toolz"]})):
        path = project / f"batch-env-{version}.yml"
        path.write_text(yaml.safe_dump({"name": "batch-env", **doc}))
        assert cli(srv, "environment", "create", "--file", str(path))["version"] == version
    cli(srv, "batch-endpoint", "create", "-n", "envscorer")
    (project / "envsrc").mkdir()
    (project / "envsrc" / "score.py").write_text(ENV_SCORE)
    code = {"code": "envsrc", "scoring_script": "score.py"}
    fields = {"endpoint_name": "envscorer", "code_configuration": code}
    unknown = deployment(project, "missing", **fields, environment="azureml:batch-env:7")
    done = subprocess.run(
        [sys.executable, "-m", "cloudlet", "batch-deployment", "create", "-f", str(unknown)],
        env=srv.cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "environment" in done.stderr, done.stderr
    assert "cloudlet environment create" in done.stderr, done.stderr
    assert api.get(f"{srv.ws_path}/batchEndpoints/envscorer/deployments/missing").status_code == 404

    spec = deployment(project, "green", **fields, environment="azureml:batch-env@latest", mini_batch_size=5)
    made = cli(srv, "batch-deployment", "create", "-f", str(spec))
    assert made["environment"] == {"name": "batch-env", "version": "2", "pip": ["toolz"]}, made
    invoke = ("batch-endpoint", "invoke", "-n", "envscorer", "--input", "rows", "--job-name", "b3")
    cli(srv, *invoke, cwd=project)
    finished_job = finished(api, srv, "b3")
    assert finished_job["status"] == "Completed", finished_job
    text = log_text(api, srv, "b3-score")
    assert "Preparing environment 'batch-env'" in text or "reused" in text, text
    assert "scoring with toolz in" in text and "/envs/" in text.split("scoring with toolz in", 1)[1], text
    assert "2 mini-batches scored, 0 failed" in text, text
    child = job(api, srv, "b3-score")
    assert child["environment"]["name"] == "batch-env" and child["environment"]["version"] == "2", child
    # an inline environment's local conda_file is read by the CLI and sent inline (as Azure ML's CLI)
    conda = {"name": "e", "dependencies": ["python=3.11", {"pip": ["toolz"]}]}
    (project / "conda.yml").write_text(yaml.safe_dump(conda))
    inline = {"image": "python:3.11-slim", "conda_file": "conda.yml"}
    made = cli(
        srv,
        "batch-deployment",
        "create",
        "-f",
        str(deployment(project, "inline", **fields, environment=inline)),
    )
    assert made["environment"] == {**inline, "conda_file": conda}, made
