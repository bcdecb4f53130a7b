"""What an instance node reports beside its apps, and what the control plane makes of it.

The agent sends ``activity``, ``setup``, ``ssh`` and ``disk`` in the body of
``POST /agent/v1/nodes/{node}/apps`` (docs/agent-protocol.md); they are kept, merged key by key, in
``Node.report``:

- ``activity``: ``cloudlet.agent.activity.ActivityCollector``'s JSON (``report_from_wire`` reads it);
- ``setup``: ``{"creation_script"|"startup_script": {"state": running|ok|failed|timed_out|skipped|
  not_run, "exit_code", "message", "tail", "log", "started_at", "ended_at", "duration_s"}}``;
- ``ssh``: ``{"state": ready|failed|disabled, "host", "port", "user", "error"}``;
- ``disk``: ``{"used_bytes", "total_bytes", "full": bool, "method"}`` of the OS disk.

The node is told what to run in its environment (``agent_env``): the compute's setup scripts and,
when SSH is enabled, the owner's public key.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.domain.compute.lifecycle import InstanceState
from cloudlet.domain.compute.node_address import node_address
from cloudlet.domain.compute.nodes import FINAL
from cloudlet.domain.errors import CloudletError
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.compute.instance_paths import os_disk_path
from cloudlet.services.core import effects
from cloudlet.services.core.storage import DataRoot, read_beneath
from cloudlet.store.schema import Compute, Node

REPORT_KEYS = ("activity", "setup", "ssh", "disk")
TAIL_BYTES = 8192
LOG_BYTES = 64 * 1024
SCRIPT_KINDS = ("creation", "startup")
SCRIPT_DONE = {"ok", "skipped", "failed", "timed_out", "not_run"}
SCRIPT_FAILED = {"failed", "timed_out"}


# -- the agent's environment --------------------------------------------------------------------
def agent_env(compute: Compute) -> dict[str, str]:
    """Setup scripts (JSON), the owner's SSH key when SSH is enabled, the report period."""
    spec = compute.spec or {}
    env = {"CLOUDLET_INSTANCE_REPORT_S": os.environ.get("CLOUDLET_INSTANCE_REPORT_S") or "10"}
    scripts = {k: v for k, v in (spec.get("setup_scripts") or {}).items() if v}
    if scripts:
        env["CLOUDLET_SETUP_SCRIPTS"] = json.dumps(scripts)
    key = ssh_key(compute)
    if key:
        env["CLOUDLET_SSH_PUBLIC_KEY"] = key
    return env


def ssh_key(compute: Compute) -> str | None:
    spec = compute.spec or {}
    if not spec.get("ssh_public_access_enabled"):
        return None
    return str((spec.get("ssh_settings") or {}).get("ssh_key_value") or "").strip() or None


# -- the agent's report -------------------------------------------------------------------------
def clean_report(body: dict[str, Any]) -> dict[str, Any]:
    """The report keys of an apps body, loosely checked and kept small (tails capped)."""
    out: dict[str, Any] = {}
    for key in REPORT_KEYS:
        if key not in body:
            continue
        value = body[key]
        if not isinstance(value, dict):
            raise CloudletError("InvalidRequest", f"'{key}' must be an object", key)
        out[key] = value
    if "setup" in out:
        out["setup"] = {k: _script(k, v) for k, v in out["setup"].items() if k in _SCRIPT_KEYS}
    if "disk" in out:
        out["disk"] = {**out["disk"], "full": bool(out["disk"].get("full"))}
    if "activity" in out and len(json.dumps(out["activity"])) > 64 * 1024:
        out["activity"] = {**out["activity"], "kernels": out["activity"].get("kernels", [])[:200]}
    return out


_SCRIPT_KEYS = {f"{kind}_script" for kind in SCRIPT_KINDS}


def _script(key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or not isinstance(value.get("state"), str):
        raise CloudletError("InvalidRequest", f"setup.{key} must be an object with a 'state'", "setup")
    tail = value.get("tail")
    if isinstance(tail, str) and len(tail) > TAIL_BYTES:
        value = {**value, "tail": tail[-TAIL_BYTES:]}
    return value


@dataclass(frozen=True)
class StartupStatus:
    """Where an instance node stands before its apps: ``waiting`` (what for), ``error`` (the
    operation's error), ``finished_at`` (epoch s; the apps' readiness clock starts then)."""

    waiting: str | None = None
    error: dict[str, Any] | None = None
    finished_at: float | None = None


def startup_status(compute: Compute, node: Node) -> StartupStatus:
    """The setup scripts and sshd of ``node``, as the instance operation waiting for it sees them."""
    report = node.report or {}
    setup = report.get("setup") or {}
    configured = [
        k for k in SCRIPT_KINDS if ((compute.spec or {}).get("setup_scripts") or {}).get(f"{k}_script")
    ]
    for kind in configured:
        status = setup.get(f"{kind}_script") or {}
        if status.get("state") in SCRIPT_FAILED:
            return StartupStatus(error=_script_error(compute, kind, status))
        if status.get("state") not in SCRIPT_DONE:
            return StartupStatus(waiting=f"the {kind} script on node {node.id}")
    ssh = report.get("ssh") or {}
    if ssh_key(compute):
        if ssh.get("state") == "failed":
            message = f"sshd did not start on node {node.id}: {ssh.get('error') or 'unknown error'}"
            return StartupStatus(error={"code": "SshServerFailed", "message": message})
        if ssh.get("state") != "ready":
            return StartupStatus(waiting=f"sshd on node {node.id}")
    ended = [_epoch((setup.get(f"{k}_script") or {}).get("ended_at")) for k in configured]
    return StartupStatus(finished_at=max((e for e in ended if e is not None), default=None))


def _script_error(compute: Compute, kind: str, status: dict[str, Any]) -> dict[str, Any]:
    tail = str(status.get("tail") or "")
    if status.get("state") == "timed_out":
        what = f"the {kind} script of instance '{compute.name}' timed out and was stopped"
    elif status.get("exit_code") is None:
        what = f"the {kind} script of instance '{compute.name}' could not run ({status.get('message')})"
    else:
        what = (
            f"the {kind} script of instance '{compute.name}' failed with exit code {status.get('exit_code')}"
        )
    last = "\n".join(tail.rstrip().splitlines()[-5:])
    message = (
        f"{what}; its log ends with:\n{last}\n"
        f"See the whole log with `cloudlet compute show-setup-log -n {compute.name} --script {kind}`, "
        "fix the script, then start the instance again"
    )
    return {"code": "SetupScriptFailed", "message": message, "script": kind, "setup_log": tail}


def _epoch(text: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def record(session: Session, node_id: str, apps: dict[str, Any], extra: dict[str, Any]) -> None:
    """An instance node's report of its apps (merged into ``Node.apps``) and of its activity,
    setup, SSH and disk (into ``Node.report``), committed; an instance operation may be waiting
    for exactly this."""
    node = session.get(Node, node_id)
    if node is None:
        raise CloudletError("AuthenticationFailed", "unknown node", status=401)
    if node.state in {s.value for s in FINAL}:
        raise CloudletError("NodeGone", f"node {node_id} is {node.state}; stop", status=403)
    if apps:
        node.apps = {**(node.apps or {}), **apps}
    if extra:
        node.report = {**(node.report or {}), **extra}
    effects.operations_pending(session)
    session.commit()


# -- what the control plane shows ---------------------------------------------------------------
def latest_node(session: Session, compute: Compute) -> Node | None:
    """The instance's most recent node (live, or the last one that ran)."""
    return session.scalar(
        select(Node)
        .where(node_service.owned_by_compute(compute.id))
        .order_by(Node.created_at.desc())
        .limit(1)
    )


def view(session: Session, compute: Compute) -> dict[str, Any]:
    """What ``compute show`` adds for an instance: ``ssh_settings`` with the live endpoint, and
    the running node's address as Azure's ``network_settings.private_ip_address`` (an SSH host's
    address when the instance runs on one)."""
    node = latest_node(session, compute)
    out: dict[str, Any] = {}
    address = (
        node_address(node.resources) if node is not None and compute.state == InstanceState.RUNNING else None
    )
    if address:
        given = (compute.spec or {}).get("network_settings") or {}
        out["network_settings"] = {**given, "private_ip_address": address}
    if ssh_key(compute):
        out["ssh_settings"] = ssh_settings(compute, node)
    return out


def ssh_settings(compute: Compute, node: Node | None) -> dict[str, Any] | None:
    """Azure's ``ssh_settings`` of a running instance with SSH: user, port and a connect command."""
    if not ssh_key(compute):
        return None
    shown: dict[str, Any] = {**((compute.spec or {}).get("ssh_settings") or {})}
    ssh = (
        ((node.report or {}).get("ssh") or {})
        if node is not None and compute.state == InstanceState.RUNNING
        else {}
    )
    shown["ssh_state"] = ssh.get("state") or "stopped"
    if ssh.get("state") == "ready":
        # The host sshd reported listening on, else the node's own address (never assumed local).
        host = ssh.get("host") or node_address(node.resources if node is not None else None) or ""
        user, port = ssh.get("user") or "root", int(ssh["port"])
        shown.update({"admin_username": user, "ssh_port": port, "host": host})
        shown["connect_command"] = shlex.join(["ssh", "-p", str(port), f"{user}@{host}"])
    elif ssh.get("error"):
        shown["ssh_error"] = ssh["error"]
    return shown


def setup_logs(data: DataRoot, compute: Compute, node: Node | None) -> dict[str, Any]:
    """Each configured script's last result and its log (the file on the OS disk while it is
    readable from here, else the tail the agent reported)."""
    setup = ((node.report or {}).get("setup") or {}) if node is not None else {}
    scripts = (compute.spec or {}).get("setup_scripts") or {}
    out: dict[str, Any] = {"name": compute.name, "node": node.id if node else None, "scripts": {}}
    for kind in SCRIPT_KINDS:
        if not scripts.get(f"{kind}_script"):
            continue
        status = dict(setup.get(f"{kind}_script") or {"state": "not_run"})
        disk = os_disk_path(data, compute)
        # The OS disk is the instance user's to write: open the log beneath it, links refused.
        log_file = ("logs", f"{kind}_script.log")
        end = read_beneath(disk, log_file, -LOG_BYTES, LOG_BYTES) if disk.is_dir() else None
        text = end.decode("utf-8", "replace") if end is not None else None
        status["log_text"] = text if text is not None else str(status.get("tail") or "")
        status["log"] = str(disk.joinpath(*log_file))
        status.pop("tail", None)
        out["scripts"][kind] = status
    return out
