"""``cloudlet azureml env`` and ``config``: what points azure-ai-ml at cloudlet, from config.json."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cloudlet.cli.main import app


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("CLOUDLET_ENDPOINT", "CLOUDLET_API_KEY", "CLOUDLET_HTTPS_ENDPOINT", "CLOUDLET_CA_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLOUDLET_HOME", str(tmp_path))
    config = {
        "endpoint": "http://127.0.0.1:8571",
        "https_endpoint": "https://127.0.0.1:8572",
        "ca_file": "/srv/cloudlet home/tls/ca.pem",
        "subscription_id": "sub-1",
        "resource_group": "default",
        "workspace": "default",
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "credentials").write_text(json.dumps({"api_key": "clk_secret"}))
    return tmp_path


def test_env_prints_what_default_azure_credential_and_the_sdk_read(home: Path) -> None:
    result = CliRunner().invoke(app, ["azureml", "env"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("unset ") and "AZURE_CLIENT_SECRET" in lines[0] and "MSI_ENDPOINT" in lines[0]
    exports = dict(shlex.split(line)[1].split("=", 1) for line in lines[1:])
    assert exports == {
        "ARM_CLOUD_METADATA_URL": "https://127.0.0.1:8572/metadata/endpoints",
        "REQUESTS_CA_BUNDLE": "/srv/cloudlet home/tls/ca.pem",  # quoted for the shell
        "IDENTITY_ENDPOINT": "https://127.0.0.1:8572/msi/token",
        "IDENTITY_HEADER": "clk_secret",
        "AZUREML_RUN_POLLING_INTERVAL_MIN": "1",
        "AZUREML_RUN_POLLING_INTERVAL_MAX": "2",
    }


def test_env_without_an_https_endpoint_says_how_to_get_one(home: Path) -> None:
    (home / "config.json").write_text(json.dumps({"endpoint": "http://127.0.0.1:8571"}))
    result = CliRunner().invoke(app, ["azureml", "env"])
    assert result.exit_code == 1 and "CLOUDLET_HTTPS_ENDPOINT" in result.output


def test_config_writes_what_from_config_reads(home: Path, tmp_path: Path) -> None:
    target = tmp_path / "project"
    target.mkdir()
    result = CliRunner().invoke(app, ["azureml", "config", "--path", str(target), "-w", "team-b"])
    assert result.exit_code == 0, result.output
    assert json.loads((target / "config.json").read_text()) == {
        "subscription_id": "sub-1",
        "resource_group": "default",
        "workspace_name": "team-b",
    }
