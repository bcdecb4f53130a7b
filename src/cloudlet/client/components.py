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
from cloudlet.client.artifacts import Upload
from cloudlet.client.assets import AssetValidationError, _Asset, _AssetOperations, _local
from cloudlet.client.component_code import upload_component_code
from cloudlet.client.pipelines import prepare_pipeline_component
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs.job_paths import is_remote_path

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
        return prepare_pipeline_component(rest, ws, body, base, uploads), uploads
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
    from cloudlet.domain.assets.components import parse_component  # its models: not at import

    try:
        parse_component(body)
    except CloudletError as exc:
        raise AssetValidationError(exc.target or "$", exc.message) from None
    upload_component_code(rest, ws, body, base, uploads)
    return body, uploads


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
