"""Which references name an asset version (``services/assets/asset_usage.names``): what "used by"
counts for components and deployments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from cloudlet.services.assets.asset_usage import names, recorded_statement
from cloudlet.store import db
from cloudlet.store.schema import Asset, Base

ARM = "azureml:/subscriptions/s/resourceGroups/r/providers/Microsoft.MachineLearningServices/workspaces/w"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("azureml:train:2", True),
        ("train:2", True),
        (f"{ARM}/components/train/versions/2", True),
        ({"name": "train", "version": "2", "command": "x"}, True),
        ("azureml:train:1", False),
        ("azureml:train@latest", False),  # which version it meant is not known here
        (f"{ARM}/environments/train/versions/2", False),  # another kind
        ("azureml:training:2", False),
        ({"name": "train", "version": "1"}, False),
        (None, False),
        ("azureml:train@nightly", False),  # an unknown label is no reference, not an error
    ],
)
def test_a_reference_names_the_version(value: Any, expected: bool) -> None:
    asset = Asset(kind="component", name="train", version="2", workspace_id=1, spec={})
    assert names(value, asset) is expected


def test_the_jobs_of_a_version_are_read_from_its_index_without_a_sort(tmp_path: Path) -> None:
    """ "Used by" reads the newest uses of one version through ``ix_asset_uses_asset_id`` in order:
    a version used by 50,000 jobs is not sorted (93 ms before, 0.7 ms since; docs/studio.md)."""
    engine = db.make_engine(db.sqlite_url(tmp_path))
    Base.metadata.create_all(engine)
    with Session(engine) as session:
        compiled = recorded_statement(7).compile(engine, compile_kwargs={"literal_binds": True})
        plan = "\n".join(str(row[-1]) for row in session.execute(text(f"EXPLAIN QUERY PLAN {compiled}")))
    engine.dispose()
    assert "ix_asset_uses_asset_id" in plan and "TEMP B-TREE" not in plan, plan
