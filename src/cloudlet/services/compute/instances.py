"""Compute instances as machines: disks, the workspace file share, apps and their URLs.

Layout under the data root (``$CLOUDLET_DATA``)::

    workspaces/<ws>/share/Users/<user>/   the workspace file share (I6): one folder per user, the
                                          apps' working directory on every instance of the workspace
    workspaces/<ws>/instances/<name>/os/  the instance's OS disk (its home): survives stop and
                                          start, removed on delete

The temp disk is the node's own ``mnt/`` folder (the local provider makes it with the node and
removes it when the node is terminated), so it is empty after every start and restart.

One Jupyter server per instance serves JupyterLab, Jupyter (notebook 7's ``/tree``) and terminals
under the base URL ``/instances/<name>/jupyterlab/``, which is also the path the control plane's
proxy serves it at (so the server's own links and redirects need no rewriting).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.compute.lifecycle import InstanceState
from cloudlet.domain.errors import CloudletError
from cloudlet.nodekit import disks
from cloudlet.providers.base import HOST_DISK_ENV, HOST_SHARE_ENV, HOST_SHARE_USER_ENV, PIN_HOST_ENV
from cloudlet.services.access import identity, workspaces
from cloudlet.services.compute import instance_reports
from cloudlet.services.compute.instance_paths import instance_root, os_disk_path
from cloudlet.services.core.storage import DataRoot
from cloudlet.store.schema import Compute, Node, Workspace

log = logging.getLogger("cloudlet.instances")

JUPYTER_APP = "jupyterlab"
DEFAULT_OS_DISK_GB = 64.0
# Azure's `services` of a compute instance: display name and the path under the app's base URL.
SERVICES = (("Jupyter Lab", "lab"), ("Jupyter", "tree"), ("Terminal", "terminals/1"))
_UNSAFE = re.compile(r"[^A-Za-z0-9._@-]")


def configured_apps() -> tuple[str, ...]:
    """Apps every instance runs: ``$CLOUDLET_INSTANCE_APPS`` (comma-separated; empty = none, for
    tests that only need the machine), default JupyterLab."""
    raw = os.environ.get("CLOUDLET_INSTANCE_APPS", JUPYTER_APP)
    return tuple(a.strip() for a in raw.split(",") if a.strip())


# -- disks and the share ----------------------------------------------------------------------
def instance_disk_key(compute: Compute) -> str:
    """The OS disk's name on a host: the instance's name and record id (a deleted instance's
    leftover disk is never a new one of the same name)."""
    return f"{compute.name}-{compute.id}"


def os_disk_gb() -> float:
    """The OS disk's size: ``$CLOUDLET_INSTANCE_OS_DISK_GB`` (GiB; tests use e.g. 0.0625), else
    ``DEFAULT_OS_DISK_GB`` (the size catalogue has no OS disk sizes)."""
    return float(os.environ.get("CLOUDLET_INSTANCE_OS_DISK_GB") or DEFAULT_OS_DISK_GB)


def detach_os_disk(data: DataRoot, compute: Compute) -> None:
    """Instance stop: unmount the OS disk (its image keeps the files for the next start)."""
    path = os_disk_path(data, compute)
    if path.exists():
        disks.detach(path)


def os_disk_full(data: DataRoot, compute: Compute) -> str | None:
    """Why the OS disk counts as full (the Unusable reason), or None while there is room."""
    path = os_disk_path(data, compute)
    if not path.exists():
        return None
    return disks.full_reason(path) if disks.is_full(path) else None


def remove_os_disk(data: DataRoot, compute: Compute) -> None:
    """Delete the OS disk (instance delete); a missing disk is fine (the step may be retried).
    Unmounted and its image removed first: removing a mounted disk's tree would leave the mount."""
    disks.release(os_disk_path(data, compute))
    shutil.rmtree(instance_root(data, compute), ignore_errors=True)


def share_root(data: DataRoot, workspace_id: int) -> Path:
    return data.workspace(workspace_id) / "share"


def user_folder(data: DataRoot, workspace_id: int, user: str) -> Path:
    """``Users/<user>`` in the workspace's file share, made on first use."""
    path = share_root(data, workspace_id) / "Users" / (_UNSAFE.sub("_", user) or "_")
    path.mkdir(parents=True, exist_ok=True)
    return path


# -- apps -------------------------------------------------------------------------------------
def app_base_url(name: str, app: str = JUPYTER_APP) -> str:
    return f"/instances/{name}/{app}/"


def app_token(secret: str, node_id: str) -> str:
    """The app's credential: derived from the installation's secret and the node, so every
    replica can inject it without storing it, and a new node (each start) gets a new one."""
    return hmac.new(secret.encode(), f"instance-app:{node_id}".encode(), hashlib.sha256).hexdigest()


# The owner's credential an instance's azure-ai-ml code uses (IDENTITY_HEADER): made at each start.
AZUREML_IDENTITY_LIFETIME_S = 7 * 86400


def azureml_env(
    session: Session, compute: Compute, secret: str, https_url: str, ca_file: str
) -> dict[str, str]:
    """What points azure-ai-ml at cloudlet from the instance, as its owner, as on an Azure ML
    instance (the agent hands it to Jupyter: ``agent/apps.py``, ``agent/home.py``): the variables
    of ``cloudlet azureml env`` with a token of the owner, the CA, and the workspace's config.json."""
    owner = identity.find_principal(session, compute.owner or compute.created_by)
    workspace = session.get(Workspace, compute.workspace_id)
    if not https_url or owner is None or owner.disabled_on is not None or workspace is None:
        return {}
    try:
        ca = Path(ca_file).read_text()
    except OSError:
        log.warning(
            "instance %s: cannot read the CA %s; azure-ai-ml is not set up there", compute.name, ca_file
        )
        return {}
    token, _ = identity.mint_token(owner.id, secret, AZUREML_IDENTITY_LIFETIME_S)
    ref = workspaces.ref_of(session, workspace)
    variables = {
        "ARM_CLOUD_METADATA_URL": f"{https_url}/metadata/endpoints",
        "IDENTITY_ENDPOINT": f"{https_url}/msi/token",
        "IDENTITY_HEADER": token,
        "AZUREML_RUN_POLLING_INTERVAL_MIN": "1",
        "AZUREML_RUN_POLLING_INTERVAL_MAX": "2",
    }
    config = {
        "subscription_id": ref.subscription_id,
        "resource_group": ref.resource_group,
        "workspace_name": ref.workspace,
    }
    return {
        "CLOUDLET_AZUREML_ENV": json.dumps(variables),
        "CLOUDLET_AZUREML_CA": ca,
        "CLOUDLET_AZUREML_CONFIG": json.dumps(config),
    }


def node_env(
    compute: Compute,
    node_id: str,
    operation_id: str,
    data: DataRoot,
    secret: str,
    apps: tuple[str, ...],
    azureml: dict[str, str] | None = None,
    disk_host: str = "",
) -> dict[str, str]:
    """The instance-specific part of its agent's environment (docs/agent-protocol.md); AZUREML:
    ``azureml_env``. The OS disk and share are given twice: as paths of this server
    (``CLOUDLET_OS_DISK``, ``CLOUDLET_SHARE``…, for a node on this machine: ``for_provider`` makes
    the disk ready) and by name (``HOST_DISK_ENV``…, for a provider that keeps them on its own
    hosts, ``providers.base.HostsInstanceDisks``; ``disk_host``: the host the disk is on)."""
    owner = compute.owner or compute.created_by
    disks_env = {
        "CLOUDLET_OS_DISK": str(os_disk_path(data, compute)),
        "CLOUDLET_SHARE": str(share_root(data, compute.workspace_id)),
        "CLOUDLET_SHARE_USER_DIR": str(user_folder(data, compute.workspace_id, owner)),
        HOST_DISK_ENV: instance_disk_key(compute),
        HOST_SHARE_ENV: f"ws{compute.workspace_id}",
        HOST_SHARE_USER_ENV: _UNSAFE.sub("_", owner) or "_",
        **({PIN_HOST_ENV: disk_host} if disk_host else {}),
    }
    return {
        "CLOUDLET_INSTANCE": compute.name,
        "CLOUDLET_OPERATION_ID": operation_id,
        "CLOUDLET_APPS": ",".join(apps),
        "CLOUDLET_APP_TOKEN": app_token(secret, node_id),
        "CLOUDLET_APP_BASE_URL": app_base_url(compute.name),
        **disks_env,
        # enable_root_access: root inside the node's sandbox (a user namespace), never on the host
        "CLOUDLET_SANDBOX_ROOT": "1" if (compute.spec or {}).get("enable_root_access", True) else "0",
        **instance_reports.agent_env(compute),  # setup scripts, the owner's SSH key, report period
        **(azureml or {}),
    }


HOST_DISK_KEYS = (HOST_DISK_ENV, HOST_SHARE_ENV, HOST_SHARE_USER_ENV, PIN_HOST_ENV)
SERVER_DISK_KEYS = ("CLOUDLET_OS_DISK", "CLOUDLET_SHARE", "CLOUDLET_SHARE_USER_DIR")


def for_provider(env: dict[str, str], disks_on_host: bool, instance: str = "") -> dict[str, str]:
    """``node_env``'s result for the node's provider: the disk's names for one that keeps disks
    on its hosts, else this server's paths, with the OS disk made ready (mounted) here."""
    if disks_on_host:
        return {k: v for k, v in env.items() if k not in SERVER_DISK_KEYS}
    if env.get("CLOUDLET_OS_DISK"):
        # A size-limited filesystem (``nodekit/disks.py``: a loop-mounted ext4 image, else tmpfs,
        # else usage accounting), made on first use and mounted again with its files each start.
        path = Path(env["CLOUDLET_OS_DISK"])
        path.parent.mkdir(parents=True, exist_ok=True)
        info = disks.prepare(path, os_disk_gb())
        if info.note and not info.enforced:
            log.warning("instance %s: OS disk not size-limited by the kernel: %s", instance, info.note)
    return {k: v for k, v in env.items() if k not in HOST_DISK_KEYS}


def ready_apps(node: Node) -> set[str]:
    return {name for name, info in (node.apps or {}).items() if info.get("state") == "ready"}


def failed_app(node: Node) -> tuple[str, dict[str, Any]] | None:
    for name, info in (node.apps or {}).items():
        if info.get("state") == "failed":
            return name, info
    return None


def services(compute: Compute, endpoint: str) -> list[dict[str, str]]:
    """Azure's ``services`` list: display name and absolute URL of each app (Running only)."""
    if compute.state != InstanceState.RUNNING or not endpoint or JUPYTER_APP not in configured_apps():
        return []
    base = endpoint.rstrip("/") + app_base_url(compute.name)
    return [{"display_name": label, "endpoint_uri": base + path} for label, path in SERVICES]


# -- names ------------------------------------------------------------------------------------
def find_by_name(session: Session, name: str) -> Compute | None:
    """Instance names are unique across the installation (as Azure makes them unique per
    region: they are host names), so the proxy's ``/instances/<name>/`` needs no workspace."""
    return session.scalar(
        select(Compute).where(Compute.type == ComputeType.COMPUTE_INSTANCE, Compute.name == name)
    )


def ensure_name_free(session: Session, name: str, workspace_id: int) -> None:
    taken = find_by_name(session, name)
    if taken is not None and taken.workspace_id != workspace_id:
        raise CloudletError(
            "InstanceNameTaken",
            f"a compute instance named '{name}' already exists in another workspace; instance names "
            "are unique across the installation (they name the instance's URL /instances/<name>/); "
            "choose another name",
            "name",
            409,
        )
