"""What a compute costs while it sits as it is (pure), for ``compute show`` (T10, C9).

A cluster at 0 nodes costs nothing; its nodes cost the size's price each (the low-priority price
for ``tier: low_priority``). An instance costs its size's price while its machine is allocated,
and its OS disk costs storage whether it runs or not: a stopped instance is cheap, not free.
Prices are the size catalogue's (USD per hour); the disk price is Azure's Premium SSD (LRS) rate.
"""

from __future__ import annotations

from dataclasses import dataclass

from cloudlet.domain.compute.lifecycle import InstanceState
from cloudlet.domain.compute.sizes import VmSize

HOURS_PER_MONTH = 730.0
OS_DISK_USD_PER_GB_MONTH = 0.154  # Premium SSD LRS: a 128 GiB P10 disk is $19.71 a month
_I = InstanceState
# Instance states in which its machine is allocated (and billed).
BILLED_INSTANCE_STATES: frozenset[InstanceState] = frozenset(
    {_I.CREATING, _I.RUNNING, _I.STARTING, _I.RESTARTING, _I.STOPPING, _I.UNUSABLE}
)


@dataclass(frozen=True)
class Cost:
    compute_per_hour: float
    storage_per_hour: float
    note: str

    def to_doc(self) -> dict[str, object]:
        total = self.compute_per_hour + self.storage_per_hour
        return {
            "currency": "USD",
            "compute_per_hour": round(self.compute_per_hour, 6),
            "storage_per_hour": round(self.storage_per_hour, 6),
            "total_per_hour": round(total, 6),
            "total_per_month": round(total * HOURS_PER_MONTH, 2),
            "note": self.note,
        }


def cluster_cost(size: VmSize, nodes: int, low_priority: bool) -> Cost:
    price = (
        size.price_low_priority
        if low_priority and size.price_low_priority is not None
        else size.price_dedicated
    )
    tier = "low-priority" if low_priority else "dedicated"
    note = f"{nodes} node(s) × ${price:g}/h ({tier})" if nodes else "0 nodes: nothing is billed"
    return Cost(nodes * price, 0.0, note)


def instance_cost(size: VmSize, state: str | None, os_disk_gb: float) -> Cost:
    storage = os_disk_gb * OS_DISK_USD_PER_GB_MONTH / HOURS_PER_MONTH
    disk = f"OS disk {os_disk_gb:g} GiB ${storage * HOURS_PER_MONTH:.2f}/month"
    if state in BILLED_INSTANCE_STATES:
        return Cost(size.price_dedicated, storage, f"{state}: ${size.price_dedicated:g}/h + {disk}")
    return Cost(0.0, storage, f"{state}: compute not billed; the {disk} still is")
