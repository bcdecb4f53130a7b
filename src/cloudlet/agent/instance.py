"""A compute instance node beside its apps: setup scripts, sshd, and the instance report.

``InstanceReporter`` owns ``POST /agent/v1/nodes/{node}/apps`` (docs/agent-protocol.md): one
sender thread posts the whole current report — ``apps`` plus ``activity``, ``setup``, ``ssh`` and
``disk`` — whenever something changes and every ``$CLOUDLET_INSTANCE_REPORT_S`` seconds (default
10), refreshing activity and disk usage each time. A failed post is retried with backoff; the
latest state wins, so a lost report is never replayed out of order.

``run_setup`` runs the creation script (once per OS disk) and the startup script (every start)
from ``$CLOUDLET_SETUP_SCRIPTS``; ``start_ssh`` starts the instance's sshd when
``$CLOUDLET_SSH_PUBLIC_KEY`` is set. Both start their processes through a ``Launcher``: in the
node's sandbox, as the instance's user (sshd as the plain user: an unprivileged sshd logs in only
its own user). Standard library only, like the rest of the agent.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloudlet.agent.activity import ActivityCollector
from cloudlet.agent.client import AgentClient, Backoff, HTTPStatusError, Revoked, Unreachable
from cloudlet.agent.config import log
from cloudlet.agent.setup_scripts import Kind, ScriptResult, ScriptSpec, log_path, run_script
from cloudlet.agent.sshd import SshdError, SshdHandle, start_sshd, stop_sshd_handle
from cloudlet.nodekit import disks
from cloudlet.nodekit.sandbox import Bind, Sandbox

DEFAULT_REPORT_S = 10.0
KINDS: tuple[Kind, ...] = ("creation", "startup")


@dataclass(frozen=True)
class Launcher:
    """How the instance's user processes start: in the node's sandbox, seeing ``binds``."""

    sandbox: Sandbox
    binds: Sequence[Bind]

    def wrap(self, argv: Sequence[str], cwd: Path, root_inside: bool | None = None) -> list[str]:
        return self.sandbox.wrap(argv, cwd=cwd, binds=self.binds, root_inside=root_inside)

    @property
    def owner(self) -> tuple[int, int] | None:
        """Who the files the agent makes for the user must belong to (None: the agent's own)."""
        sandbox = self.sandbox
        return sandbox.owner if sandbox.enabled and sandbox.policy.privileged else None


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


class InstanceReporter:
    """Keeps the node's instance report and sends it (changes at once, the rest periodically)."""

    def __init__(
        self, client: AgentClient, node_id: str, stop: threading.Event, os_disk: Path, period_s: float
    ) -> None:
        self.client = client
        self.path = f"/agent/v1/nodes/{node_id}/apps"
        self.stop = stop
        self.os_disk = os_disk
        self.period_s = period_s
        self.collector = ActivityCollector(None)
        self.apps: dict[str, dict[str, Any]] = {}
        self.state: dict[str, Any] = {}  # setup, ssh
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self._thread: threading.Thread | None = None

    # -- what the supervisor tells it ------------------------------------------------------------
    def app(self, name: str, status: dict[str, Any]) -> None:
        with self._lock:
            self.apps[name] = dict(status)
        self._changed.set()

    def set(self, key: str, value: dict[str, Any]) -> None:
        with self._lock:
            self.state[key] = value
        self._changed.set()

    def watch(
        self, jupyter_url: str | None = None, token: str | None = None, ssh_port: int | None = None
    ) -> None:
        """Where activity comes from (the Jupyter server once ready, the sshd's port)."""
        if jupyter_url is not None:
            self.collector.jupyter_url, self.collector.jupyter_token = jupyter_url, token
        if ssh_port is not None:
            self.collector.ssh_port = ssh_port
        self._changed.set()

    # -- sending ---------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="instance-report", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._changed.set()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            body: dict[str, Any] = {"apps": {k: dict(v) for k, v in self.apps.items()}, **self.state}
        body["activity"] = self.collector.collect()
        body["disk"] = disk_report(self.os_disk)
        return body

    def _loop(self) -> None:
        backoff, failures = Backoff(first=0.2, cap=5.0), 0
        while not self.stop.is_set():
            self._changed.clear()
            try:
                self.client.call("POST", self.path, self.snapshot())
            except Revoked as exc:  # the node is gone (terminated): nothing more to say
                log(f"instance report refused ({exc}); no more reports")
                return
            except (Unreachable, HTTPStatusError, OSError) as exc:
                failures += 1
                if failures % 20 == 1:
                    log(f"could not send the instance report ({failures}x): {exc}")
                self._changed.wait(backoff.next())
                continue
            failures = 0
            backoff.reset()
            self._changed.wait(self.period_s)


def detach_os_disk(path: Path) -> None:
    import subprocess

    try:
        disks.detach(path)
    except subprocess.CalledProcessError as exc:
        raise OSError(f"umount failed: {exc.stderr!r}") from exc


def disk_report(path: Path) -> dict[str, Any]:
    """``used_bytes``, ``total_bytes``, ``full`` and the size-limit ``method`` of the OS disk."""
    try:
        used, total = disks.usage(path)
        full = disks.is_full(path)
    except OSError as exc:
        return {"used_bytes": None, "total_bytes": None, "full": False, "error": str(exc)}
    return {"used_bytes": used, "total_bytes": total, "full": full, "method": disks.method_of(path)}


# -- setup scripts ------------------------------------------------------------------------------
def script_specs(env: Mapping[str, str]) -> dict[Kind, ScriptSpec]:
    """``$CLOUDLET_SETUP_SCRIPTS`` (the compute's ``setup_scripts``, JSON) → spec per kind."""
    try:
        doc = json.loads(env.get("CLOUDLET_SETUP_SCRIPTS") or "{}")
    except ValueError:
        doc = {}
    specs = {kind: ScriptSpec.from_doc(doc.get(f"{kind}_script")) for kind in KINDS}
    return {kind: spec for kind, spec in specs.items() if spec is not None}


def script_status(result: ScriptResult, started: float, ended: float) -> dict[str, Any]:
    state = "failed" if result.status == "missing" else result.status
    return {
        "state": state,
        "exit_code": result.exit_code,
        "message": result.describe(),
        "tail": result.tail,
        "log": str(result.log_path) if result.log_path else None,
        "started_at": _iso(started),
        "ended_at": _iso(ended),
        "duration_s": round(result.duration_s, 3),
    }


def run_setup(
    specs: Mapping[Kind, ScriptSpec],
    os_disk: Path,
    cwd: Path,
    env: Mapping[str, str],
    reporter: InstanceReporter,
    launcher: Launcher,
) -> bool:
    """The creation script (unless this OS disk ran it), then the startup script; each reported
    as ``running`` and then with its result. False when one failed (the rest is ``not_run``).
    ``env`` is the scripts' whole environment (the apps'; never the node's secrets)."""
    setup: dict[str, Any] = {}
    failed = False
    for kind in KINDS:
        spec = specs.get(kind)
        if spec is None:
            continue
        key = f"{kind}_script"
        if failed:
            setup[key] = {"state": "not_run", "message": f"{kind} script not run: an earlier script failed"}
            continue
        started = time.time()
        setup[key] = {"state": "running", "started_at": _iso(started), "log": str(log_path(os_disk, kind))}
        reporter.set("setup", dict(setup))
        wrap = functools.partial(launcher.wrap, cwd=cwd)
        result = run_script(kind, spec, os_disk, cwd, env=env, wrap=wrap, owner=launcher.owner)
        setup[key] = script_status(result, started, time.time())
        log(f"setup: {result.describe()}")
        failed = not result.ok
    reporter.set("setup", setup)
    return not failed


# -- ssh ----------------------------------------------------------------------------------------
def start_ssh(
    key: str, os_disk: Path, reporter: InstanceReporter, launcher: Launcher, listen: str = "127.0.0.1"
) -> SshdHandle | None:
    """The instance's sshd (only the owner's ``key``), its files in ``<os disk>/.cloudlet/ssh``,
    listening on the node's address (``listen``: the SSH host's, for an instance on one)."""
    user = launcher.sandbox.user_name(root_inside=False)
    sandboxed = launcher.sandbox.enabled
    try:
        handle = start_sshd(
            os_disk / ".cloudlet" / "ssh",
            key,
            user=user,
            listen=listen,
            set_env={"HOME": str(os_disk)},
            wrap=(lambda argv: launcher.wrap(argv, os_disk, root_inside=False)) if sandboxed else None,
            owner=launcher.owner,
        )
    except (SshdError, OSError) as exc:
        log(f"sshd: {exc}")
        reporter.set("ssh", {"state": "failed", "port": None, "error": str(exc)})
        return None
    log(f"sshd ready on {handle.host}:{handle.port} (pid {handle.pid}) in {handle.started_in_s:.2f} s")
    ready = {"state": "ready", "host": handle.host, "port": handle.port, "user": user, "error": None}
    reporter.set("ssh", ready)
    reporter.watch(ssh_port=handle.port)
    return handle


def stop_ssh(handle: SshdHandle | None) -> None:
    if handle is not None:
        stop_sshd_handle(handle, timeout_s=1.0)
