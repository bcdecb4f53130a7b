"""What only a model version has beyond every asset's use cases: its MLflow ``MLmodel`` (the text
and its flavors), shown on its page. Its files, "used by", and registering one from a job's output
are every asset's (``asset_files``, ``asset_usage``, ``assets.write``)."""

from __future__ import annotations

from typing import Any

import yaml

from cloudlet.domain.endpoints import mlflow_models as mlflow_rules
from cloudlet.services.assets import asset_files
from cloudlet.services.core.storage import DataRoot, read_beneath
from cloudlet.store.schema import Asset, Workspace

MLMODEL_LIMIT = 1 << 20  # an MLmodel is a page of YAML; a larger file is not one


def mlmodel(data: DataRoot, ws: Workspace, asset: Asset) -> tuple[str, dict[str, Any]] | None:
    """An MLflow model's MLmodel text and its flavors (name → settings); None without one."""
    found = asset_files.located_in(ws, asset, data)
    if found is None:
        return None
    text = read_beneath(found[0], (*found[1], mlflow_rules.MLMODEL), limit=MLMODEL_LIMIT)
    if text is None:
        return None
    decoded = text.decode("utf-8", "replace")
    try:
        doc = yaml.safe_load(decoded)
    except yaml.YAMLError:
        return decoded, {}
    flavors = doc.get("flavors") if isinstance(doc, dict) else None
    return decoded, flavors if isinstance(flavors, dict) else {}
