"""The README's serving walkthrough: ``examples/endpoints/online`` (a managed online endpoint in the
shape of Azure's managed sample) and ``examples/endpoints/batch`` (a batch endpoint in today's
modelBatchDeployment shape), run with the commands the README gives, a subprocess each, against a
real server with real agents and replicas."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import RunningServer
from tests.jobs_helpers import served

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "endpoints"
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "endpoint-examples")


def cloudlet(srv: RunningServer, *args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "cloudlet", *args],
        env={**srv.cli_env(), "COLUMNS": "400"},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 0, f"cloudlet {' '.join(args)}\n{done.stderr}\n{done.stdout}"
    return done.stdout


def test_the_online_example_serves_its_model(srv: RunningServer) -> None:
    cloudlet(srv, "online-endpoint", "create", "-f", str(EXAMPLES / "online" / "endpoint.yml"))
    deployment = str(EXAMPLES / "online" / "blue-deployment.yml")
    cloudlet(srv, "online-deployment", "create", "-f", deployment, "--all-traffic")
    request = str(EXAMPLES / "online" / "sample-request.json")
    answer = json.loads(
        cloudlet(srv, "online-endpoint", "invoke", "-n", "my-endpoint", "--request-file", request)
    )
    model = json.loads((EXAMPLES / "online" / "model" / "model.json").read_text())
    rows = json.loads((EXAMPLES / "online" / "sample-request.json").read_text())["data"]
    expected = [
        model["intercept"] + sum(w * x for w, x in zip(model["coefficients"], row, strict=True))
        for row in rows
    ]
    assert answer == pytest.approx(expected), answer
    uri = cloudlet(srv, "online-endpoint", "show", "-n", "my-endpoint", "--query", "scoring_uri", "-o", "tsv")
    assert uri.strip().endswith("/my-endpoint/score"), uri


def test_the_batch_example_scores_a_folder(srv: RunningServer, tmp_path: Path) -> None:
    cloudlet(
        srv,
        "compute",
        "create",
        "-n",
        "batch-cluster",
        "--type",
        "amlcompute",
        "--min-instances",
        "0",
        "--max-instances",
        "2",
    )
    batch = EXAMPLES / "batch"
    cloudlet(srv, "batch-endpoint", "create", "-f", str(batch / "endpoint.yml"))
    cloudlet(srv, "batch-deployment", "create", "-f", str(batch / "deployment.yml"), "--set-default")
    job = cloudlet(
        srv,
        "batch-endpoint",
        "invoke",
        "-n",
        "thresholds",
        "--input",
        str(batch / "data"),
        "--query",
        "name",
        "-o",
        "tsv",
    ).strip()
    assert job, "invoke printed the job's name"
    cloudlet(srv, "job", "stream", "-n", job)
    assert cloudlet(srv, "job", "show", "-n", job, "--query", "status", "-o", "tsv").strip() == "Completed"
    cloudlet(srv, "job", "download", "-n", job, "--output-name", "score", "--download-path", str(tmp_path))
    found = list(tmp_path.rglob("predictions.csv"))
    assert len(found) == 1, list(tmp_path.rglob("*"))
    # append_row writes each row's values separated by a space, as Azure's batch scoring does.
    rows = {row[0]: row[1:] for row in (line.split() for line in found[0].read_text().splitlines())}
    assert rows == {
        "a.csv": ["0.2", "0"],
        "b.csv": ["0.85", "1"],
        "c.csv": ["0.567", "1"],
        "d.csv": ["0.05", "0"],
    }, found[0].read_text()
