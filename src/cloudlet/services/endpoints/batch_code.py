"""The code a batch job runs: the user's snapshot with cloudlet's batch driver (and, for an MLflow
model without a scoring script, cloudlet's MLflow scorer) added. Used by batch deployments and by
pipelines' parallel steps alike, below both."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

from cloudlet.domain.assets.uploads import UnpackBudget, UploadLimits
from cloudlet.domain.endpoints import batch_endpoints as rules
from cloudlet.domain.endpoints import mlflow_models
from cloudlet.nodekit import batch_driver
from cloudlet.scoring import mlflow_scorer

DRIVER_SOURCE = Path(batch_driver.__file__)
SCORER_SOURCE = Path(mlflow_scorer.__file__)


def with_driver(archive: bytes, with_scorer: bool = False) -> bytes:
    """A code snapshot with cloudlet's batch driver added at its top (and, for an MLflow model
    without a scoring script, cloudlet's MLflow scorer); deterministic bytes, so the same code
    gives the same snapshot. Bounded as an upload's unpacking is (the sizes its members declare,
    before any is copied): a snapshot that is an archive bomb is a 413."""
    budget = UnpackBudget(UploadLimits())
    out = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w") as tar,
        tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as source,
    ):
        for member in source:  # lazily: a bomb is refused at its first oversized member
            if member.name.lstrip("./") in (rules.DRIVER_FILE, mlflow_models.SCRIPT_NAME):
                continue
            budget.add_entry()
            budget.add_bytes(member.size)
            tar.addfile(member, source.extractfile(member) if member.isfile() else None)
        added = [(rules.DRIVER_FILE, DRIVER_SOURCE)]
        if with_scorer:
            added.append((mlflow_models.SCRIPT_NAME, SCORER_SOURCE))
        for name, source_path in added:
            content = source_path.read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(content), 0o644
            tar.addfile(info, io.BytesIO(content))
    return out.getvalue()
