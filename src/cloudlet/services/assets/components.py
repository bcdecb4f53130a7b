"""Command components: registered (a kind of asset, ``services/assets/assets.py``) and resolved for the
jobs and pipeline steps that run them.

- ``resolve(session, workspace, ref, base_dir)``: the :class:`ComponentSpec` a step's ``component:``
  names — ``azureml:name:1``, ``azureml:name@latest``, ``name:1``, ``name@latest``, an ARM id
  (``azureml:/subscriptions/…/components/name/versions/1``), a local YAML file relative to
  BASE_DIR, or an inline mapping (an anonymous component);
- ``checked_code`` (from ``services/assets/component_code.py``): what a stored component's ``code``
  becomes (``codes/<sha256>``, the snapshot agents download): the code is uploaded before a
  component is registered, as for jobs;
- ``register_anonymous``: an inline component recorded as ``azureml_anonymous:<content hash>``
  (the same content is the same version, so a rerun registers nothing new).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.domain.assets import assets as rules
from cloudlet.domain.assets.assets import AssetKind
from cloudlet.domain.assets.components import (
    ANONYMOUS_NAME,
    ComponentSpec,
    component_hash,
    component_to_doc,
    parse_component,
)
from cloudlet.domain.errors import CloudletError, validation_error
from cloudlet.domain.jobs.job_spec import CODE_SNAPSHOT_PATTERN, InlineEnvironment, is_remote_path
from cloudlet.services.assets import assets as asset_service
from cloudlet.services.assets.component_code import checked_code
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.services.core.storage import DataRoot
from cloudlet.store.schema import Asset, CodeVersion, Workspace

KIND: AssetKind = "component"
# The target of resolve's own errors: the reference as a whole (a pipeline puts it under its step,
# ``jobs.<step>.component``; the component's own fields follow it: ``….component.inputs.x``).
REF = "$"
# ``name:1`` / ``name@latest`` without the ``azureml:`` prefix (as a pipeline step may write them).
_BARE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*)(?::(?P<version>[^:/@]+)|@(?P<label>[^:/@]+))$")
_FILE_SUFFIXES = (".yml", ".yaml")


def spec_of(asset: Asset) -> ComponentSpec:
    """A stored component version as its spec (named and versioned as stored)."""
    return parse_component({**asset.spec, "name": asset.name, "version": asset.version})


def resolve(
    session: Session, workspace: Workspace, ref: str | dict[str, Any], base_dir: Path | None
) -> ComponentSpec:
    """The component ``ref`` names (see the module's docstring). A file's relative ``code`` and
    ``conda_file`` become absolute paths (under the file's folder): the caller uploads them.
    Errors of the reference itself target ``$``; the component's own, its fields."""
    if isinstance(ref, dict):
        return parse_component(ref)
    text = ref.strip()
    reference = _reference(text)
    if reference is not None:
        if reference.kind not in (None, KIND):
            raise validation_error(REF, f"'{text}' names a {reference.kind}, not a component")
        asset = _registered(session, workspace, reference)
        if str(asset.spec.get("type", "")).lower() == "pipeline":
            raise validation_error(
                REF,
                f"'{text}' is a pipeline component: run it as a step of type: pipeline "
                "(type: pipeline, component: …)",
            )
        return spec_of(asset)
    return load_file(text, base_dir)


def resolve_pipeline(session: Session, workspace: Workspace, ref: str) -> dict[str, Any]:
    """The stored form of the registered pipeline component REF names (``azureml:name:1``,
    ``azureml:name@latest``, ``name@latest``, an ARM id): what a ``type: pipeline`` step runs."""
    text = ref.strip()
    reference = _reference(text)
    if reference is None or reference.kind not in (None, KIND):
        raise validation_error(REF, f"'{text}' does not name a registered component (azureml:<name>@latest)")
    asset = _registered(session, workspace, reference)
    if str(asset.spec.get("type", "")).lower() != "pipeline":
        raise validation_error(
            REF, f"'{text}' is a command component: run it as a step of type: command (or leave type out)"
        )
    return {**asset.spec, "name": asset.name, "version": asset.version}


def _registered(session: Session, workspace: Workspace, reference: rules.AssetRef) -> Asset:
    """The registered component REFERENCE names; a 400 saying how to register it when none is."""
    try:
        return asset_service.get_version(session, workspace, KIND, reference.name, reference.version)
    except CloudletError as exc:
        if exc.status != 404:
            raise
        raise CloudletError(
            "ComponentNotFound",
            f"{exc.message.rstrip('.')}: create it first (cloudlet component create --file F) or fix "
            "the name or version",
            REF,
            400,
        ) from None


def _reference(text: str) -> rules.AssetRef | None:
    found = rules.parse_reference(text)
    if found is not None:
        return found
    if text.startswith("/subscriptions/"):
        return rules.parse_reference("azureml:" + text)
    bare = _BARE.fullmatch(text)
    if bare is None or text.lower().endswith(_FILE_SUFFIXES):
        return None
    return rules.parse_reference("azureml:" + text)


def load_file(text: str, base_dir: Path | None) -> ComponentSpec:
    """A component YAML file (TEXT relative to BASE_DIR), its local paths made absolute."""
    if base_dir is None:
        raise validation_error(
            REF,
            f"'{text}' is a local file; name a registered component (azureml:<name>:<version> or "
            "azureml:<name>@latest), or submit with the cloudlet CLI or client, which reads the file",
        )
    path = Path(text.removeprefix("file:")).expanduser()
    path = path if path.is_absolute() else base_dir / path
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise validation_error(
            REF, f"cannot read component file '{text}' (looked at {path}): {exc.strerror or exc}"
        ) from None
    except yaml.YAMLError as exc:
        raise validation_error(REF, f"component file '{text}' is not valid YAML: {exc}") from None
    spec = parse_component(doc)
    return with_local_paths(spec, path.parent)


def with_local_paths(spec: ComponentSpec, folder: Path) -> ComponentSpec:
    """SPEC with a relative local ``code`` and inline ``conda_file`` made absolute under FOLDER."""
    update: dict[str, Any] = {}
    if spec.code is not None and not is_remote_path(spec.code):
        update["code"] = str((folder / spec.code.removeprefix("file:")).resolve())
    env = spec.environment
    if isinstance(env, InlineEnvironment) and isinstance(env.conda_file, str):
        conda = str((folder / env.conda_file).resolve())
        update["environment"] = env.model_copy(update={"conda_file": conda})
    return spec.model_copy(update=update) if update else spec


def code_of(spec: dict[str, Any]) -> str | None:
    """The code snapshot a stored component runs (a parallel component's: its task's)."""
    task = spec.get("task")
    code = task.get("code") if isinstance(task, dict) else spec.get("code")
    return code if isinstance(code, str) else None


def code_version_id(session: Session, workspace: Workspace, ref: WorkspaceRef, code: str) -> str | None:
    """The ARM id of a code version whose snapshot is CODE (``codes/<sha256>``), for the SDK (which
    reads a component's code as an ARM id); None when no code version has that snapshot."""
    if not CODE_SNAPSHOT_PATTERN.fullmatch(code):
        return None
    digest = code.split("/", 1)[1]
    row = session.scalar(
        select(CodeVersion)
        .where(CodeVersion.workspace_id == workspace.id, CodeVersion.snapshot == digest)
        .order_by(CodeVersion.id)
        .limit(1)
    )
    return None if row is None else f"{ref.arm_id}/codes/{row.name}/versions/{row.version}"


def register_anonymous(
    session: Session,
    ref: WorkspaceRef,
    workspace: Workspace,
    spec: ComponentSpec,
    caller: Caller,
    data: DataRoot,
    version: str | None = None,
) -> Asset:
    """SPEC (its code already uploaded) as ``azureml_anonymous:<content hash>``: registering the
    same content again returns the same version. VERSION: the hash the caller names it by (an
    inline pipeline step's, ``domain.jobs.inline_components.inline_version``)."""
    doc = checked_code(session, workspace, component_to_doc(spec))
    checked = parse_component(doc)
    version = version or component_hash(checked, checked.code)
    body = {k: v for k, v in doc.items() if k not in ("name", "version")}
    return asset_service.create_or_update(
        session, ref, workspace, KIND, ANONYMOUS_NAME, version, body, caller, data
    ).asset


def has_anonymous(session: Session, workspace: Workspace, version: str) -> bool:
    """Whether ``azureml_anonymous:VERSION`` is registered in WORKSPACE (one indexed probe)."""
    found = session.scalar(
        select(Asset.id).where(
            Asset.workspace_id == workspace.id,
            Asset.kind == KIND,
            Asset.name == ANONYMOUS_NAME,
            Asset.version == version,
        )
    )
    return found is not None


def put_version(
    session: Session,
    ref: WorkspaceRef,
    workspace: Workspace,
    name: str,
    version: str,
    doc: dict[str, Any],
    archived: bool | None,
    caller: Caller,
    data: DataRoot,
) -> tuple[asset_service.Created, str | None]:
    """The use case behind the ARM component version PUT: create or update it, archive or restore
    it when ARCHIVED differs, and find the ARM id of the code version it runs (before the commit:
    a read after it would open another transaction); committed."""
    result = asset_service.create_or_update(session, ref, workspace, KIND, name, version, doc, caller, data)
    asset = result.asset
    if archived is not None and archived != asset.archived:
        asset_service.set_archived(session, ref, workspace, KIND, name, version, archived, caller)
    code = code_of(asset.spec)
    code_id = code_version_id(session, workspace, ref, code) if code is not None else None
    session.commit()
    return result, code_id
