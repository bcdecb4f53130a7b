"""A compute's fair-share configuration (placeholder until i31-teams merges: no team has a share
anywhere, so every compute keeps priority then FIFO)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from cloudlet.domain.jobs.fair_share import SLURM_HALF_LIFE_S, FairShareConfig
from cloudlet.store.schema import Compute


def for_compute(session: Session, compute: Compute) -> FairShareConfig | None:
    """The teams' shares of COMPUTE's pool; None when no team has one (placeholder: always None)."""
    return None


def half_life_s() -> float:
    return SLURM_HALF_LIFE_S
