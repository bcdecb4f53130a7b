"""Online replicas run as sandboxed processes of this machine (``--local`` deployments): the real
``azmlinfsrv`` in the node sandbox of jobs, from the deployment's own environment when it has one.

Split from ``control/online_replicas.py`` (the runtime decides *when* a replica starts; this
module is *how* one starts here).
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cloudlet.control.online_placement import replica_environment
from cloudlet.domain.endpoints import online_endpoints as rules
from cloudlet.nodekit.sandbox import Bind, Policy, Sandbox, user_environment
from cloudlet.providers.local import sandbox_env


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def process_interpreter(
    spec: rules.DeploymentSpec,
    default_python: str,
    cache_root: Path,
    log_path: Path,
    sandbox: Sandbox,
    stop: threading.Event,
) -> tuple[str, dict[str, str]]:
    """The interpreter of a replica run as a process of this machine (``--local``), and the
    variables its environment adds: the deployment's environment built here as a node's agent
    builds it (``nodekit/envs.py``, in the sandbox, cached by hash beside the local provider's job
    environments), else DEFAULT_PYTHON (the server's inference interpreter), as
    ``replica_environment`` decides for nodes. The build's notes go to
    LOG_PATH (the replica's log: ``get-logs`` shows them); a failed build raises ``BuildFailed``."""
    wanted = replica_environment(spec)
    if wanted is None or wanted.get("kind") not in ("venv", "image"):
        return default_python, {}
    from cloudlet.nodekit import envs  # imported on first use, as the agent does

    base = {
        "LANG": "C.UTF-8",
        **user_environment(os.environ),  # the allowlist a job gets: index and TLS settings, no secret
        "HOME": "/tmp" if sandbox.enabled else str(log_path.parent),
    }
    base.setdefault("PATH", "/usr/bin:/bin")

    def note(text: str) -> None:
        with log_path.open("a", encoding="utf-8") as out:
            out.write(text)

    added = envs.prepare(wanted, cache_root, note, stop=stop, base_env=base, sandbox=sandbox)
    venv = added.get("VIRTUAL_ENV")
    if not venv:  # an image with no packages: the agent's warning is in the log
        return default_python, {}
    return str(Path(venv) / "bin" / "python"), {"VIRTUAL_ENV": venv, "PATH": added["PATH"]}


class ProcessReplicas:
    """Starts replica processes: PYTHON is the server's inference interpreter, ENV_CACHE where
    deployments' environments are built, SPAWNER the runtime's one long-lived thread."""

    def __init__(
        self,
        python: str,
        env_cache: Path,
        installation: str,
        spawner: ThreadPoolExecutor,
        stopping: threading.Event,
    ) -> None:
        self.python, self.env_cache, self.installation = python, env_cache, installation
        self.spawner, self.stopping = spawner, stopping

    def sandbox(self, folder: Path) -> Sandbox:
        """The node sandbox of jobs (nodekit/sandbox.py), with the settings the local provider gives
        its agents (``CLOUDLET_SANDBOX``: bwrap unless ``none``)."""
        settings = sandbox_env()
        policy = Policy.from_env({**os.environ, **settings})
        return Sandbox(policy, hostname="online-replica", state_dir=folder / "sandbox", python=self.python)

    def interpreter(
        self, spec: rules.DeploymentSpec, folder: Path, log_path: Path
    ) -> tuple[str, dict[str, str]]:
        return process_interpreter(
            spec, self.python, self.env_cache, log_path, self.sandbox(folder), self.stopping
        )

    def start(
        self, spec: rules.DeploymentSpec, code_dir: Path, model_dir: Path, log_path: Path
    ) -> tuple[int, subprocess.Popen[bytes]]:
        """One replica of SPEC serving CODE_DIR and MODEL_DIR, its output appended to LOG_PATH:
        its port and process."""
        port, health = free_port(), free_port()
        folder = code_dir.parent
        sandbox = self.sandbox(folder)
        python, added = self.interpreter(spec, folder, log_path)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": "/tmp" if sandbox.enabled else str(folder),
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",  # a traceback is in the log when the 424 is answered
            **added,  # the deployment's environment: VIRTUAL_ENV and its PATH
            # azmlinfsrv's own default; a deployment's environment_variables may raise it, as on Azure.
            "WORKER_COUNT": "1",
            **spec.environment_variables,
            "AML_APP_ROOT": str(code_dir),
            "AZUREML_ENTRY_SCRIPT": spec.scoring_script,
            "AZUREML_MODEL_DIR": str(model_dir),
            "SERVER_PORT": str(port),
            "CLOUDLET_INSTALLATION": self.installation,
        }
        argv = [
            python, "-m", "azureml_inference_server_http",
            "--entry_script", str(code_dir / spec.scoring_script), "--model_dir", str(model_dir),
            "--port", str(port), "--health_port", str(health),
        ]  # fmt: skip
        # It sees the system folders, its interpreter's environment, its code and model (read-only)
        # and nothing else of the host; the network is the host's (the gateway dials 127.0.0.1).
        venv = Path(python).parent.parent
        binds = [*sandbox.venv_binds(venv), Bind(str(code_dir)), Bind(str(model_dir))]
        binds += [Bind(str(p.resolve())) for p in model_dir.iterdir() if p.is_symlink()]
        if sandbox.enabled:
            sandbox.hand_over(code_dir, recursive=True)
            sandbox.hand_over(model_dir, recursive=True)
        wrapped = sandbox.wrap(argv, cwd=code_dir, binds=binds)
        with log_path.open("ab") as out:
            # Started from the runtime's one long-lived thread: the sandbox's --die-with-parent
            # is the death of the *thread* that forked it, and a roll-out's thread ends.
            proc = self.spawner.submit(
                subprocess.Popen,
                wrapped,
                cwd=code_dir,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            ).result()
        return port, proc
