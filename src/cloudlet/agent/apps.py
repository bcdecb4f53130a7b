"""A compute instance's apps (I2): one Jupyter server for JupyterLab, Jupyter and terminals.

Started by the agent when ``$CLOUDLET_APPS`` names ``jupyterlab`` (docs/agent-protocol.md). The
server listens on the node's address (``$CLOUDLET_NODE_ADDRESS``: 127.0.0.1 for a local node, the
host's address on an SSH host) on a free port, under the base URL the control plane's proxy serves
(``$CLOUDLET_APP_BASE_URL``), and accepts only ``$CLOUDLET_APP_TOKEN``, which the proxy injects;
its working directory is the owner's folder of the workspace file share. Its state goes to
``POST /agent/v1/nodes/{node}/apps`` whenever it changes, with the rest of the instance's report
(``agent/instance.py``: activity, setup scripts, sshd, OS disk).

Before the server starts (also on an instance without apps): the creation script (once per OS
disk) and the startup script (every start) run, then the instance's sshd starts if SSH is enabled.
A failed script stops there: the apps are not started and the report says why.

The home (``$CLOUDLET_OS_DISK``, the persistent OS disk) is prepared on every start by
``agent/home.py`` (``~/.venv``, the kernel, ``~/mnt`` → the temp disk, ``~/cloudfiles/code`` →
the share). Everything the instance's user runs — the home's preparation, setup scripts, sshd,
Jupyter with its kernels and terminals — runs in the node's sandbox (``nodekit/sandbox.py``) as the
instance's user, seeing the OS disk, the temp disk and the file share read-write and nothing else
of the host. Standard library only, like the rest of the agent.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cloudlet.agent import home, instance
from cloudlet.agent.client import AgentClient
from cloudlet.agent.config import log
from cloudlet.agent.runstate import signal_group
from cloudlet.agent.sshd import SshdHandle
from cloudlet.nodekit import safe_paths
from cloudlet.nodekit.sandbox import Bind, Policy, Sandbox, user_environment

JUPYTER = "jupyterlab"
READY_TIMEOUT_S = 150.0
MAX_RESTARTS = 3
LOG_TAIL_BYTES = 4096
HOME_SETUP_TIMEOUT_S = 120.0
# The instance's own variables its user's processes get (beside the allowlist of nodekit/sandbox.py);
# never the node's token, nor the app token under its agent name (Jupyter gets it as JUPYTER_TOKEN).
INSTANCE_ENV = (
    "CLOUDLET_OS_DISK",
    "CLOUDLET_SHARE",
    "CLOUDLET_SHARE_USER_DIR",
    "CLOUDLET_APP_BASE_URL",
    "CLOUDLET_AZUREML_CA",
    "CLOUDLET_AZUREML_CONFIG",
)
# What points azure-ai-ml at cloudlet as the instance's owner (``$CLOUDLET_AZUREML_ENV``, JSON, from
# the control plane: the variables of `cloudlet azureml env`); REQUESTS_CA_BUNDLE is added here.
AZUREML_ENV = (
    "ARM_CLOUD_METADATA_URL",
    "IDENTITY_ENDPOINT",
    "IDENTITY_HEADER",
    "AZUREML_RUN_POLLING_INTERVAL_MIN",
    "AZUREML_RUN_POLLING_INTERVAL_MAX",
)


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def tail(path: Path, size: int = LOG_TAIL_BYTES) -> str:
    try:
        return safe_paths.read_bytes(str(path), size, from_end=True).decode("utf-8", "replace")
    except OSError:
        return ""


class AppSupervisor:
    """Starts the Jupyter server, waits until it answers, reports it, restarts it if it dies."""

    def __init__(
        self,
        client: AgentClient,
        node_id: str,
        node_dir: Path,
        env: Mapping[str, str],
        stop: threading.Event,
        jupyter: bool = True,
        sandbox: Sandbox | None = None,
    ) -> None:
        self.client = client
        self.jupyter = jupyter
        self.sandbox = sandbox or Sandbox(Policy(), hostname=node_id, state_dir=node_dir / "sandbox")
        self.node_dir = node_dir
        self.env = dict(env)
        self.stop = stop
        self.token = env.get("CLOUDLET_APP_TOKEN", "")
        # Where the control plane's proxy reaches the app: the node's address.
        self.listen = env.get("CLOUDLET_NODE_ADDRESS", "").strip() or "127.0.0.1"
        self.base_url = env.get("CLOUDLET_APP_BASE_URL", "/")
        self.home = Path(env.get("CLOUDLET_OS_DISK") or node_dir / "os")
        self.share = Path(env["CLOUDLET_SHARE"]) if env.get("CLOUDLET_SHARE") else None
        self.cwd = Path(env.get("CLOUDLET_SHARE_USER_DIR") or self.home)
        self.temp_disk = node_dir / "mnt"
        # What the instance's processes see of the host, read-write: the OS disk, the temp disk,
        # the file share. Bound by path: their parents are the control plane's, not the user's.
        self.binds = [Bind(str(p), writable=True) for p in (self.home, self.temp_disk, self.share) if p]
        self.log_path = node_dir / "apps" / f"{JUPYTER}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self._thread: threading.Thread | None = None
        period = float(env.get("CLOUDLET_INSTANCE_REPORT_S") or instance.DEFAULT_REPORT_S)
        self.reporter = instance.InstanceReporter(client, node_id, stop, self.home, period)
        self.sshd: SshdHandle | None = None

    @classmethod
    def from_env(
        cls,
        client: AgentClient,
        node_id: str,
        node_dir: Path,
        stop: threading.Event,
        sandbox: Sandbox | None = None,
    ) -> AppSupervisor | None:
        apps = [a.strip() for a in os.environ.get("CLOUDLET_APPS", "").split(",") if a.strip()]
        if JUPYTER not in apps and not os.environ.get("CLOUDLET_INSTANCE"):
            return None
        return cls(client, node_id, node_dir, os.environ, stop, jupyter=JUPYTER in apps, sandbox=sandbox)

    # -- lifetime ------------------------------------------------------------------------------
    def start(self) -> None:
        self.reporter.start()
        self._thread = threading.Thread(target=self._supervise, name="apps", daemon=True)
        self._thread.start()

    def close(self) -> None:
        instance.stop_ssh(self.sshd)
        self.reporter.wake()
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        # Jupyter gets the SIGTERM (it stops its kernels), not the sandbox's outer bwrap.
        signal_group(proc.pid, signal.SIGTERM, proc.pid if self.sandbox.enabled else None)
        try:
            proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            signal_group(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1.0)

    def release_os_disk(self) -> None:
        """Unmount the OS disk this node ran on (its image keeps the files), once its processes
        are gone: for an agent that leaves on its own, with no control plane to do it."""
        try:
            instance.detach_os_disk(self.home)
        except OSError as exc:
            log(f"could not unmount the OS disk {self.home}: {exc}")

    def _supervise(self) -> None:
        try:
            self._supervise_apps()
        finally:
            # The sandboxes this thread started die with it (bwrap's --die-with-parent is a signal
            # on the death of the thread that forked them): it lives as long as the node does.
            self.stop.wait()

    def _supervise_apps(self) -> None:
        try:
            venv = self._prepare_home()
        except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
            log(f"could not prepare the home: {exc}")
            self._report({"state": "failed", "error": f"could not prepare the home: {exc}"})
            return
        if not self._before_apps(venv) or not self.jupyter:
            return
        failures = 0
        while not self.stop.is_set():
            began = time.monotonic()
            error = self._run_once(venv)
            if self.stop.is_set():
                return
            failures = 0 if time.monotonic() - began > 300 else failures + 1
            if failures > MAX_RESTARTS:
                self._report({"state": "failed", "error": error, "log": tail(self.log_path)})
                return
            log(f"{JUPYTER}: {error}; restarting ({failures}/{MAX_RESTARTS})")
            self._report({"state": "starting", "error": error})
            self.stop.wait(1.0)

    def _run_once(self, venv: Path) -> str:
        """Start the server, report it once it answers, wait until it exits; return why it ended."""
        self.port = free_port(self.listen)
        self.proc = self._spawn(venv)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self._answers():
            if self.proc.poll() is not None:
                return f"the server exited with code {self.proc.returncode} before answering"
            if time.monotonic() > deadline or self.stop.wait(0.2):
                self.close()
                return f"the server did not answer within {READY_TIMEOUT_S:g} s"
        log(f"{JUPYTER} ready on {self.listen}:{self.port}{self.base_url} (pid {self.proc.pid})")
        self.reporter.watch(jupyter_url=f"http://{self.listen}:{self.port}{self.base_url}", token=self.token)
        self._report(
            {
                "state": "ready",
                "address": self.listen,
                "port": self.port,
                "base_url": self.base_url,
                "pid": self.proc.pid,
            }
        )
        while self.proc.poll() is None and not self.stop.wait(1.0):
            pass
        return f"the server exited with code {self.proc.poll()}"

    def _before_apps(self, venv: Path) -> bool:
        """Setup scripts, then sshd; False when a script failed (the apps are not started)."""
        specs = instance.script_specs(self.env)
        env = self.app_env(venv)
        if specs and not instance.run_setup(specs, self.home, self.cwd, env, self.reporter, self.launcher):
            return False
        key = self.env.get("CLOUDLET_SSH_PUBLIC_KEY", "").strip()
        if key and not self.stop.is_set():
            self.sshd = instance.start_ssh(key, self.home, self.reporter, self.launcher, self.listen)
        else:
            self.reporter.set("ssh", {"state": "disabled", "port": None, "error": None})
        return not self.stop.is_set()

    # -- pieces --------------------------------------------------------------------------------
    @property
    def launcher(self) -> instance.Launcher:
        return instance.Launcher(self.sandbox, self.binds)

    def _prepare_home(self) -> Path:
        """The folders the instance's user gets (handed over to it), then the home's contents,
        made by that user in the sandbox (``agent/home.py``)."""
        self.temp_disk.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        sandbox = self.sandbox
        # A disk from before the sandbox (or a fresh ext4) is root's: hand all of it over once.
        sandbox.hand_over(self.home, recursive=safe_paths.owner_of(str(self.home)) != sandbox.owner)
        sandbox.hand_over(self.temp_disk)
        if self.share is not None:
            sandbox.hand_over(self.share, create=True)
            for folder in (self.share / "Users", self.cwd):
                if folder.is_relative_to(self.share):
                    migrate = safe_paths.owner_of(str(folder)) not in (None, sandbox.owner)
                    sandbox.hand_over(folder, create=True, recursive=migrate)
        if not sandbox.enabled:
            self.cwd.mkdir(parents=True, exist_ok=True)
            return home.prepare(self.home, self.temp_disk, self.share, env=self.app_env(self.home / ".venv"))
        argv = [sys.executable, "-m", "cloudlet.agent.home", str(self.home), str(self.temp_disk)]
        argv += [str(self.share)] if self.share is not None else []
        done = subprocess.run(
            sandbox.wrap(argv, cwd=self.home, binds=self.binds),
            env=self.app_env(self.home / ".venv"),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=HOME_SETUP_TIMEOUT_S,
            start_new_session=True,
        )
        if done.returncode != 0:
            raise RuntimeError((done.stderr or done.stdout).strip()[-2000:] or f"exit code {done.returncode}")
        return self.home / ".venv"

    def app_env(self, venv: Path) -> dict[str, str]:
        """The allowlisted agent environment, the instance's own variables, the user's home and
        venv, and Jupyter's token (the server needs it; the app token's agent name is not passed)."""
        env = user_environment(self.env)
        env.update({k: self.env[k] for k in INSTANCE_ENV if self.env.get(k)})
        env.update(self.azureml_env())
        user = self.sandbox.user_name()
        path = env.get("PATH") or os.defpath
        env.update(
            {
                "HOME": str(self.home),
                "USER": user,
                "LOGNAME": user,
                "PATH": os.pathsep.join([str(venv / "bin"), str(self.home / ".local" / "bin"), path]),
                "VIRTUAL_ENV": str(venv),
                "SHELL": "/bin/bash",
                "CLOUDLET_TEMP_DISK": str(self.temp_disk),
                "JUPYTER_TOKEN": self.token,
            }
        )
        return env

    def azureml_env(self) -> dict[str, str]:
        try:
            given = json.loads(self.env.get("CLOUDLET_AZUREML_ENV") or "{}")
        except ValueError:
            log("CLOUDLET_AZUREML_ENV is not JSON; azure-ai-ml is not set up on this instance")
            return {}
        out = {k: str(given[k]) for k in AZUREML_ENV if isinstance(given, dict) and given.get(k)}
        if out and self.env.get("CLOUDLET_AZUREML_CA"):
            out["REQUESTS_CA_BUNDLE"] = str(self.home / home.CA_FILE)
        return out

    def _spawn(self, venv: Path) -> subprocess.Popen[bytes]:
        cmd = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            f"--ServerApp.ip={self.listen}",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--ServerApp.base_url={self.base_url}",
            f"--ServerApp.root_dir={self.cwd}",
            # The proxy forwards the public Host header; the token is what guards the server.
            "--ServerApp.allow_remote_access=True",
            "--KernelSpecManager.ensure_native_kernel=False",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ]
        if self.sandbox.uid_inside() == 0:  # root inside the sandbox (enable_root_access), or no sandbox
            cmd.append("--allow-root")
        with open(self.log_path, "ab") as out:
            return subprocess.Popen(
                self.sandbox.wrap(cmd, cwd=self.cwd, binds=self.binds),
                cwd=self.cwd,
                env=self.app_env(venv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: the agent stops it (and its kernels) at once
            )

    def _answers(self) -> bool:
        conn = http.client.HTTPConnection(self.listen, self.port, timeout=2)
        try:
            conn.request(
                "GET", self.base_url + "api/status", headers={"Authorization": f"token {self.token}"}
            )
            return conn.getresponse().status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            conn.close()

    def _report(self, status: dict[str, Any]) -> None:
        """Tell the control plane (the reporter sends it at once, retried until heard)."""
        self.reporter.app(JUPYTER, status)
