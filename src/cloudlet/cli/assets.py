"""``cloudlet data|model|environment …``: create (uploading local paths once), list, show, archive,
restore, delete — as ``az ml data|model|environment``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from cloudlet.cli.az_flags import RegistryOpt, YesOpt, no_registries
from cloudlet.cli.compute import build_body, load_yaml_file, state
from cloudlet.cli.output import COLUMNS, err_console
from cloudlet.client._config import ConfigurationError
from cloudlet.client.assets import (
    DataOperations,
    EnvironmentOperations,
    ModelOperations,
    _AssetOperations,
)
from cloudlet.client.components import ComponentOperations
from cloudlet.client.operations import _Scope
from cloudlet.domain.jobs.job_paths import is_remote_path

OPERATIONS: dict[str, type[_AssetOperations]] = {
    "data": DataOperations,
    "model": ModelOperations,
    "environment": EnvironmentOperations,
    "component": ComponentOperations,
}
HELP = {
    "data": "Data assets: uri_file, uri_folder, mltable (like `az ml data`).",
    "model": "Models: custom_model, mlflow_model, triton_model (like `az ml model`).",
    "environment": "Environments: conda file, pip requirements, image (like `az ml environment`).",
    "component": "Command components: a command with typed inputs and outputs (like `az ml component`).",
}


def _created(doc: dict[str, Any]) -> Any:
    context = doc.get("creation_context")
    return context.get("created_at") if isinstance(context, dict) else None


def _what(doc: dict[str, Any]) -> Any:
    if doc.get("image"):
        return doc["image"]
    if doc.get("pip") or doc.get("conda_file"):
        return "conda/pip"
    return doc.get("path")


COLUMNS.setdefault(
    "component",
    [
        ("NAME", lambda d: d.get("name")),
        ("VERSION", lambda d: d.get("version")),
        ("DISPLAY NAME", lambda d: d.get("display_name")),
        ("ARCHIVED", lambda d: d.get("is_archived")),
        ("INPUTS", lambda d: ", ".join(d.get("inputs") or {})),
        ("OUTPUTS", lambda d: ", ".join(d.get("outputs") or {})),
        ("CREATED", _created),
    ],
)
for _kind in OPERATIONS:
    COLUMNS.setdefault(
        _kind,
        [
            ("NAME", lambda d: d.get("name")),
            ("VERSION", lambda d: d.get("version")),
            ("TYPE", lambda d: d.get("type")),
            ("ARCHIVED", lambda d: d.get("is_archived")),
            ("PATH" if _kind != "environment" else "DEFINITION", _what),
            ("CREATED", _created),
        ],
    )


def _describe_upload(upload: Any) -> str:
    if upload.skipped:
        return f"{upload.local_path}: unchanged, already on the server ({upload.uri})"
    return f"{upload.local_path}: uploaded {upload.size} B → {upload.uri}"


NameOpt = Annotated[str, typer.Option("-n", "--name", help="The asset's name.")]
VersionOpt = Annotated[str | None, typer.Option("-v", "--version", help="A version.")]
LabelOpt = Annotated[str | None, typer.Option("-l", "--label", help="latest")]
FileOpt = Annotated[str | None, typer.Option("-f", "--file", help="A CLI v2 YAML file (- for stdin).")]


def make_app(kind: str) -> typer.Typer:
    app = typer.Typer(help=HELP[kind], no_args_is_help=True)

    def operations(ctx: typer.Context) -> _AssetOperations:
        st = state(ctx)
        return OPERATIONS[kind](st.rest, _Scope(st.config))

    def _version(version: str | None, label: str | None) -> str | None:
        if version is not None and label is not None:
            raise ConfigurationError("give --version or --label, not both")
        if label is not None and label != "latest":
            raise ConfigurationError("the only label is 'latest'")
        return version

    @app.command("create")
    def create(
        ctx: typer.Context,
        file: FileOpt = None,
        name: Annotated[str | None, typer.Option("-n", "--name", help="Name (overrides the file's).")] = None,
        version: Annotated[
            str | None, typer.Option("-v", "--version", help="Version (default: next).")
        ] = None,
        path: Annotated[
            str | None, typer.Option("-p", "--path", help="Local path or URI (data and models).")
        ] = None,
        type_: Annotated[str | None, typer.Option("-t", "--type", help="Type (data and models).")] = None,
        image: Annotated[str | None, typer.Option("-i", "--image", help="Image (environments).")] = None,
        conda_file: Annotated[
            str | None, typer.Option("--conda-file", help="Conda file (environments).")
        ] = None,
        description: Annotated[str | None, typer.Option("-d", "--description", help="Description.")] = None,
        set_: Annotated[list[str] | None, typer.Option("--set", help="KEY.PATH=VALUE, repeatable.")] = None,
        build_context: Annotated[
            str | None, typer.Option("--build-context", help="A Docker build context folder (environments).")
        ] = None,
        dockerfile_path: Annotated[
            str | None, typer.Option("--dockerfile-path", help="The Dockerfile in --build-context.")
        ] = None,
        registry_name: RegistryOpt = None,
    ) -> None:
        """Create a version (local paths are uploaded once, content-hashed)."""
        no_registries(registry_name)
        st = state(ctx)
        doc = load_yaml_file(file, kind) if file else {}
        doc.pop("$schema", None)
        base = Path.cwd() if file in (None, "-") else Path(str(file)).resolve().parent
        fields: dict[str, Any] = {"version": version, "description": description}
        if kind == "environment":
            fields.update({"image": image, "conda_file": conda_file})
            if conda_file:
                fields["conda_file"] = str((Path.cwd() / conda_file).resolve())
            if build_context:  # az's flags for an environment's build: {path, dockerfile_path}
                build = {"path": str((Path.cwd() / build_context).resolve())}
                fields["build"] = build | ({"dockerfile_path": dockerfile_path} if dockerfile_path else {})
        else:
            fields.update({"type": type_})
            if path:
                fields["path"] = path if is_remote_path(path) else str((Path.cwd() / path).resolve())
        try:
            body = build_body(doc, set_, fields, name)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from exc
        ops = operations(ctx)
        created = ops.create_or_update(body, base_path=base)
        for upload in ops.last_uploads:
            err_console.print(escape(_describe_upload(upload)), highlight=False)
        st.emit(created._to_dict(), kind)

    @app.command("show")
    def show(
        ctx: typer.Context,
        name: NameOpt,
        version: VersionOpt = None,
        label: LabelOpt = None,
        registry_name: RegistryOpt = None,
    ) -> None:
        """Show a version (the latest without --version)."""
        no_registries(registry_name)
        st = state(ctx)
        st.emit(operations(ctx).get(name, _version(version, label))._to_dict(), kind)

    @app.command("list")
    def list_(
        ctx: typer.Context,
        name: Annotated[str | None, typer.Option("-n", "--name", help="List this name's versions.")] = None,
        archived_only: Annotated[bool, typer.Option("--archived-only", help="Only archived.")] = False,
        include_archived: Annotated[bool, typer.Option("--include-archived", help="Archived too.")] = False,
        registry_name: RegistryOpt = None,
    ) -> None:
        """Each name's latest version, or one name's versions (archived ones hidden)."""
        no_registries(registry_name)
        st = state(ctx)
        view = "archived_only" if archived_only else "all" if include_archived else "active_only"
        st.emit([a._to_dict() for a in operations(ctx).list(name, list_view_type=view)], kind)

    @app.command("archive")
    def archive(
        ctx: typer.Context,
        name: NameOpt,
        version: VersionOpt = None,
        label: LabelOpt = None,
    ) -> None:
        """Archive a version (every version without --version): hidden from list and @latest."""
        st = state(ctx)
        st.emit([a._to_dict() for a in operations(ctx).archive(name, _version(version, label), label)], kind)

    @app.command("restore")
    def restore(ctx: typer.Context, name: NameOpt, version: VersionOpt = None) -> None:
        """Restore an archived version (every version without --version)."""
        st = state(ctx)
        st.emit([a._to_dict() for a in operations(ctx).restore(name, version)], kind)

    @app.command("delete")
    def delete(
        ctx: typer.Context,
        name: NameOpt,
        version: Annotated[str, typer.Option("-v", "--version", help="The version to delete.")],
        yes: YesOpt = False,
    ) -> None:
        """Delete a version (refused while a queued or running job uses it)."""
        operations(ctx).delete(name, version)
        err_console.print(f"deleted {kind} {escape(name)}:{escape(version)}", highlight=False)

    return app


def register(root: typer.Typer) -> None:
    for kind in OPERATIONS:
        root.add_typer(make_app(kind), name=kind)
