"""Where a compute instance's files live under the data root: its folder and its OS disk's mount.

``services/compute/instances.py`` (the disk's life) and ``services/compute/instance_reports.py`` (the setup
logs
read off the disk) both need them.
"""

from __future__ import annotations

from pathlib import Path

from cloudlet.services.core.storage import DataRoot
from cloudlet.store.schema import Compute


def instance_root(data: DataRoot, compute: Compute) -> Path:
    return data.workspace(compute.workspace_id) / "instances" / compute.name


def os_disk_path(data: DataRoot, compute: Compute) -> Path:
    return instance_root(data, compute) / "os"
