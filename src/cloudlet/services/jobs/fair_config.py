"""A compute's fair-share configuration (placeholder until i31-teams merges: the lead keeps i31-teams'
version of this file). Same signatures; no team has a share of any pool here."""

from __future__ import annotations

from sqlalchemy.orm import Session

from cloudlet.domain.jobs.fair_share import SLURM_HALF_LIFE_S, FairShareConfig
from cloudlet.store.schema import Compute


def for_compute(session: Session, compute: Compute) -> FairShareConfig | None:
    """The teams' shares of COMPUTE's pool; None: no team has a share of it."""
    return None


def half_life_s() -> float:
    return SLURM_HALF_LIFE_S
