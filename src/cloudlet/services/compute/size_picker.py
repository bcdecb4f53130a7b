"""The sizes a new compute may take, each with the quota left for its family: what the studio's
create form offers (sizes that do not fit are shown but cannot be picked)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from cloudlet.domain.compute.quota import TOTAL_DEDICATED, TOTAL_LOW_PRIORITY, Tier
from cloudlet.domain.compute.sizes import Catalogue
from cloudlet.services.compute import quotas


@dataclass(frozen=True)
class SizeChoice:
    name: str
    family: str
    vcpus: int
    memory_gb: float
    gpus: int
    gpu_model: str | None
    price: float  # per hour, at the tier asked for
    cores_left: int  # in the pool that binds (the family's, or the low-priority total)
    fits: bool  # one node (an instance) of it fits the quota left
    why_not: str  # in words, when it does not fit


def choices(
    session: Session,
    subscription_id: str,
    location: str,
    catalogue: Catalogue,
    compute_type: str,
    tier: Tier = Tier.DEDICATED,
) -> list[SizeChoice]:
    """The catalogue's current sizes for COMPUTE_TYPE in LOCATION's quota pool, smallest first.

    Quota is checked as ``computes`` checks it: dedicated cores count against the size's family and
    the dedicated total, low-priority cores against the low-priority total."""
    lines = {line.name: line for line in quotas.usage(session, subscription_id, location, catalogue)}

    def left(name: str) -> int:
        line = lines.get(name)
        return max(0, line.limit - line.current_value) if line is not None else 0

    out: list[SizeChoice] = []
    for size in catalogue.list_sizes(compute_type):
        low = tier is Tier.LOW_PRIORITY
        if low and not size.low_priority_capable:
            continue
        if low:
            pool, room = TOTAL_LOW_PRIORITY, left(TOTAL_LOW_PRIORITY)
        else:
            pool, room = size.family, min(left(size.family), left(TOTAL_DEDICATED))
            if left(TOTAL_DEDICATED) < left(size.family):
                pool = TOTAL_DEDICATED
        fits = size.vcpus <= room
        why = "" if fits else f"needs {size.vcpus} cores; {room} left in {pool}"
        price = (size.price_low_priority or 0.0) if low else size.price_dedicated
        out.append(
            SizeChoice(
                size.name,
                size.family,
                size.vcpus,
                size.memory_gb,
                size.gpus,
                size.gpu_model,
                price,
                room,
                fits,
                why,
            )
        )
    return sorted(out, key=lambda c: (c.gpus, c.vcpus, c.memory_gb, c.name))
