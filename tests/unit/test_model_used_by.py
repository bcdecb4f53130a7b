"""Which deployment ``model`` values name a model version (``services/assets/models``' "used by"):
``azureml:<name>:<version>``, the version's ARM id, and ``@latest`` only while it is the latest."""

from __future__ import annotations

import pytest

from cloudlet.services.assets.models import names_version
from cloudlet.store.schema import Asset

ARM = "/subscriptions/s/resourceGroups/rg/workspaces/w/models/clf"


def version(number: str, row_id: int) -> Asset:
    return Asset(id=row_id, kind="model", name="clf", version=number, spec={})


@pytest.mark.parametrize(
    ("model", "named"),
    [
        ("azureml:clf:2", True),
        ("azureml:clf:1", False),
        ("azureml:other:2", False),
        ("azureml:clf@latest", True),  # version 2 is the latest
        (f"azureml:{ARM}/versions/2", True),
        (f"{ARM}/versions/1", False),
        (f"azureml:{ARM}", True),  # a container's id names its latest
        ("/subscriptions/s/resourceGroups/rg/workspaces/w/data/clf/versions/2", False),  # a data asset
        ("azureml://datastores/workspaceblobstore/paths/clf", False),
        ("azureml:clf@best", False),  # an unknown label names nothing
        (None, False),
        ({"path": "azureml:clf:2"}, False),  # an inline model is not a reference
    ],
)
def test_a_model_value_names_the_version(model: object, named: bool) -> None:
    assert names_version(model, version("2", 7), latest_id=7) is named


def test_latest_names_only_the_latest_version() -> None:
    assert not names_version("azureml:clf@latest", version("1", 6), latest_id=7)
    assert names_version("azureml:clf:1", version("1", 6), latest_id=7)
