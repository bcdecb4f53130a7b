"""``cloudlet azureml``: point existing Azure ML code (the official ``azure-ai-ml`` SDK) at cloudlet.

``eval "$(cloudlet azureml env)"`` sets what ``DefaultAzureCredential`` and the SDK read (the
cloud metadata URL, a CA bundle of the system's CAs and cloudlet's (``$CLOUDLET_HOME/ca-bundle.pem``),
the managed-identity endpoint and this CLI's credential);
``cloudlet azureml config --path config.json`` writes what ``MLClient.from_config`` reads.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated

import typer

from cloudlet.client._config import ConfigurationError
from cloudlet.nodekit.trust import write_bundle

app = typer.Typer(help="Point Azure ML code (azure-ai-ml) at this cloudlet.", no_args_is_help=True)
# Variables that would make DefaultAzureCredential pick another credential before the managed
# identity (a service principal, workload identity, Cloud Shell, Service Fabric).
CONFLICTING = (
    "AZURE_CLIENT_SECRET",
    "AZURE_CLIENT_CERTIFICATE_PATH",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_USERNAME",
    "MSI_ENDPOINT",
    "MSI_SECRET",
    "IDENTITY_SERVER_THUMBPRINT",
    "AZUREML_CURRENT_CLOUD",
)


def env_lines(https_endpoint: str, ca_file: str, credential: str) -> list[str]:
    base = https_endpoint.rstrip("/")
    values = {
        "ARM_CLOUD_METADATA_URL": f"{base}/metadata/endpoints",
        "REQUESTS_CA_BUNDLE": ca_file,
        "IDENTITY_ENDPOINT": f"{base}/msi/token",
        "IDENTITY_HEADER": credential,
        "AZUREML_RUN_POLLING_INTERVAL_MIN": "1",
        "AZUREML_RUN_POLLING_INTERVAL_MAX": "2",
    }
    return [f"unset {' '.join(CONFLICTING)}"] + [f"export {k}={shlex.quote(v)}" for k, v in values.items()]


@app.command("env")
def env_cmd(ctx: typer.Context) -> None:
    """Print the shell lines that point azure-ai-ml at cloudlet: eval "$(cloudlet azureml env)"."""
    cfg = ctx.obj.config
    if not cfg.https_endpoint or not cfg.ca_file:
        raise ConfigurationError(
            "no HTTPS endpoint configured: start the server (`cloudlet server`, which writes https_endpoint "
            "and ca_file to $CLOUDLET_HOME/config.json) or set CLOUDLET_HTTPS_ENDPOINT and CLOUDLET_CA_FILE"
        )
    if not cfg.api_key:
        raise ConfigurationError(
            "no credential configured: set CLOUDLET_API_KEY (an API key or `cloudlet auth token`)"
        )
    typer.echo("\n".join(env_lines(cfg.https_endpoint, str(_ca_bundle(cfg.home, cfg.ca_file)), cfg.api_key)))


def _ca_bundle(home: Path, ca_file: str) -> Path:
    """The system's CAs plus cloudlet's, so other HTTPS calls in that shell keep working."""
    try:
        ca_pem = Path(ca_file).read_text(encoding="utf-8")
    except OSError as exc:
        message = f"cannot read the server's CA {ca_file} (config.json ca_file or CLOUDLET_CA_FILE): {exc}"
        raise ConfigurationError(message) from exc
    target = home / "ca-bundle.pem"
    try:
        return write_bundle(target, ca_pem)
    except OSError as exc:
        message = f"cannot write {target} (set CLOUDLET_HOME to a folder you own): {exc}"
        raise ConfigurationError(message) from exc


@app.command("config")
def config_cmd(
    ctx: typer.Context,
    path: Annotated[
        Path, typer.Option("--path", help="File to write (a folder: FOLDER/config.json).")
    ] = Path("config.json"),
) -> None:
    """Write the config.json MLClient.from_config() reads (subscription, resource group, workspace: -w)."""
    cfg = ctx.obj.config
    target = path / "config.json" if path.is_dir() else path
    doc = {
        "subscription_id": cfg.require_subscription(),
        "resource_group": cfg.require_resource_group(),
        "workspace_name": cfg.require_workspace(),
    }
    target.write_text(json.dumps(doc, indent=2) + "\n")
    typer.echo(str(target))


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="azureml")
