"""Data, model and environment assets, shaped like ``azure.ai.ml``'s.

>>> from cloudlet.client import Data
>>> data = Data(name="iris", path="./iris.csv", type="uri_file")
>>> ml_client.data.create_or_update(data)  # doctest: +SKIP

A local ``path`` is uploaded once into the workspace datastore (content-hashed: the same bytes are
not sent again) and the asset records its ``azureml://datastores/…`` URI. An environment's local
``conda_file`` is read and sent inline; ``build.path`` names a folder whose ``requirements.txt``
(or conda file) becomes its pip requirements.
"""

from __future__ import annotations

import builtins
import copy
from pathlib import Path
from typing import Any, ClassVar

import yaml

from cloudlet.client._rest import CloudletClientError, quote_segment
from cloudlet.client.artifacts import Upload, upload_data
from cloudlet.client.operations import _Operations
from cloudlet.domain.assets import build_context
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs.job_paths import is_remote_path


class AssetTypes:
    """The asset and input types, as ``azure.ai.ml.constants.AssetTypes``."""

    URI_FILE = "uri_file"
    URI_FOLDER = "uri_folder"
    MLTABLE = "mltable"
    CUSTOM_MODEL = "custom_model"
    MLFLOW_MODEL = "mlflow_model"
    TRITON_MODEL = "triton_model"


class AssetValidationError(CloudletClientError):
    """The asset definition is invalid (checked locally before anything is uploaded)."""

    def __init__(self, target: str, message: str) -> None:
        super().__init__(f"{target}: {message}")
        self.target = target


class _Asset:
    """Fields as attributes, the CLI v2 YAML shape as ``_to_dict()``."""

    _fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **fields: Any) -> None:
        self._extra: dict[str, Any] = {}
        for key in self._fields:
            setattr(self, key, fields.pop(key, None))
        self._extra = fields  # what the server adds: id, is_archived, creation_context
        self.base_path: Path | None = None

    def _to_rest(self) -> dict[str, Any]:
        return {
            k: copy.deepcopy(getattr(self, k)) for k in self._fields if getattr(self, k) not in (None, {})
        }

    def _to_dict(self) -> dict[str, Any]:
        return {**self._to_rest(), **self._extra}

    @classmethod
    def _from_rest(cls, doc: dict[str, Any]) -> Any:
        return cls(**dict(doc))

    @property
    def id(self) -> str | None:
        return self._extra.get("id")

    @property
    def is_archived(self) -> bool:
        return bool(self._extra.get("is_archived"))

    @property
    def creation_context(self) -> dict[str, Any]:
        return dict(self._extra.get("creation_context") or {})

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._to_dict() == other._to_dict()

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self._to_rest().items())
        return f"{type(self).__name__}({shown})"


class Data(_Asset):
    """``Data(name, version=None, type="uri_folder", path=..., description=None, tags=None)``."""

    _fields = ("name", "version", "type", "path", "description", "tags", "properties")


class Model(_Asset):
    """``Model(name, version=None, type="custom_model"|"mlflow_model"|"triton_model", path=...)``."""

    _fields = (
        "name",
        "version",
        "type",
        "path",
        "description",
        "tags",
        "properties",
        "stage",
        "flavors",
        "job_name",
    )


class BuildContext:
    """``BuildContext(path="./env")``: a folder with a ``requirements.txt`` (or a conda file)."""

    def __init__(self, *, path: str | Path, dockerfile_path: str | None = None) -> None:
        self.path = str(path)
        self.dockerfile_path = dockerfile_path


class Environment(_Asset):
    """``Environment(name, version=None, image=None, conda_file=None, build=None, pip=None)``."""

    _fields = ("name", "version", "image", "conda_file", "pip", "build", "description", "tags", "properties")

    def _to_rest(self) -> dict[str, Any]:
        body = super()._to_rest()
        build = getattr(self, "build", None)
        if isinstance(build, BuildContext):
            body["build"] = {"path": build.path, "dockerfile_path": build.dockerfile_path}
        return body


ENTITIES: dict[str, type[_Asset]] = {"data": Data, "model": Model, "environment": Environment}
COLLECTIONS = {"data": "data", "model": "models", "environment": "environments"}


def load_asset(kind: str, source: str | Path) -> _Asset:
    """An asset from a CLI v2 YAML file; its relative paths resolve against the file's folder."""
    path = Path(source)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise AssetValidationError("file", f"cannot read {path}: {exc}") from None
    if not isinstance(doc, dict):
        raise AssetValidationError("file", f"{path} must hold a YAML mapping")
    doc.pop("$schema", None)
    asset = ENTITIES[kind](**doc)
    asset.base_path = path.resolve().parent
    return asset


def load_data(source: str | Path) -> Data:
    asset = load_asset("data", source)
    assert isinstance(asset, Data)
    return asset


def load_model(source: str | Path) -> Model:
    asset = load_asset("model", source)
    assert isinstance(asset, Model)
    return asset


def load_environment(source: str | Path) -> Environment:
    asset = load_asset("environment", source)
    assert isinstance(asset, Environment)
    return asset


def _local(base: Path, value: str, target: str) -> Path:
    path = Path(value.removeprefix("file:")).expanduser()
    resolved = path if path.is_absolute() else base / path
    if not resolved.exists():
        raise AssetValidationError(target, f"local path '{value}' does not exist (looked at {resolved})")
    return resolved.resolve()


def _read_conda(path: Path, target: str) -> dict[str, Any]:
    try:
        conda = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise AssetValidationError(target, f"cannot read {path}: {exc}") from None
    if not isinstance(conda, dict):
        raise AssetValidationError(target, f"{path} must hold a conda YAML mapping")
    return conda


def inline_environment(body: dict[str, Any], base: Path) -> None:
    """A local ``conda_file`` becomes its mapping; ``build.path``'s requirements.txt becomes ``pip``
    (or its conda file, ``conda_file``), as ``domain.assets.build_context`` says."""
    conda = body.get("conda_file")
    if isinstance(conda, str):
        if is_remote_path(conda):
            raise AssetValidationError("conda_file", "conda_file must be a local file or an inline mapping")
        body["conda_file"] = _read_conda(_local(base, conda, "conda_file"), "conda_file")
    build = body.pop("build", None)
    if build is None:
        return
    folder_value = build.get("path") if isinstance(build, dict) else None
    if not isinstance(folder_value, str) or is_remote_path(folder_value):
        raise AssetValidationError("build.path", "build.path must name a local folder")
    folder = _local(base, folder_value, "build.path")

    def read(name: str) -> str | None:
        path = folder / name
        try:
            return path.read_text(encoding="utf-8") if path.is_file() else None
        except (OSError, UnicodeDecodeError) as exc:
            raise AssetValidationError("build.path", f"cannot read {path}: {exc}") from None

    try:
        build_context.from_context(body, read, build.get("dockerfile_path"), str(folder), "build.path")
    except CloudletError as exc:
        raise AssetValidationError("build.path", exc.message) from None


class _AssetOperations(_Operations):
    kind: ClassVar[str] = ""
    last_uploads: builtins.list[Upload]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.last_uploads = []

    def _base(self) -> str:
        return f"{self._scope.ws_path()}/{COLLECTIONS[self.kind]}"

    def _name(self, name: str) -> str:
        return f"{self._base()}/{quote_segment(name)}"

    def _entity(self, doc: Any) -> Any:
        return ENTITIES[self.kind]._from_rest(dict(doc))

    def prepare(self, asset: _Asset | dict[str, Any], base_path: str | Path | None = None) -> dict[str, Any]:
        """The body to send: local paths uploaded (content-hashed), local files read."""
        if isinstance(asset, _Asset):
            body = asset._to_rest()
            base = Path(base_path or asset.base_path or Path.cwd())
        elif isinstance(asset, dict):
            body = copy.deepcopy(asset)
            body.pop("$schema", None)
            base = Path(base_path or Path.cwd())
        else:
            raise TypeError(f"cannot create a {type(asset).__name__} as a {self.kind}")
        if not body.get("name"):
            raise AssetValidationError("name", f"a {self.kind} needs a name")
        self.last_uploads = []
        if self.kind == "environment":
            inline_environment(body, base)
            return body
        path = body.get("path")
        if not isinstance(path, str) or not path:
            raise AssetValidationError(
                "path", f"a {self.kind} needs a path (a local file or folder, or a URI)"
            )
        if not is_remote_path(path):
            local = _local(base, path, "path")
            kind = body.get("type") or ("uri_folder" if self.kind == "data" else "custom_model")
            if kind == "uri_file" and not local.is_file():
                raise AssetValidationError("path", f"{local} is not a file (uri_file)")
            if kind in ("uri_folder", "mltable") and not local.is_dir():
                raise AssetValidationError("path", f"{local} is not a folder ({kind})")
            upload = upload_data(self._rest, self._scope.ws_path(), local)
            self.last_uploads.append(upload)
            body["path"] = upload.uri
        return body

    def create_or_update(self, asset: _Asset | dict[str, Any], *, base_path: str | Path | None = None) -> Any:
        """Create the asset's version (the next one when it names none), or update an existing
        version's description and tags."""
        body = self.prepare(asset, base_path)
        name = str(body["name"])
        version = body.get("version")
        if version is None:
            created = self._rest.post(f"{self._name(name)}/versions", body)
        else:
            body["version"] = str(version)
            created = self._rest.put(f"{self._name(name)}/versions/{quote_segment(str(version))}", body)
        return self._entity(created)

    def get(self, name: str, version: str | None = None, label: str | None = None) -> Any:
        """A version, or the latest (``label="latest"`` or no version)."""
        if version is not None and label is not None:
            raise ValueError("give version or label, not both")
        if version is None:
            if label not in (None, "latest"):
                raise ValueError("the only label is 'latest'")
            return self._entity(self._rest.get(self._name(name)))
        return self._entity(self._rest.get(f"{self._name(name)}/versions/{quote_segment(str(version))}"))

    def list(self, name: str | None = None, *, list_view_type: str = "active_only") -> builtins.list[Any]:
        """Each name's latest version, or NAME's versions (newest first)."""
        if name is None:
            params = {"include_archived": "true"} if list_view_type != "active_only" else None
            items = self._rest.list_values(self._base(), params=params)
        else:
            items = self._rest.list_values(
                f"{self._name(name)}/versions", params={"list_view_type": list_view_type}
            )
        return [self._entity(item) for item in items]

    def _action(self, action: str, name: str, version: str | None, label: str | None) -> builtins.list[Any]:
        if version is None and label == "latest":
            version = self.get(name).version
        if version is None:
            answer = self._rest.post(f"{self._name(name)}/{action}")
        else:
            answer = self._rest.post(f"{self._name(name)}/versions/{quote_segment(str(version))}/{action}")
        return [self._entity(item) for item in (answer or {}).get("value", [])]

    def archive(self, name: str, version: str | None = None, label: str | None = None) -> builtins.list[Any]:
        """Archive a version (or every version of NAME): hidden from lists and ``@latest``."""
        return self._action("archive", name, version, label)

    def restore(self, name: str, version: str | None = None, label: str | None = None) -> builtins.list[Any]:
        return self._action("restore", name, version, label)

    def delete(self, name: str, version: str) -> None:
        """Delete a version (refused while a job that has not ended uses it)."""
        self._rest.delete(f"{self._name(name)}/versions/{quote_segment(str(version))}")


class DataOperations(_AssetOperations):
    """``client.data``: create_or_update, get, list, archive, restore, delete."""

    kind = "data"


class ModelOperations(_AssetOperations):
    """``client.models``: create_or_update, get, list, archive, restore, delete."""

    kind = "model"


class EnvironmentOperations(_AssetOperations):
    """``client.environments``: create_or_update, get, list, archive, restore, delete."""

    kind = "environment"


__all__ = [
    "AssetTypes",
    "BuildContext",
    "Data",
    "DataOperations",
    "Environment",
    "EnvironmentOperations",
    "Model",
    "ModelOperations",
    "load_data",
    "load_environment",
    "load_model",
]
