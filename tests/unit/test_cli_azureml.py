"""``cloudlet azureml env`` and ``config``: what points azure-ai-ml at cloudlet, from config.json."""

from __future__ import annotations

import datetime
import json
import shlex
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from typer.testing import CliRunner

from cloudlet.cli.main import app
from cloudlet.nodekit import trust


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("CLOUDLET_ENDPOINT", "CLOUDLET_API_KEY", "CLOUDLET_HTTPS_ENDPOINT", "CLOUDLET_CA_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLOUDLET_HOME", str(tmp_path))
    ca_file = tmp_path / "server home" / "tls" / "ca.pem"  # a space: quoted for the shell
    ca_file.parent.mkdir(parents=True)
    ca_file.write_bytes(_self_signed_ca())
    config = {
        "endpoint": "http://127.0.0.1:8571",
        "https_endpoint": "https://127.0.0.1:8572",
        "ca_file": str(ca_file),
        "subscription_id": "sub-1",
        "resource_group": "default",
        "workspace": "default",
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "credentials").write_text(json.dumps({"api_key": "clk_secret"}))
    return tmp_path


def _self_signed_ca() -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test cloudlet CA")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def test_env_prints_what_default_azure_credential_and_the_sdk_read(home: Path) -> None:
    result = CliRunner().invoke(app, ["azureml", "env"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("unset ") and "AZURE_CLIENT_SECRET" in lines[0] and "MSI_ENDPOINT" in lines[0]
    exports = dict(shlex.split(line)[1].split("=", 1) for line in lines[1:])
    assert exports == {
        "ARM_CLOUD_METADATA_URL": "https://127.0.0.1:8572/metadata/endpoints",
        "REQUESTS_CA_BUNDLE": str(home / "ca-bundle.pem"),
        "IDENTITY_ENDPOINT": "https://127.0.0.1:8572/msi/token",
        "IDENTITY_HEADER": "clk_secret",
        "AZUREML_RUN_POLLING_INTERVAL_MIN": "1",
        "AZUREML_RUN_POLLING_INTERVAL_MAX": "2",
    }


def test_env_trusts_the_system_cas_beside_cloudlets(home: Path) -> None:
    """REQUESTS_CA_BUNDLE replaces requests' trust store: cloudlet's CA alone breaks pip and every other
    HTTPS call in that shell, so the bundle holds the system's CAs too."""
    result = CliRunner().invoke(app, ["azureml", "env"])
    assert result.exit_code == 0, result.output
    system = trust.system_bundle_path()
    assert system is not None, "this machine has no system CA bundle (ca-certificates)"
    expected = ssl.create_default_context(cafile=str(system)).cert_store_stats()["x509_ca"] + 1
    bundle = ssl.create_default_context(cafile=str(home / "ca-bundle.pem"))
    assert bundle.cert_store_stats()["x509_ca"] == expected
    cloudlet_ca = json.loads((home / "config.json").read_text())["ca_file"]
    assert Path(cloudlet_ca).read_text().strip() in (home / "ca-bundle.pem").read_text()


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


def test_an_instance_home_trusts_the_system_cas_beside_cloudlets(tmp_path: Path) -> None:
    from cloudlet.agent import home as agent_home

    ca = _self_signed_ca().decode()
    agent_home.azureml_files(tmp_path, {"CLOUDLET_AZUREML_CA": ca})
    bundle = tmp_path / agent_home.CA_FILE
    system = trust.system_bundle_path()
    assert system is not None
    expected = ssl.create_default_context(cafile=str(system)).cert_store_stats()["x509_ca"] + 1
    assert ssl.create_default_context(cafile=str(bundle)).cert_store_stats()["x509_ca"] == expected
