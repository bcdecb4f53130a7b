"""Issue 25: an environment with a Docker build context registered through the azure-ai-ml SDK
(``Environment(build=BuildContext(path=…))``): the SDK uploads the context to the workspace's
datastore and sends its URI; cloudlet builds it as the CLI does (the context's requirements.txt
or conda file, on the Dockerfile's base image's Python), and a job runs in it. A context that only
a Docker build can make (no requirements.txt or conda file) is refused, saying that no node here
has Docker or Podman and what to do instead; nothing is registered."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.azureml_helpers import azureml_env, run_sdk, sdk_python
from tests.conftest import RunningServer
from tests.jobs_helpers import log_text, served, submit, wait_job

SDK_SCRIPT = r"""
import json
from azure.ai.ml import MLClient
from azure.ai.ml.entities import BuildContext, Environment
from azure.core.exceptions import HttpResponseError
from azure.identity import DefaultAzureCredential

ml = MLClient.from_config(DefaultAzureCredential())
env = ml.environments.create_or_update(Environment(name="ctx-env", build=BuildContext(path="docker-context")))
made = {"step": "made", "version": env.version, "image": env.image}
print("RESULT " + json.dumps(made), flush=True)
try:
    ml.environments.create_or_update(Environment(name="docker-only", build=BuildContext(path="docker-only")))
    print("RESULT " + json.dumps({"step": "refused", "error": None}), flush=True)
except HttpResponseError as exc:
    print("RESULT " + json.dumps({"step": "refused", "error": str(exc)}), flush=True)
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "env-build", extra_env={"CLOUDLET_INSTANCE_APPS": ""})


def test_an_sdk_build_context_is_registered_and_a_docker_only_one_refused(
    srv: RunningServer, tmp_path: Path
) -> None:
    sdk_python()
    context = tmp_path / "docker-context"
    context.mkdir()
    (context / "Dockerfile").write_text(
        "FROM python:3.11-slim\nCOPY requirements.txt .\nRUN pip install -r requirements.txt\n"
    )
    (context / "requirements.txt").write_text("toolz  # the scoring helpers\n")
    docker_only = tmp_path / "docker-only"
    docker_only.mkdir()
    (docker_only / "Dockerfile").write_text(
        "FROM ubuntu:22.04\nRUN apt-get update && apt-get install -y jq\n"
    )
    config = ("azureml", "config", "--path", str(tmp_path / "config.json"))
    subprocess.run([sys.executable, "-m", "cloudlet", *config], env=srv.cli_env(), check=True)
    made, refused = run_sdk(SDK_SCRIPT, tmp_path, azureml_env(srv.cli_env()), timeout=300)
    assert made["version"] == "1" and made["image"] == "python:3.11-slim", made
    assert refused["error"] and "Docker or Podman" in refused["error"], refused
    assert "requirements.txt or conda file" in refused["error"], refused
    with srv.client() as api:
        versions = f"{srv.ws_path}/environments/ctx-env/versions/1"
        assert api.get(versions).json()["pip"] == ["toolz"]
        assert api.get(f"{srv.ws_path}/environments/docker-only/versions/1").status_code == 404
        script = "import sys, toolz; print('toolz from', toolz.__file__, 'on', sys.version_info[:2])"
        submit(
            api,
            srv,
            "ctx-job",
            {"command": f'python -c "{script}"', "environment": "azureml:ctx-env:1", "compute": "local"},
        )
        done = wait_job(api, srv, "ctx-job", timeout=300)
        log = log_text(api, srv, "ctx-job")
    assert done["status"] == "Completed", (done, log)
    assert "toolz from" in log and "/envs/" in log.split("toolz from", 1)[1], log
