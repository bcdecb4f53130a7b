"""What a compute costs as it sits: clusters by live nodes and tier, instances by state + OS disk."""

from __future__ import annotations

import pytest

from cloudlet.domain.compute.costs import (
    HOURS_PER_MONTH,
    OS_DISK_USD_PER_GB_MONTH,
    cluster_cost,
    instance_cost,
)
from cloudlet.domain.compute.sizes import load_catalogue

DS3 = load_catalogue().get("Standard_DS3_v2")


def test_a_cluster_at_zero_nodes_costs_nothing() -> None:
    assert DS3 is not None
    cost = cluster_cost(DS3, 0, low_priority=False)
    assert cost.compute_per_hour == 0 and "nothing" in cost.note


def test_cluster_nodes_cost_their_tier_price() -> None:
    assert DS3 is not None and DS3.price_low_priority is not None
    assert cluster_cost(DS3, 3, low_priority=False).compute_per_hour == pytest.approx(3 * DS3.price_dedicated)
    assert cluster_cost(DS3, 3, low_priority=True).compute_per_hour == pytest.approx(
        3 * DS3.price_low_priority
    )


def test_a_stopped_instance_still_pays_for_its_disk() -> None:
    assert DS3 is not None
    running, stopped = instance_cost(DS3, "Running", 128), instance_cost(DS3, "Stopped", 128)
    disk = 128 * OS_DISK_USD_PER_GB_MONTH / HOURS_PER_MONTH
    assert running.compute_per_hour == DS3.price_dedicated and running.storage_per_hour == pytest.approx(disk)
    assert stopped.compute_per_hour == 0 and stopped.storage_per_hour == pytest.approx(disk)
    assert "still is" in stopped.note
    doc = stopped.to_doc()
    assert doc["total_per_month"] == pytest.approx(128 * OS_DISK_USD_PER_GB_MONTH, abs=0.01)
