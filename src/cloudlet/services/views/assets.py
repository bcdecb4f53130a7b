"""An asset version as the studio's page shows it: the version, every version of its name, who
uses it, and what only its kind has (a data asset's or model's files, a model's MLmodel, an
environment's latest build)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from cloudlet.domain.assets.assets import AssetKind
from cloudlet.services.assets import asset_files, asset_usage, models
from cloudlet.services.assets import assets as asset_service
from cloudlet.services.core.storage import DataRoot
from cloudlet.store.schema import Asset, Workspace


@dataclass
class VersionView:
    asset: Asset
    versions: list[Asset]  # newest first, archived ones too
    used: asset_usage.UsedBy
    tree: asset_files.Tree | None = None  # data, models
    mlmodel: tuple[str, dict[str, Any]] | None = None  # an MLflow model's MLmodel text and flavors
    build: asset_files.BuildLog | None = None  # environments

    @property
    def spec(self) -> dict[str, Any]:
        return self.asset.spec or {}


def version_view(
    session: Session, data: DataRoot, ws: Workspace, kind: AssetKind, name: str, version: str | None
) -> VersionView:
    """NAME:VERSION (the latest when None) and what its page shows; 404 when there is none."""
    asset = asset_service.get_version(session, ws, kind, name, version)
    return VersionView(
        asset=asset,
        versions=asset_service.list_versions(session, ws, kind, name, "all"),
        used=asset_usage.used_by(session, asset),
        tree=asset_files.tree(ws, asset, data) if kind in ("data", "model") else None,
        mlmodel=models.mlmodel(data, ws, asset) if kind == "model" else None,
        build=asset_files.build_log(session, data, asset) if kind == "environment" else None,
    )
