"""Online-deployment replicas on this node (issue 14): the real ``azureml-inference-server-http``.

The control plane keeps, per node, the replicas it wants there (its online runtime decides:
``control/replica_hosts.py``). ``ReplicaSupervisor`` reconciles to that desired set: every
``period`` it POSTs what it runs to ``/agent/v1/nodes/{node}/replicas`` and the answer is the
desired set. A new replica's code and model are downloaded through the server's API, its
environment is prepared as a job's is (``nodekit/envs.py``; none given: the node's inference
interpreter), and ``azmlinfsrv`` starts in the node's sandbox with ``AML_APP_ROOT``,
``AZUREML_ENTRY_SCRIPT`` and ``AZUREML_MODEL_DIR``, on a free port of the node's address. The
report says where it listens, whether its process lives, and the tail of its log; readiness and
liveness are probed by the control plane over HTTP (one rule, whoever hosts the replica). A
replica no longer desired is stopped and its folder removed.

Started on nodes made for a deployment (``CLOUDLET_ONLINE_REPLICAS``) and on compute instances.
Standard library only, like the rest of the agent.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tarfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cloudlet.agent.client import AgentClient, HTTPStatusError, Revoked, Unreachable
from cloudlet.agent.config import log
from cloudlet.nodekit.sandbox import Bind, Sandbox, user_environment

PERIOD_S = 0.5  # while a replica starts or goes, or its log grows
IDLE_PERIOD_S = 2.0  # otherwise (an exit is seen within this long)
LOG_TAIL_BYTES = 64 * 1024
STOP_WAIT_S = 5.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("0.0.0.0", 0))
        return int(sock.getsockname()[1])


def _tail(path: Path, size: int = LOG_TAIL_BYTES) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - size))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


@dataclass
class Hosted:
    """One replica this agent runs (or is preparing)."""

    id: str
    spec: dict[str, Any]
    folder: Path
    state: str = "starting"  # starting | running | exited | failed
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    error: str | None = None
    exit_code: int | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    log_size: int = -1  # the log size last reported

    @property
    def log_path(self) -> Path:
        return self.folder / "server.log"

    def log_grew(self) -> bool:
        try:
            return self.log_path.stat().st_size != self.log_size
        except OSError:
            return False

    def note(self, text: str) -> None:
        with self.log_path.open("a", encoding="utf-8") as out:
            out.write(text)

    def status(self, address: str) -> dict[str, Any]:
        if self.proc is not None and self.state == "running" and self.proc.poll() is not None:
            self.state, self.exit_code = "exited", self.proc.returncode
        out: dict[str, Any] = {"state": self.state, "address": address, "port": self.port or None}
        if self.proc is not None:
            out["pid"] = self.proc.pid
        if self.exit_code is not None:
            out["exit_code"] = self.exit_code
        if self.error:
            out["error"] = self.error[-4096:]
        size = self.log_path.stat().st_size if self.log_path.exists() else 0
        if size != self.log_size:
            self.log_size = size
            out["log"] = _tail(self.log_path)
        return out


class ReplicaSupervisor:
    def __init__(
        self,
        client: AgentClient,
        node_id: str,
        node_dir: Path,
        address: str,
        sandbox: Sandbox,
        stop: threading.Event,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.client = client
        self.node_id = node_id
        self.root = node_dir / "replicas"
        self.address = address
        self.sandbox = sandbox
        self.stop = stop
        self.env = dict(os.environ if env is None else env)
        self.hosted: dict[str, Hosted] = {}
        self.lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @classmethod
    def wanted(cls, env: Mapping[str, str]) -> bool:
        return bool(env.get("CLOUDLET_ONLINE_REPLICAS") or env.get("CLOUDLET_INSTANCE"))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="replicas", daemon=True)
        self._thread.start()

    def close(self) -> None:
        with self.lock:
            hosted = list(self.hosted.values())
            self.hosted.clear()
        for replica in hosted:
            self._end(replica)

    # -- the reconcile loop --------------------------------------------------------------------
    def _loop(self) -> None:
        path = f"/agent/v1/nodes/{self.node_id}/replicas"
        while not self.stop.is_set():
            if not self.address:  # where the control plane reaches this node: as the poll says
                with contextlib.suppress(Unreachable):
                    self.address = self.client.local_address()
            with self.lock:
                report = {rid: r.status(self.address) for rid, r in self.hosted.items()}
            try:
                answer = self.client.call("POST", path, {"replicas": report}) or {}
            except Revoked:
                return
            except (Unreachable, HTTPStatusError) as exc:
                for replica in self.hosted.values():
                    replica.log_size = -1  # send the log again once the server answers
                if not isinstance(exc, HTTPStatusError) or exc.status != 404:
                    log(f"replica report failed, retrying: {exc}")
                self.stop.wait(IDLE_PERIOD_S)
                continue
            desired = {str(s["id"]): s for s in answer.get("replicas") or [] if isinstance(s, dict)}
            self._reconcile(desired)
            with self.lock:  # quick while something changes, slow in the steady state
                settling = set(desired) != set(self.hosted) or any(
                    r.state == "starting" or r.log_grew() for r in self.hosted.values()
                )
            self.stop.wait(PERIOD_S if settling else IDLE_PERIOD_S)

    def _reconcile(self, desired: dict[str, dict[str, Any]]) -> None:
        with self.lock:
            gone = [r for rid, r in self.hosted.items() if rid not in desired]
            for replica in gone:
                del self.hosted[replica.id]
            fresh = []
            for rid, spec in desired.items():
                if rid not in self.hosted:
                    replica = Hosted(rid, spec, self.root / rid)
                    self.hosted[rid] = replica
                    fresh.append(replica)
        for replica in gone:
            threading.Thread(target=self._end, args=(replica,), name=f"end-{replica.id}", daemon=True).start()
        for replica in fresh:
            threading.Thread(target=self._begin, args=(replica,), name=replica.id, daemon=True).start()

    # -- one replica ---------------------------------------------------------------------------
    def _begin(self, replica: Hosted) -> None:
        try:
            shutil.rmtree(replica.folder, ignore_errors=True)
            replica.folder.mkdir(parents=True)
            code, model = replica.folder / "code", replica.folder / "model"
            self._fetch(str(replica.spec["code_url"]), code)
            self._fetch(str(replica.spec["model_url"]), model)
            env, python = self._environment(replica)
            if replica.stop.is_set():
                return
            self._launch(replica, code, model, env, python)
            # This thread forked the sandbox, whose --die-with-parent is this *thread*'s death:
            # it lives as long as the replica.
            assert replica.proc is not None
            replica.proc.wait()
        except Exception as exc:  # reported; the control plane decides what follows
            replica.error = f"{type(exc).__name__}: {exc}"
            replica.note(f"cloudlet-agent: the replica could not start: {replica.error}\n")
            replica.state = "failed"

    def _fetch(self, url: str, target: Path) -> None:
        archive = target.with_suffix(".tar.gz")
        self.client.download(url, str(archive))
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive, "r:*") as tar:
            tar.extractall(target, filter="data")
        archive.unlink(missing_ok=True)

    def _environment(self, replica: Hosted) -> tuple[dict[str, str], str]:
        # As a job's: the allowlist of the agent's environment (the node's tags, so the provider
        # finds the replica's processes; TLS and index settings for a build), never its token.
        env = {
            "LANG": "C.UTF-8",
            **user_environment(self.env),
            "HOME": "/tmp" if self.sandbox.enabled else str(replica.folder),
        }
        env.setdefault("PATH", "/usr/bin:/bin")
        spec = replica.spec.get("environment")
        if isinstance(spec, dict) and spec.get("kind") in ("venv", "image"):
            from cloudlet.nodekit import envs  # imported on first use: the idle agent stays small

            cache = envs.cache_root(self.root.parent, self.env)
            added = envs.prepare(
                spec, cache, replica.note, stop=replica.stop, base_env=env, sandbox=self.sandbox
            )
            env.update(added)
            if added.get("VIRTUAL_ENV"):
                return env, str(Path(added["VIRTUAL_ENV"]) / "bin" / "python")
        # The node's own inference interpreter, else the one the control plane names (a node on
        # its host shares its files), else the node's python3.
        hinted = str(replica.spec.get("python") or "")
        python = self.env.get("CLOUDLET_INFERENCE_PYTHON") or (
            hinted if os.path.exists(hinted) else "python3"
        )
        return env, python

    def _launch(self, replica: Hosted, code: Path, model: Path, env: dict[str, str], python: str) -> None:
        script = str(replica.spec["scoring_script"])
        port, health = free_port(), free_port()
        variables = replica.spec.get("variables") or {}
        env["WORKER_COUNT"] = "1"  # azmlinfsrv's default; the deployment's variables may raise it
        env.update({str(k): str(v) for k, v in variables.items()})
        env.update(
            {
                "AML_APP_ROOT": str(code),
                "AZUREML_ENTRY_SCRIPT": script,
                "AZUREML_MODEL_DIR": str(model),
                "SERVER_PORT": str(port),
            }
        )
        argv = [
            python, "-m", "azureml_inference_server_http",
            "--entry_script", str(code / script), "--model_dir", str(model),
            "--port", str(port), "--health_port", str(health),
        ]  # fmt: skip
        venv = Path(python).parent.parent
        binds = [*self.sandbox.venv_binds(venv), Bind(str(code)), Bind(str(model))]
        if self.sandbox.enabled:
            self.sandbox.hand_over(code, recursive=True)
            self.sandbox.hand_over(model, recursive=True)
        wrapped = self.sandbox.wrap(argv, cwd=code, binds=binds)
        with replica.log_path.open("ab") as out:
            replica.proc = subprocess.Popen(
                wrapped, cwd=code, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        replica.port, replica.state = port, "running"
        log(f"replica {replica.id} started on port {port} (pid {replica.proc.pid})")
        if replica.stop.is_set():
            self._kill(replica)

    def _end(self, replica: Hosted) -> None:
        replica.stop.set()
        self._kill(replica)
        shutil.rmtree(replica.folder, ignore_errors=True)

    def _kill(self, replica: Hosted) -> None:
        proc = replica.proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT_S
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(2)
