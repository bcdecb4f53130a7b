"""``cloudlet batch-endpoint …`` and ``cloudlet batch-deployment …``, as ``az ml batch-endpoint`` and
``az ml batch-deployment``: create|show|list|update|delete, ``invoke`` (a batch scoring job over a
data asset, a datastore URI or a local folder/file, uploaded first) and ``list-jobs``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from cloudlet.cli.az_flags import NoWaitOpt, YesOpt
from cloudlet.cli.compute import build_body, load_yaml_file, state
from cloudlet.cli.output import COLUMNS, err_console
from cloudlet.client._config import ConfigurationError
from cloudlet.client.batch_endpoints import BatchDeploymentOperations, BatchEndpointOperations
from cloudlet.client.operations import _Scope

endpoint_app = typer.Typer(help="Batch endpoints: score data on a cluster (like `az ml batch-endpoint`).")
deployment_app = typer.Typer(help="Batch deployments of a batch endpoint (like `az ml batch-deployment`).")

COLUMNS.setdefault(
    "batch-endpoint",
    [
        ("NAME", lambda d: d.get("name")),
        ("DEFAULT DEPLOYMENT", lambda d: (d.get("defaults") or {}).get("deployment_name")),
        ("SCORING URI", lambda d: d.get("scoring_uri")),
    ],
)
COLUMNS.setdefault(
    "batch-deployment",
    [
        ("NAME", lambda d: d.get("name")),
        ("ENDPOINT", lambda d: d.get("endpoint_name")),
        ("COMPUTE", lambda d: d.get("compute")),
        ("MINI BATCH", lambda d: d.get("mini_batch_size")),
        ("CONCURRENCY", lambda d: d.get("max_concurrency_per_instance")),
        ("OUTPUT", lambda d: d.get("output_action")),
    ],
)

FileOpt = Annotated[str | None, typer.Option("-f", "--file", help="A CLI v2 YAML file (- for stdin).")]
NameOpt = Annotated[str | None, typer.Option("-n", "--name", help="Name (overrides the file's).")]
EndpointOpt = Annotated[str | None, typer.Option("-e", "--endpoint-name", help="The batch endpoint.")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="KEY.PATH=VALUE, repeatable.")]


def _endpoints(ctx: typer.Context) -> BatchEndpointOperations:
    st = state(ctx)
    return BatchEndpointOperations(st.rest, _Scope(st.config))


def _deployments(ctx: typer.Context) -> BatchDeploymentOperations:
    st = state(ctx)
    return BatchDeploymentOperations(st.rest, _Scope(st.config))


def _body(file: str | None, sets: list[str] | None, name: str | None, what: str) -> dict[str, Any]:
    doc = load_yaml_file(file, what) if file else {}
    try:
        body = build_body(doc, sets, None, name)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from exc
    if not body.get("name"):
        raise ConfigurationError(f"give the {what}'s name: -n/--name or name: in --file")
    return body


def _base(file: str | None) -> Path:
    return Path.cwd() if file in (None, "-") else Path(str(file)).resolve().parent


# -- batch-endpoint --------------------------------------------------------------------------
def _write_endpoint(ctx: typer.Context, file: str | None, name: str | None, sets: list[str] | None) -> None:
    body = _body(file, sets, name, "batch endpoint")
    state(ctx).emit(_endpoints(ctx).create_or_update(body)._to_dict(), "batch-endpoint")


@endpoint_app.command("create")
def endpoint_create(
    ctx: typer.Context,
    file: FileOpt = None,
    name: NameOpt = None,
    set_: SetOpt = None,
    no_wait: NoWaitOpt = False,
) -> None:
    """Create a batch endpoint."""
    _write_endpoint(ctx, file, name, set_)


@endpoint_app.command("update")
def endpoint_update(
    ctx: typer.Context, file: FileOpt = None, name: NameOpt = None, set_: SetOpt = None
) -> None:
    """Replace a batch endpoint's document (e.g. --set defaults.deployment_name=blue)."""
    ops = _endpoints(ctx)
    if name and not file:  # --set on the current document
        current = {
            k: v
            for k, v in ops.get(name)._to_dict().items()
            if k in ("name", "description", "tags", "defaults")
        }
        body = build_body(current, set_, None, name)
        state(ctx).emit(ops.create_or_update(body)._to_dict(), "batch-endpoint")
        return
    _write_endpoint(ctx, file, name, set_)


@endpoint_app.command("show")
def endpoint_show(ctx: typer.Context, name: Annotated[str, typer.Option("-n", "--name")]) -> None:
    """Show a batch endpoint."""
    state(ctx).emit(_endpoints(ctx).get(name)._to_dict(), "batch-endpoint")


@endpoint_app.command("list")
def endpoint_list(ctx: typer.Context) -> None:
    """List the workspace's batch endpoints."""
    state(ctx).emit([e._to_dict() for e in _endpoints(ctx).list()], "batch-endpoint")


@endpoint_app.command("delete")
def endpoint_delete(
    ctx: typer.Context,
    name: Annotated[str, typer.Option("-n", "--name")],
    yes: YesOpt = False,
    no_wait: NoWaitOpt = False,
) -> None:
    """Delete a batch endpoint and its deployments (its jobs stay)."""
    _endpoints(ctx).delete(name)
    err_console.print(f"deleted batch endpoint {escape(name)}", highlight=False)


@endpoint_app.command("invoke")
def endpoint_invoke(
    ctx: typer.Context,
    name: Annotated[str, typer.Option("-n", "--name", help="The batch endpoint.")],
    input_: Annotated[
        str | None,
        typer.Option("--input", help="A data asset (azureml:d:1), a datastore URI, or a local path."),
    ] = None,
    input_type: Annotated[str | None, typer.Option("--input-type", help="uri_folder or uri_file.")] = None,
    deployment_name: Annotated[
        str | None, typer.Option("-d", "--deployment-name", help="Not the default deployment.")
    ] = None,
    job_name: Annotated[str | None, typer.Option("--job-name", help="The job's name.")] = None,
    mini_batch_size: Annotated[
        int | None, typer.Option("--mini-batch-size", help="Files per mini-batch, for this job only.")
    ] = None,
    instance_count: Annotated[
        int | None,
        typer.Option(
            "--instance-count", help="Instances, for this job only (recorded; a batch job runs on one node)."
        ),
    ] = None,
    output_path: Annotated[
        str | None,
        typer.Option(
            "--output-path", help="Write the predictions to azureml://datastores/<ds>/paths/<folder>/."
        ),
    ] = None,
    file: Annotated[
        str | None,
        typer.Option(
            "-f", "--file", help="A YAML of the invocation: inputs:, outputs:, settings to override."
        ),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="FIELD=VALUE of the invocation (output_file_name=…), repeatable."),
    ] = None,
) -> None:
    """Score INPUT: submits a batch job (its child's output `score` holds the predictions). The
    flags, --file and --set override the deployment's settings for this one job."""
    doc = invocation_from_file(load_yaml_file(file, "batch invocation"), _base(file)) if file else {}
    flags = {
        "input": input_,
        "input_type": input_type,
        "deployment_name": deployment_name,
        "job_name": job_name,
        "mini_batch_size": mini_batch_size,
        "instance_count": instance_count,
        "output_path": output_path,
    }
    try:
        body = build_body(doc, set_, flags)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from exc
    if not body.get("input"):
        raise ConfigurationError("give what to score: --input, or inputs: in --file")
    job = _endpoints(ctx).invoke(name, **body)
    state(ctx).emit(job._to_dict(), "job")


def invocation_from_file(doc: dict[str, Any], base: Path) -> dict[str, Any]:
    """An invocation YAML (``az ml batch-endpoint invoke --file``) as the invocation's fields:
    its one data input (``inputs: {<name>: {type, path}}``, a local path relative to the file) as
    ``input``/``input_type``, its one output's ``path`` as ``output_path``; the rest as it is."""
    body = {k: v for k, v in doc.items() if k not in ("inputs", "outputs")}
    inputs = doc.get("inputs") or {}
    if not isinstance(inputs, dict) or len(inputs) > 1:
        raise ConfigurationError(
            "inputs: a model deployment scores one data input: give one (inputs: {data: {type: uri_folder, "
            "path: …}})"
        )
    for key, value in inputs.items():
        value = value if isinstance(value, dict) else {"path": value}
        if value.get("type", "uri_folder") not in ("uri_folder", "uri_file") or not value.get("path"):
            raise ConfigurationError(f"inputs.{key}: a uri_folder or uri_file with a path")
        path = str(value["path"])
        local = not re.match(r"^(azureml:|https?://|wasbs?://|abfss?://)", path)
        body["input"] = str((base / path).resolve()) if local else path
        body["input_type"] = value.get("type", "uri_folder")
    outputs = doc.get("outputs") or {}
    if not isinstance(outputs, dict) or len(outputs) > 1:
        raise ConfigurationError("outputs: a model deployment's batch job has one output (score)")
    for key, value in outputs.items():
        if isinstance(value, dict) and value.get("path"):
            body["output_path"] = str(value["path"])
        elif not isinstance(value, dict):
            raise ConfigurationError(f"outputs.{key}: a mapping (type, path)")
    return body


@endpoint_app.command("list-jobs")
def endpoint_list_jobs(ctx: typer.Context, name: Annotated[str, typer.Option("-n", "--name")]) -> None:
    """The endpoint's batch jobs, newest first."""
    state(ctx).emit([j._to_dict() for j in _endpoints(ctx).list_jobs(name)], "job")


# -- batch-deployment ------------------------------------------------------------------------
def _write_deployment(
    ctx: typer.Context,
    file: str | None,
    name: str | None,
    endpoint: str | None,
    sets: list[str] | None,
    set_default: bool,
) -> None:
    body = _body(file, sets, name, "batch deployment")
    ops = _deployments(ctx)
    made = ops.create_or_update(body, endpoint_name=endpoint, set_default=set_default, base_path=_base(file))
    for upload in ops.last_uploads:
        said = "unchanged, already on the server" if upload.skipped else f"uploaded {upload.size} B"
        err_console.print(f"{escape(upload.local_path)}: {said} ({escape(upload.uri)})", highlight=False)
    state(ctx).emit(made._to_dict(), "batch-deployment")


DefaultOpt = Annotated[bool, typer.Option("--set-default", help="Make it the endpoint's default deployment.")]


@deployment_app.command("create")
def deployment_create(
    ctx: typer.Context,
    file: FileOpt = None,
    name: NameOpt = None,
    endpoint_name: EndpointOpt = None,
    set_default: DefaultOpt = False,
    set_: SetOpt = None,
    no_wait: NoWaitOpt = False,
) -> None:
    """Create a batch deployment (its local code is uploaded once)."""
    _write_deployment(ctx, file, name, endpoint_name, set_, set_default)


@deployment_app.command("update")
def deployment_update(
    ctx: typer.Context,
    file: FileOpt = None,
    name: NameOpt = None,
    endpoint_name: EndpointOpt = None,
    set_default: DefaultOpt = False,
    set_: SetOpt = None,
) -> None:
    """Replace a batch deployment's document."""
    _write_deployment(ctx, file, name, endpoint_name, set_, set_default)


@deployment_app.command("show")
def deployment_show(
    ctx: typer.Context,
    name: Annotated[str, typer.Option("-n", "--name")],
    endpoint_name: Annotated[str, typer.Option("-e", "--endpoint-name")],
) -> None:
    """Show a batch deployment."""
    state(ctx).emit(_deployments(ctx).get(name, endpoint_name)._to_dict(), "batch-deployment")


@deployment_app.command("list")
def deployment_list(
    ctx: typer.Context, endpoint_name: Annotated[str, typer.Option("-e", "--endpoint-name")]
) -> None:
    """List a batch endpoint's deployments."""
    state(ctx).emit([d._to_dict() for d in _deployments(ctx).list(endpoint_name)], "batch-deployment")


@deployment_app.command("delete")
def deployment_delete(
    ctx: typer.Context,
    name: Annotated[str, typer.Option("-n", "--name")],
    endpoint_name: Annotated[str, typer.Option("-e", "--endpoint-name")],
    yes: YesOpt = False,
    no_wait: NoWaitOpt = False,
) -> None:
    """Delete a batch deployment (not the endpoint's default)."""
    _deployments(ctx).delete(name, endpoint_name)
    err_console.print(f"deleted batch deployment {escape(endpoint_name)}/{escape(name)}", highlight=False)


@deployment_app.command("list-jobs")
def deployment_list_jobs(
    ctx: typer.Context,
    name: Annotated[str, typer.Option("-n", "--name")],
    endpoint_name: Annotated[str, typer.Option("-e", "--endpoint-name")],
) -> None:
    """The deployment's batch jobs, newest first."""
    jobs = [j._to_dict() for j in _endpoints(ctx).list_jobs(endpoint_name)]
    state(ctx).emit([j for j in jobs if (j.get("tags") or {}).get("batch_deployment") == name], "job")


def register(root: typer.Typer) -> None:
    root.add_typer(endpoint_app, name="batch-endpoint")
    root.add_typer(deployment_app, name="batch-deployment")
