"""Command components, shaped like ``azure.ai.ml``'s (``ml_client.components``).

>>> from cloudlet.client import load_component
>>> train = load_component("train.yml")
>>> ml_client.components.create_or_update(train)  # doctest: +SKIP

A component's local ``code`` folder is uploaded once as a content-hashed snapshot (as a job's is)
and the version records ``codes/<sha256>``; an inline environment's local ``conda_file`` is read
and sent inline. ``prepare_component`` does this for any component document, so a pipeline's
``component: ./train.yml`` steps are shipped the same way.
"""

from __future__ import annotations

import builtins
import copy
from pathlib import Path
from typing import Any, ClassVar

import yaml

from cloudlet.client._rest import RestClient
from cloudlet.client.artifacts import Upload, upload_code
from cloudlet.client.assets import AssetValidationError, _Asset, _AssetOperations, _local
from cloudlet.domain.components import parse_component
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.job_spec import is_remote_path

COLLECTION = "components"


class Component(_Asset):
    """``Component(name, version=None, command=..., inputs=..., outputs=..., code=..., environment=...)``
    (a command component: the CLI v2 ``commandComponent`` fields)."""

    _fields = (
        "name",
        "version",
        "type",
        "display_name",
        "description",
        "tags",
        "properties",
        "is_deterministic",
        "inputs",
        "outputs",
        "code",
        "additional_includes",
        "environment",
        "command",
        "resources",
        "distribution",
        "environment_variables",
        "jobs",  # a pipeline component's steps (type: pipeline)
        "settings",
    )


def load_component(source: str | Path) -> Component:
    """A component from a CLI v2 YAML file; its relative ``code`` resolves against the file's folder."""
    path = Path(source)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise AssetValidationError("file", f"cannot read {path}: {exc}") from None
    if not isinstance(doc, dict):
        raise AssetValidationError("file", f"{path} must hold a YAML mapping")
    doc.pop("$schema", None)
    component = Component(**doc)
    component.base_path = path.resolve().parent
    return component


def prepare_component(
    rest: RestClient, ws: str, doc: dict[str, Any], base: Path
) -> tuple[dict[str, Any], builtins.list[Upload]]:
    """DOC (a component document; not changed) validated, with its local ``code`` uploaded to the
    workspace at WS (``codes/<sha256>``) and a local inline ``conda_file`` read; relative paths
    resolve against BASE. Returns the body to send and what was uploaded."""
    body = copy.deepcopy(doc)
    body.pop("$schema", None)
    uploads: builtins.list[Upload] = []
    if str(body.get("type", "command")).lower() == "pipeline":
        return _prepare_pipeline_component(rest, ws, body, base, uploads), uploads
    env = body.get("environment")
    if isinstance(env, dict) and isinstance(env.get("conda_file"), str):
        if is_remote_path(env["conda_file"]):
            raise AssetValidationError(
                "environment.conda_file", "conda_file must be a local file or an inline mapping"
            )
        path = _local(base, env["conda_file"], "environment.conda_file")
        try:
            conda = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise AssetValidationError("environment.conda_file", f"cannot read {path}: {exc}") from None
        if not isinstance(conda, dict):
            raise AssetValidationError("environment.conda_file", f"{path} must hold a conda YAML mapping")
        body["environment"] = {**env, "conda_file": conda}
    try:
        parse_component(body)
    except CloudletError as exc:
        raise AssetValidationError(exc.target or "$", exc.message) from None
    upload_component_code(rest, ws, body, base, uploads)
    return body, uploads


def _prepare_pipeline_component(
    rest: RestClient, ws: str, body: dict[str, Any], base: Path, uploads: builtins.list[Upload]
) -> dict[str, Any]:
    """A pipeline component's steps prepared as a pipeline's are (their component files inlined,
    code and local inputs uploaded), then checked as the pipeline it runs."""
    from cloudlet.client.jobs import JobValidationError
    from cloudlet.client.pipelines import prepare_pipeline
    from cloudlet.domain.pipeline_jobs import registered_pipeline_component

    try:
        body = prepare_pipeline(rest, ws, body, base, uploads, check=False)
        if all(
            not isinstance(s, dict) or not isinstance(s.get("component"), str) for s in body["jobs"].values()
        ):
            registered_pipeline_component(body, None, None)
    except JobValidationError as exc:
        error = exc.error
        target = getattr(error, "target", None) or "$"
        raise AssetValidationError(target, str(getattr(error, "message", exc))) from None
    except CloudletError as exc:
        raise AssetValidationError(exc.target or "$", exc.message) from None
    return body


def upload_component_code(
    rest: RestClient, ws: str, body: dict[str, Any], base: Path, uploads: builtins.list[Upload]
) -> None:
    """BODY's local ``code`` (relative to BASE) uploaded with its ``additional_includes`` copied in
    (each file or folder at the snapshot's top under its own name, as Azure ML does): BODY's
    ``code`` becomes ``codes/<sha256>`` and its ``additional_includes`` go (they are in it)."""
    includes = body.pop("additional_includes", None) or []
    if not isinstance(includes, builtins.list) or not all(isinstance(i, str) and i for i in includes):
        raise AssetValidationError(
            "additional_includes", "additional_includes must list local files or folders"
        )
    code = body.get("code")
    local = isinstance(code, str) and not is_remote_path(code)
    if code is not None and not local and includes:
        raise AssetValidationError(
            "additional_includes",
            f"additional_includes are copied into a local code folder, not into {code!r}",
        )
    if not local and not includes:
        return
    folder = _local(base, code, "code") if isinstance(code, str) and local else None
    paths = [_local(base, item, f"additional_includes[{n}]") for n, item in enumerate(includes)]
    try:
        upload = upload_code(rest, ws, folder, paths)
    except ValueError as exc:
        raise AssetValidationError("additional_includes", str(exc)) from None
    uploads.append(upload)
    body["code"] = upload.uri


class ComponentOperations(_AssetOperations):
    """``client.components``: create_or_update, get, list, archive, restore, delete."""

    kind: ClassVar[str] = "component"

    def _base(self) -> str:
        return f"{self._scope.ws_path()}/{COLLECTION}"

    def _entity(self, doc: Any) -> Any:
        return Component._from_rest(dict(doc))

    def prepare(self, asset: _Asset | dict[str, Any], base_path: str | Path | None = None) -> dict[str, Any]:
        """The body to send: validated locally, the local code folder uploaded (content-hashed)."""
        if isinstance(asset, _Asset):
            doc = asset._to_rest()
            base = Path(base_path or asset.base_path or Path.cwd())
        elif isinstance(asset, dict):
            doc = asset
            base = Path(base_path or Path.cwd())
        else:
            raise TypeError(f"cannot create a {type(asset).__name__} as a component")
        if not doc.get("name"):
            raise AssetValidationError("name", "a component needs a name (e.g. name: train_model)")
        body, self.last_uploads = prepare_component(self._rest, self._scope.ws_path(), doc, base)
        return body


__all__ = ["Component", "ComponentOperations", "load_component", "prepare_component"]
