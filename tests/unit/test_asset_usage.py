"""Which references name an asset version (``services/assets/asset_usage.names``): what "used by"
counts for components and deployments (a deployment's ``@latest`` while the version is the latest)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from cloudlet.server import open_store
from cloudlet.services.assets.asset_usage import DeploymentUse, names, recorded_statement, used_by
from cloudlet.store import db
from cloudlet.store.schema import (
    Asset,
    Base,
    BatchDeployment,
    BatchEndpoint,
    OnlineDeployment,
    OnlineEndpoint,
    Workspace,
)

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


MODEL_ARM = "/subscriptions/s/resourceGroups/rg/workspaces/w/models/clf"


@pytest.mark.parametrize(
    ("model", "named"),
    [
        ("azureml:clf:2", True),
        ("azureml:clf:1", False),
        ("azureml:other:2", False),
        ("azureml:clf@latest", True),  # version 2 is the latest
        (f"azureml:{MODEL_ARM}/versions/2", True),
        (f"{MODEL_ARM}/versions/1", False),
        (f"azureml:{MODEL_ARM}", True),  # a container's id names its latest
        ("/subscriptions/s/resourceGroups/rg/workspaces/w/data/clf/versions/2", False),  # a data asset
        ("azureml://datastores/workspaceblobstore/paths/clf", False),
        ("azureml:clf@best", False),  # an unknown label names nothing
        (None, False),
        ({"path": "azureml:clf:2"}, False),  # an inline model is not a reference
    ],
)
def test_a_deployment_model_names_the_latest_version(model: object, named: bool) -> None:
    assert names(model, Asset(id=7, kind="model", name="clf", version="2", spec={}), latest=True) is named


def test_latest_names_only_the_latest_version() -> None:
    older = Asset(id=6, kind="model", name="clf", version="1", spec={})
    assert not names("azureml:clf@latest", older, latest=False)
    assert not names(f"azureml:{MODEL_ARM}", older, latest=False)
    assert names("azureml:clf:1", older, latest=False)


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


def test_deployments_that_name_the_version_are_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An online deployment's model and environment (a reference, or the inline definition it was
    resolved to) and a batch deployment's component: each found under the version it names."""
    monkeypatch.delenv("CLOUDLET_DB", raising=False)
    (tmp_path / "home").mkdir()
    store = open_store(tmp_path / "home", None)
    now = datetime.now(UTC)
    with store.control.begin() as session:
        ws = session.scalars(select(Workspace)).one()
        made = {
            kind: Asset(
                workspace_id=ws.id,
                kind=kind,
                name=name,
                version="1",
                spec={},
                archived=False,
                created_by="u",
                created_at=0.0,
                modified_at=0.0,
            )
            for kind, name in (("model", "m"), ("environment", "env"), ("component", "train"))
        }
        session.add_all(made.values())
        online = OnlineEndpoint(
            workspace_id=ws.id,
            name="ep",
            primary_key="k",
            secondary_key="k",
            provisioning_state="Succeeded",
            created_by="u",
            created_on=now,
        )
        batch = BatchEndpoint(
            workspace_id=ws.id, name="bep", spec={}, created_by="u", created_at=0.0, modified_at=0.0
        )
        session.add_all([online, batch])
        session.flush()
        spec = {
            "model": "azureml:m:1",
            "environment": {"name": "env", "version": "1", "image": "python:3.11"},
        }
        session.add(
            OnlineDeployment(
                endpoint_id=online.id,
                name="blue",
                spec=spec,
                provisioning_state="Succeeded",
                stage="Ready",
                created_by="u",
                created_on=now,
            )
        )
        session.add(
            BatchDeployment(
                endpoint_id=batch.id,
                name="score",
                spec={"component": "azureml:train:1"},
                created_by="u",
                created_at=0.0,
                modified_at=0.0,
            )
        )
        session.flush()
        found = {kind: used_by(session, asset).deployments for kind, asset in made.items()}
    assert found == {
        "model": [DeploymentUse("ep", "blue", "online", "model", "azureml:m:1")],
        "environment": [DeploymentUse("ep", "blue", "online", "environment", "inline")],
        "component": [DeploymentUse("bep", "score", "batch", "component", "azureml:train:1")],
    }
