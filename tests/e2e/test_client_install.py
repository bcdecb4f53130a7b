"""Acceptance: `pip install cloudlet` gives a client and CLI without the server's dependencies.

A fresh environment gets the project's locked base dependencies only (no ``server`` extra, no dev
group), installed as a wheel, the way a user's laptop would; the CLI from it then works against a
real server, and ``cloudlet server`` says which extra it needs instead of a traceback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import RunningServer
from tests.jobs_helpers import served

ROOT = Path(__file__).resolve().parents[2]
# The locked base dependencies alone, from the cache the set-up filled.
DEPENDENCIES = ("--frozen", "--no-dev", "--no-install-project", "--offline", "--quiet")
SERVER_ONLY = ("fastapi", "uvicorn", "sqlalchemy", "alembic", "psycopg", "jupyterlab", "matplotlib")


@pytest.fixture(scope="module")
def client_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The base dependencies, then the project as a wheel built from this tree (uv's own
    project install would reuse a cached build: it keys it on pyproject.toml alone)."""
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    place = tmp_path_factory.mktemp("client")
    venv = place / "venv"
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv)}
    env.pop("VIRTUAL_ENV", None)
    python = str(venv / "bin" / "python")
    for step in (
        [uv, "sync", *DEPENDENCIES, "--python", sys.executable],
        [uv, "build", "--wheel", "--offline", "--quiet", "--out-dir", str(place / "dist")],
    ):
        done = subprocess.run(step, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{step}: {done.stderr}"
    wheels = [str(wheel) for wheel in (place / "dist").glob("cloudlet-*.whl")]
    install = [uv, "pip", "install", "--offline", "--no-deps", "--quiet", "--python", python, *wheels]
    done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return venv


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "client-install")


def test_the_base_dependencies_name_no_server_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = " ".join(project["dependencies"])
    assert not [name for name in SERVER_ONLY if name in base]
    assert "fastapi>=0.115" in project["optional-dependencies"]["server"]


def test_the_client_install_has_none_of_the_server_packages(client_env: Path) -> None:
    probe = "import importlib.util, sys; print([m for m in sys.argv[1:] if importlib.util.find_spec(m)])"
    found = subprocess.run(
        [str(client_env / "bin" / "python"), "-c", probe, *SERVER_ONLY, "cloudlet.client", "typer"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "['cloudlet.client', 'typer']"


def test_the_client_install_drives_a_server(client_env: Path, srv: RunningServer) -> None:
    cli = [str(client_env / "bin" / "cloudlet")]
    created = subprocess.run(
        [*cli, "compute", "create", "-n", "laptop", "--type", "amlcompute", "--size", "Standard_DS3_v2"],
        env=srv.cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert created.returncode == 0, created.stderr
    listed = subprocess.run(
        [*cli, "compute", "list"], env=srv.cli_env(), capture_output=True, text=True, timeout=60
    )
    assert listed.returncode == 0, listed.stderr
    assert '"laptop"' in listed.stdout


def test_the_server_command_names_the_extra(client_env: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [str(client_env / "bin" / "cloudlet"), "server", "--home", str(tmp_path), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "cloudlet[server]" in done.stderr
    assert "Traceback" not in done.stderr
