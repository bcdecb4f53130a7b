"""Which references name an asset version (``services/assets/asset_usage.names``): what "used by"
counts for components and deployments."""

from __future__ import annotations

from typing import Any

import pytest

from cloudlet.services.assets.asset_usage import names
from cloudlet.store.schema import Asset

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
