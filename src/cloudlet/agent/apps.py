"""A compute instance's apps (I2): one Jupyter server for JupyterLab, Jupyter and terminals.

Started by the agent when ``$CLOUDLET_APPS`` names ``jupyterlab`` (docs/agent-protocol.md). The
server listens on 127.0.0.1 on a free port, under the base URL the control plane's proxy serves
(``$CLOUDLET_APP_BASE_URL``), and accepts only ``$CLOUDLET_APP_TOKEN``, which the proxy injects;
its working directory is the owner's folder of the workspace file share. Its state goes to
``POST /agent/v1/nodes/{node}/apps`` whenever it changes, with the rest of the instance's report
(``agent/instance.py``: activity, setup scripts, sshd, OS disk).

Before the server starts (also on an instance without apps): the creation script (once per OS
disk) and the startup script (every start) run, then the instance's sshd starts if SSH is enabled.
A failed script stops there: the apps are not started and the report says why.

The home (``$CLOUDLET_OS_DISK``, the persistent OS disk) gets, on every start:
- ``~/.venv``: the user's Python environment. It is layered over the agent's interpreter (a
  ``.pth`` file adds the agent's site-packages, so Jupyter, ipykernel and pip are there), and
  ``pip install`` in a terminal or ``%pip install`` in a notebook installs into it, so packages
  survive stop and start. The notebook kernel ``python3`` runs this environment's Python.
- ``~/mnt`` → the temp disk (the node's ``mnt/``, empty after every start), also ``$CLOUDLET_TEMP_DISK``;
- ``~/cloudfiles/code`` → the workspace file share (as on Azure).
Standard library only, like the rest of the agent.
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
import sysconfig
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cloudlet.agent import instance
from cloudlet.agent.client import AgentClient
from cloudlet.agent.config import log
from cloudlet.agent.sshd import SshdHandle

JUPYTER = "jupyterlab"
READY_TIMEOUT_S = 150.0
MAX_RESTARTS = 3
LOG_TAIL_BYTES = 4096
# Never handed to the user's processes: the node's secret would let them act as the agent.
PRIVATE_ENV = ("CLOUDLET_NODE_TOKEN", "CLOUDLET_APP_TOKEN")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tail(path: Path, size: int = LOG_TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - size))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


# -- the home on the OS disk ------------------------------------------------------------------
def user_venv(home: Path, python: str = sys.executable) -> Path:
    """``~/.venv`` layered over the agent's interpreter; made once, refreshed on every start."""
    venv = home / ".venv"
    if not (venv / "bin" / "python").exists():
        subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    site = Path(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    base = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "_cloudlet_base.pth").write_text("".join(f"{p}\n" for p in sorted(base)))
    for name in ("pip", "pip3"):  # the venv has no pip of its own: use the layered one, into the venv
        script = venv / "bin" / name
        script.write_text(f'#!/bin/sh\nexec "{venv / "bin" / "python"}" -m pip "$@"\n')
        script.chmod(0o755)
    return venv


def kernelspec(home: Path, venv: Path) -> None:
    """The user-level ``python3`` kernel (it shadows the server's own) runs the user's venv."""
    spec = home / ".local" / "share" / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    doc = {
        "argv": [str(venv / "bin" / "python"), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
        "metadata": {"debugger": True},
    }
    (spec / "kernel.json").write_text(json.dumps(doc, indent=1))


def link(path: Path, target: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        if path.is_symlink() and os.readlink(path) == str(target):
            return
        if path.is_dir() and not path.is_symlink():
            return  # the user made a real folder of that name: leave it
        path.unlink()
    path.symlink_to(target)


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
    ) -> None:
        self.client = client
        self.jupyter = jupyter
        self.node_dir = node_dir
        self.env = dict(env)
        self.stop = stop
        self.token = env.get("CLOUDLET_APP_TOKEN", "")
        self.base_url = env.get("CLOUDLET_APP_BASE_URL", "/")
        self.home = Path(env.get("CLOUDLET_OS_DISK") or node_dir / "os")
        self.cwd = Path(env.get("CLOUDLET_SHARE_USER_DIR") or self.home)
        self.temp_disk = node_dir / "mnt"
        self.log_path = node_dir / "apps" / f"{JUPYTER}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self._thread: threading.Thread | None = None
        period = float(env.get("CLOUDLET_INSTANCE_REPORT_S") or instance.DEFAULT_REPORT_S)
        self.reporter = instance.InstanceReporter(client, node_id, stop, self.home, period)
        self.sshd: SshdHandle | None = None

    @classmethod
    def from_env(
        cls, client: AgentClient, node_id: str, node_dir: Path, stop: threading.Event
    ) -> AppSupervisor | None:
        apps = [a.strip() for a in os.environ.get("CLOUDLET_APPS", "").split(",") if a.strip()]
        if JUPYTER not in apps and not os.environ.get("CLOUDLET_INSTANCE"):
            return None
        return cls(client, node_id, node_dir, os.environ, stop, jupyter=JUPYTER in apps)

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
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)

    def release_os_disk(self) -> None:
        """Unmount the OS disk this node ran on (its image keeps the files), once its processes
        are gone: for an agent that leaves on its own, with no control plane to do it."""
        try:
            instance.detach_os_disk(self.home)
        except OSError as exc:
            log(f"could not unmount the OS disk {self.home}: {exc}")

    def _supervise(self) -> None:
        try:
            venv = self._prepare_home()
        except (OSError, subprocess.CalledProcessError) as exc:
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
        self.port = free_port()
        self.proc = self._spawn(venv)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self._answers():
            if self.proc.poll() is not None:
                return f"the server exited with code {self.proc.returncode} before answering"
            if time.monotonic() > deadline or self.stop.wait(0.2):
                self.close()
                return f"the server did not answer within {READY_TIMEOUT_S:g} s"
        log(f"{JUPYTER} ready on 127.0.0.1:{self.port}{self.base_url} (pid {self.proc.pid})")
        self.reporter.watch(jupyter_url=f"http://127.0.0.1:{self.port}{self.base_url}", token=self.token)
        self._report(
            {
                "state": "ready",
                "address": "127.0.0.1",
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
        if specs and not instance.run_setup(specs, self.home, self.cwd, self.app_env(venv), self.reporter):
            return False
        key = self.env.get("CLOUDLET_SSH_PUBLIC_KEY", "").strip()
        if key and not self.stop.is_set():
            self.sshd = instance.start_ssh(key, self.home, self.reporter)
        else:
            self.reporter.set("ssh", {"state": "disabled", "port": None, "error": None})
        return not self.stop.is_set()

    # -- pieces --------------------------------------------------------------------------------
    def _prepare_home(self) -> Path:
        self.home.mkdir(parents=True, exist_ok=True)
        self.temp_disk.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        venv = user_venv(self.home)
        kernelspec(self.home, venv)
        link(self.home / "mnt", self.temp_disk)
        share = self.env.get("CLOUDLET_SHARE")
        if share:
            link(self.home / "cloudfiles" / "code", Path(share))
        self.cwd.mkdir(parents=True, exist_ok=True)
        return venv

    def app_env(self, venv: Path) -> dict[str, str]:
        env = {k: v for k, v in self.env.items() if k not in PRIVATE_ENV}
        env.update(
            {
                "HOME": str(self.home),
                "PATH": os.pathsep.join([str(venv / "bin"), str(self.home / ".local" / "bin"), env["PATH"]]),
                "VIRTUAL_ENV": str(venv),
                "SHELL": "/bin/bash",
                "CLOUDLET_TEMP_DISK": str(self.temp_disk),
                "JUPYTER_TOKEN": self.token,
            }
        )
        env.pop("PYTHONHOME", None)
        return env

    def _spawn(self, venv: Path) -> subprocess.Popen[bytes]:
        cmd = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--ServerApp.base_url={self.base_url}",
            f"--ServerApp.root_dir={self.cwd}",
            # The proxy forwards the public Host header; the token is what guards the server.
            "--ServerApp.allow_remote_access=True",
            "--KernelSpecManager.ensure_native_kernel=False",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ]
        if os.geteuid() == 0:  # nodes of the local provider run as the server's user
            cmd.append("--allow-root")
        with open(self.log_path, "ab") as out:
            return subprocess.Popen(
                cmd,
                cwd=self.cwd,
                env=self.app_env(venv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: the agent stops it (and its kernels) at once
            )

    def _answers(self) -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
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
