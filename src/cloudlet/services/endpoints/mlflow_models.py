"""An MLflow model's own files, read where the workspace keeps them, for a no-code deployment
(``domain/endpoints/mlflow_models.py``): its ``MLmodel`` and the conda file / requirements it names become
the deployment's environment, as Azure builds one from the model."""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from cloudlet.domain.assets.assets import parse_reference
from cloudlet.domain.endpoints import mlflow_models
from cloudlet.domain.errors import CloudletError, validation_error
from cloudlet.services.assets import assets as asset_service
from cloudlet.store.schema import Asset, Workspace

MAX_FILE = 1 << 20  # an MLmodel, conda.yaml or requirements.txt is small


def _folder(root: Path) -> Path | None:
    if (root / mlflow_models.MLMODEL).is_file():
        return root
    if root.is_dir():
        for child in sorted(root.iterdir()):
            if (child / mlflow_models.MLMODEL).is_file():
                return child
    return None


def _read_folder(root: Path, names: list[str]) -> dict[str, str] | None:
    folder = _folder(root)
    if folder is None:
        return None
    out = {}
    for name in names:
        path = folder / name
        if path.is_file() and path.stat().st_size <= MAX_FILE:
            out[name] = path.read_text(errors="replace")
    return out


def _read_archive(archive: Path, names: list[str]) -> dict[str, str] | None:
    """The files beside the first ``MLmodel`` of a code snapshot (its top or one folder down)."""
    with tarfile.open(archive, "r:gz") as tar:
        members = {m.name.removeprefix("./"): m for m in tar.getmembers() if m.isfile()}
        tops = sorted(n for n in members if n.split("/")[-1] == mlflow_models.MLMODEL and n.count("/") <= 1)
        if not tops:
            return None
        base = tops[0].rpartition("/")[0]
        out = {}
        for name in names:
            member = members.get(f"{base}/{name}" if base else name)
            if member is not None and member.size <= MAX_FILE:
                handle = tar.extractfile(member)
                if handle is not None:
                    out[name] = handle.read().decode(errors="replace")
        return out


def model_files(kind: str, where: str, names: list[str]) -> dict[str, str] | None:
    """NAMES read beside the model's MLmodel (KIND, WHERE as ``online_endpoints.model_path``
    gives them: a code snapshot or a folder); None when the model has no MLmodel."""
    if kind == "code":
        return _read_archive(Path(where), names)
    return _read_folder(Path(where), names)


def environment(kind: str, where: str) -> dict[str, Any]:
    """The inline environment a no-code deployment of the model at WHERE (KIND: ``code``, a
    snapshot, or ``path``, as ``online_endpoints.model_path`` gives them) gets: from the conda file
    (else requirements.txt) its MLmodel names."""
    found = model_files(kind, where, [mlflow_models.MLMODEL])
    if found is None or mlflow_models.MLMODEL not in found:
        raise validation_error(
            "model",
            "the model is not an MLflow model (no MLmodel file in its folder), so it cannot be scored "
            "without a scoring script: give code_configuration (code and scoring_script)",
        )
    conda, requirements = mlflow_models.env_files(found[mlflow_models.MLMODEL])
    wanted = [n for n in (conda, requirements) if n]
    files = model_files(kind, where, wanted) or {}
    return mlflow_models.environment_for(
        files.get(conda) if conda else None, files.get(requirements) if requirements else None
    )


def registered_model(session: Session, ws: Workspace, model: str, target: str = "model") -> Asset | None:
    """The model version MODEL names (``azureml:<name>:<version>``, ``@latest``, an ARM id);
    None when it names no registered model (an uploaded folder, a datastore path)."""
    reference = parse_reference(model)
    if reference is None:
        return None
    try:
        return asset_service.get_version(session, ws, "model", reference.name, reference.version)
    except CloudletError as exc:
        if exc.status != 404:
            raise
        raise validation_error(
            target, f"{exc.message.rstrip('.')}: register it first (cloudlet model create) or fix the name"
        ) from None
