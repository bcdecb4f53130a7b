"""Acceptance (issue 25, causes 1 and 6a): environments in the shapes of Azure ML's samples, built
as Azure builds them, through ``cloudlet job create -f F`` against a real server and real agents.

- an ``image:`` job (hello-notebook.yml's shape) has ``pip`` and ``python`` on its PATH, and
  ``pip install`` goes into the run's own venv (from the index configured on the node);
- a conda file's conda packages (outside ``pip:``) are installed, mapped to PyPI; one with no PyPI
  counterpart and a ``python=`` pin this host lacks are warned about at submission, by name;
  ``pkg_resources`` imports (pip, setuptools and wheel, as in a conda environment);
- an inline ``environment: build: path:`` is read as environment assets read it; a context with
  only a Dockerfile is refused saying why (no Docker or Podman here) and what to do;
- a retired curated name runs on its successor, with a warning.

The files are in the samples' shapes (tests/data/azureml_environments/), small packages only.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RunningServer
from tests.jobs_helpers import served

DATA = Path(__file__).resolve().parents[1] / "data" / "azureml_environments"


# A second interpreter the host lists for its nodes (a pyenv build, where this machine has one).
PYTHON_310 = next(iter(sorted(Path("/root/.pyenv/versions").glob("3.10.*/bin/python3.10"))), None)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Nodes reach PyPI as configured on this host (as the curated-environment test's do)."""
    env = {"CLOUDLET_PYTHONS": str(PYTHON_310)} if PYTHON_310 else {}
    yield from served(tmp_path_factory, "azureml-environments", extra_env=env)


def cli(srv: RunningServer, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cloudlet", *args],
        env={**srv.cli_env(), "COLUMNS": "400"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, (
        f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    )
    return result


def streamed(srv: RunningServer, file: Path) -> tuple[str, str, str]:
    """``job create -f FILE --stream``: (job name, its log, what the CLI said on stderr)."""
    done = ok(cli(srv, "job", "create", "-f", str(file), "--stream"))
    match = re.search(r"job (\S+) submitted", done.stderr)
    assert match is not None, done.stderr
    assert "Completed" in done.stdout.strip().splitlines()[-1], done.stdout
    return match.group(1), done.stdout, done.stderr


def shown(srv: RunningServer, name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(ok(cli(srv, "job", "show", "-n", name)).stdout)
    return body


def test_an_image_jobs_command_pip_installs_what_it_needs(srv: RunningServer) -> None:
    _, log, _ = streamed(srv, DATA / "hello-notebook-pip.yml")
    assert "image library/python:3.11.6 requested" in log and "using a venv with pip" in log
    assert re.search(r"six 1\.16\.0 from /\S+/\.cloudlet-venv\n", log), log


def test_a_conda_files_conda_packages_are_installed_and_what_differs_is_warned(srv: RunningServer) -> None:
    name, log, said = streamed(srv, DATA / "conda-job" / "job.yml")
    assert "conda deps import on" in log, log
    warnings = shown(srv, name).get("warnings") or []
    assert any("cudatoolkit" in w and "no PyPI counterpart" in w for w in warnings), warnings
    assert any(
        "pins Python 3.8" in w and f"Python {sys.version_info[0]}.{sys.version_info[1]}" in w
        for w in warnings
    ), warnings
    assert "cudatoolkit" in said  # said at submission, before the build
    # PyYAML and python-dateutil came from the conda list (mapped), six from its pip list.
    built = log[log.index("Preparing environment") :].splitlines()[0]
    assert "PyYAML==6.0.*" in built and "python-dateutil" in built and "setuptools<81" in built, built


@pytest.mark.skipif(PYTHON_310 is None, reason="no Python 3.10 on this machine to list")
def test_a_pinned_python_the_node_lists_is_the_one_the_environment_is_built_on(srv: RunningServer) -> None:
    name, log, said = streamed(srv, DATA / "conda-job" / "job-py310.yml")
    assert "pinned python 3.10\n" in log, log
    assert "warning" not in said and not shown(srv, name).get("warnings"), said


def test_an_inline_build_context_is_read_as_environment_assets_read_it(srv: RunningServer) -> None:
    name, log, _ = streamed(srv, DATA / "build-job.yml")
    assert "built from the context 1.16.0" in log, log
    assert shown(srv, name)["environment"]["image"] == "python:3.11-slim"  # its Dockerfile's FROM


def test_a_dockerfile_only_context_is_refused_saying_why_and_what_to_do(srv: RunningServer) -> None:
    refused = cli(srv, "job", "create", "-f", str(DATA / "build-only-dockerfile.yml"))
    assert refused.returncode != 0
    said = refused.stderr + refused.stdout
    assert "environment.build.path" in said and "Docker or Podman" in said, said
    assert "requirements.txt" in said and "conda_file" in said, said


def test_a_retired_curated_name_is_accepted_on_its_successor_with_a_warning(srv: RunningServer) -> None:
    done = ok(cli(srv, "job", "create", "-f", str(DATA / "retired-curated.yml")))
    assert "retired" in done.stderr and "lightgbm-3.3" in done.stderr, done.stderr
    job = json.loads(done.stdout)
    assert any("retired" in w for w in job["warnings"]), job
    ok(cli(srv, "job", "cancel", "-n", job["name"]))  # its build (LightGBM, xgboost …) is not the point


def test_a_build_context_sent_to_the_server_itself_is_refused_naming_the_field(srv: RunningServer) -> None:
    job = {"command": "echo hi", "environment": {"build": {"path": "docker-context"}}}
    with srv.client() as api:
        refused = api.put(f"{srv.ws_path}/jobs/env-build-direct", json=job)
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["target"] == "environment.build" and "Docker or Podman" in error["message"], error
        assert api.get(f"{srv.ws_path}/jobs/env-build-direct").status_code == 404  # nothing half-created
