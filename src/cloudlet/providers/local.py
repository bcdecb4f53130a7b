"""Nodes as local agent processes, optionally confined by cgroup v1 CPU and memory limits.

Each node is a directory `root/<node_id>/{os,mnt,work}` and an agent process in its own session
(it outlives a crashed server). Every node process carries `CLOUDLET_INSTALLATION` and
`CLOUDLET_NODE_ID` in its environment, which is how `list_nodes` finds orphans and how
`terminate` finds a node's leftover processes (sandboxed ones too: their /proc entries are the
host's to read).

The agent runs as the server's user; the node's user processes (jobs, environment builds, an
instance's apps) run in a bubblewrap sandbox as an unprivileged user (docs/isolation.md): the
provider tells the agent so in `CLOUDLET_SANDBOX*`, and refuses to make a node without `bwrap`
unless the server's environment says `CLOUDLET_SANDBOX=none` (unsafe; for development only).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import cloudlet
from cloudlet.providers.base import NodeHandle, NodeRequest, ProviderError

logger = logging.getLogger(__name__)

AGENT_LOG = "agent.log"
LOCAL_NODE_ADDRESS = "127.0.0.1"
NODE_SUBDIRS = ("os", "mnt", "work")
MEMORY_FLOOR_BYTES = 256 * 1024**2
DEFAULT_CFS_PERIOD_US = 100_000
TERM_WAIT_S = 2.0
PASS_ENV = (
    *("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "LD_LIBRARY_PATH"),
    *("CLOUDLET_UV", "CLOUDLET_ENV_CACHE"),  # job environments: uv to build them with, their cache
    "CLOUDLET_PYTHONS",  # ... and the interpreters a pinned Python may be built on (nodekit/envs.py)
    "CLOUDLET_BOOT_DELAY_S",  # a simulated boot time (see agent/main.py)
    "CLOUDLET_AGENT_ORPHAN_GRACE_S",  # how long an agent waits for an unreachable control plane
    "CLOUDLET_MONITOR_INTERVAL_S",  # how often the agent samples its runs' resources (agent/monitor.py)
    # http(s) inputs: the host's proxy (the agent's control-plane client does not use it), limits
    *("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"),
    *("CLOUDLET_MAX_DOWNLOAD_BYTES", "CLOUDLET_DOWNLOAD_TIMEOUT_S"),
    # 0: local nodes move jobs' data over HTTP as remote hosts do (tests, docs/providers.md)
    *("CLOUDLET_SHARED_FILESYSTEM", "CLOUDLET_CHECKPOINT_UPLOAD_S"),
    "PYTHONPATH",  # the agent runs the server's own code (a checkout first on the server's path)
)
PASS_ENV_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "SSL_CERT_", "UV_", "PIP_")  # UV_/PIP_: index, cache
CONTROLLERS = ("cpu", "memory")
SANDBOX_MODES = ("bwrap", "none")
NO_BWRAP = (
    "bubblewrap (bwrap) is not installed: the local provider runs every node's jobs and apps in a "
    "bubblewrap sandbox as an unprivileged user. Install it (apt-get install bubblewrap), or set "
    "CLOUDLET_SANDBOX=none in the server's environment to run them unisolated, as the server's user "
    "(unsafe: a job could read the server's credentials; for development only)"
)


# -- pure helpers -----------------------------------------------------------------------------
def cpu_quota_us(vcpus: float, period_us: int = DEFAULT_CFS_PERIOD_US) -> int:
    """cfs_quota_us for `vcpus` CPUs (the kernel's minimum is 1000 µs)."""
    return max(1000, round(vcpus * period_us))


def memory_limit_bytes(memory_gb: float) -> int:
    return max(MEMORY_FLOOR_BYTES, int(memory_gb * 1024**3))


def parse_environ(raw: bytes) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def is_agent_cmdline(raw: bytes) -> bool:
    argv = raw.split(b"\0")
    return any(a == b"-m" and b == b"cloudlet.agent" for a, b in itertools.pairwise(argv))


def agent_env(
    req: NodeRequest, node_dir: Path, python: str, base: dict[str, str] | None = None
) -> dict[str, str]:
    """The agent's environment: a few host variables, the request's extras, the protocol's."""
    base = dict(os.environ) if base is None else base
    env = {k: v for k, v in base.items() if k in PASS_ENV or k.startswith(PASS_ENV_PREFIXES)}
    python_bin = str(Path(python).parent)
    path = env.get("PATH", os.defpath)
    if python_bin not in path.split(os.pathsep):
        env["PATH"] = python_bin + os.pathsep + path  # jobs' `python` is the agent's interpreter
    src = Path(cloudlet.__file__).resolve().parent.parent
    other_python = os.path.abspath(python) != os.path.abspath(sys.executable)
    if other_python and src.name not in ("site-packages", "dist-packages"):
        env["PYTHONPATH"] = str(src)  # an interpreter without cloudlet installed still finds the agent
    env.update(req.env)
    env.update(
        {
            "CLOUDLET_SERVER": req.server_url,
            "CLOUDLET_NODE_ID": req.node_id,
            "CLOUDLET_NODE_TOKEN": req.token,
            "CLOUDLET_NODE_DIR": str(node_dir),
            "CLOUDLET_INSTALLATION": req.installation_id,
            "CLOUDLET_NODE_VCPUS": f"{req.vcpus:g}",
            "CLOUDLET_NODE_MEMORY_GB": f"{req.memory_gb:g}",
            "CLOUDLET_NODE_GPUS": str(req.gpus),
            "CLOUDLET_NODE_SIZE": req.size,
            "CLOUDLET_NODE_TIER": req.tier,
            "CLOUDLET_NODE_ADDRESS": LOCAL_NODE_ADDRESS,  # the node is this host
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def sandbox_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The agent's sandbox settings (nodekit/sandbox.py) from the server's environment:
    ``CLOUDLET_SANDBOX`` (``bwrap``, the default, or ``none``), ``CLOUDLET_SANDBOX_UID``/``_GID``,
    ``CLOUDLET_LAUNCHER`` (``off``: a bwrap per job run rather than the node's launcher).
    Raises ProviderError when the sandbox cannot be had (no ``bwrap``) or is misconfigured."""
    base = dict(os.environ) if base is None else base
    mode = (base.get("CLOUDLET_SANDBOX") or "bwrap").strip().lower()
    if mode not in SANDBOX_MODES:
        raise ProviderError(f"CLOUDLET_SANDBOX must be bwrap or none, got {mode!r}")
    if mode == "none":
        return {"CLOUDLET_SANDBOX": "none"}
    if shutil.which("bwrap") is None:
        raise ProviderError(NO_BWRAP)
    if os.geteuid() == 0 and not (shutil.which("setpriv") and shutil.which("unshare")):
        raise ProviderError("the sandbox needs setpriv and unshare: apt-get install util-linux")
    env = {"CLOUDLET_SANDBOX": "bwrap"}
    if (base.get("CLOUDLET_LAUNCHER") or "").strip():
        env["CLOUDLET_LAUNCHER"] = base["CLOUDLET_LAUNCHER"].strip()
    for name in ("CLOUDLET_SANDBOX_UID", "CLOUDLET_SANDBOX_GID"):
        raw = (base.get(name) or "").strip()
        if raw:
            if not raw.isdigit() or int(raw) == 0:
                raise ProviderError(f"{name} must name an unprivileged user's id, got {raw!r}")
            env[name] = raw
    return env


# -- /proc ------------------------------------------------------------------------------------
def _read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def process_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    stat = _read_bytes(f"/proc/{pid}/stat")
    if stat is None:
        return False
    state = stat.rpartition(b")")[2].split()
    return bool(state) and state[0] != b"Z"


def node_processes(node_id: str, installation_id: str) -> list[int]:
    """Live pids whose environment tags them with this node and installation."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        raw = _read_bytes(f"/proc/{entry}/environ")
        if not raw or node_id.encode() not in raw:
            continue
        env = parse_environ(raw)
        if env.get("CLOUDLET_NODE_ID") == node_id and env.get("CLOUDLET_INSTALLATION") == installation_id:
            pids.append(int(entry))
    return [p for p in pids if p != os.getpid() and process_alive(p)]


class LocalProvider:
    kind = "local"

    def __init__(
        self,
        root: Path,
        python: str = sys.executable,
        cgroup_parent: str | None = "cloudlet",
        cgroup_root: Path = Path("/sys/fs/cgroup"),
        env_cache: Path | None = None,
    ) -> None:
        self.root = Path(root)
        # Job environments (venvs cached by hash) are shared by every node on this host.
        self.env_cache = Path(env_cache) if env_cache is not None else self.root.parent / "envs"
        self.python = python
        self.cgroup_parent = cgroup_parent.strip("/") if cgroup_parent else None
        self.cgroup_root = cgroup_root
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    # -- cgroups -------------------------------------------------------------------------------
    def cgroup_dirs(self, node_id: str) -> dict[str, Path]:
        if not self.cgroup_parent:
            return {}
        return {c: self.cgroup_root / c / self.cgroup_parent / node_id for c in CONTROLLERS}

    def _setup_cgroups(self, req: NodeRequest) -> tuple[dict[str, Path], str | None]:
        dirs = self.cgroup_dirs(req.node_id)
        if not dirs:
            return {}, "cgroups disabled (cgroup_parent=None)"
        try:
            for controller, path in dirs.items():
                if not (self.cgroup_root / controller).is_dir():
                    raise OSError(f"no cgroup v1 '{controller}' hierarchy at {self.cgroup_root / controller}")
                path.mkdir(parents=True, exist_ok=True)
            period_file = dirs["cpu"] / "cpu.cfs_period_us"
            period = int(period_file.read_text().strip() or DEFAULT_CFS_PERIOD_US)
            (dirs["cpu"] / "cpu.cfs_quota_us").write_text(str(cpu_quota_us(req.vcpus, period)))
            (dirs["memory"] / "memory.limit_in_bytes").write_text(str(memory_limit_bytes(req.memory_gb)))
        except (OSError, ValueError) as exc:
            self._remove_cgroups(dirs)
            return {}, f"resource limits not applied: {exc}"
        return dirs, None

    @staticmethod
    def _remove_cgroups(dirs: dict[str, Path], wait_s: float = 0.0) -> None:
        deadline = time.monotonic() + wait_s
        for path in dirs.values():
            while path.is_dir():
                try:
                    path.rmdir()
                except OSError:
                    if time.monotonic() >= deadline:
                        logger.warning("could not remove cgroup %s", path)
                        break
                    time.sleep(0.05)

    # -- the provider protocol -----------------------------------------------------------------
    def create(self, req: NodeRequest) -> NodeHandle:
        for existing in self.list_nodes(req.installation_id):
            if existing.node_id == req.node_id:
                return existing  # idempotent: a retried create does not start a second agent
        node_dir = (req.node_root or self.root) / req.node_id
        env = agent_env(req, node_dir, self.python)
        env.update(sandbox_env())  # before anything is made: no sandbox, no node
        try:
            for sub in NODE_SUBDIRS:
                (node_dir / sub).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ProviderError(f"cannot make node directory {node_dir}: {exc}") from exc
        env.setdefault("CLOUDLET_ENV_CACHE", str(self.env_cache))
        env.setdefault("CLOUDLET_BUILD_CACHE", str(self.env_cache.parent / "build-cache"))
        # http(s) inputs, cached by URL for every node on this host (written by agents only).
        env.setdefault("CLOUDLET_DOWNLOAD_CACHE", str(self.env_cache.parent / "downloads"))
        dirs, note = self._setup_cgroups(req)
        try:
            with open(node_dir / AGENT_LOG, "ab") as log_file:
                proc = subprocess.Popen(
                    [self.python, "-m", "cloudlet.agent"],
                    env=env,
                    cwd=node_dir,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except OSError as exc:
            self._remove_cgroups(dirs)
            raise ProviderError(f"cannot start the agent with {self.python}: {exc}") from exc
        try:
            for path in dirs.values():
                (path / "cgroup.procs").write_text(str(proc.pid))
        except OSError as exc:
            note = f"resource limits not applied: cannot join cgroup: {exc}"
        if note:
            logger.info("node %s: %s", req.node_id, note)
        self._procs[req.node_id] = proc
        ref = {
            "pid": proc.pid,
            "pgid": proc.pid,
            "node_dir": str(node_dir),
            "agent_log": str(node_dir / AGENT_LOG),
            "installation_id": req.installation_id,
            "cgroups": {c: str(p) for c, p in dirs.items()},
            "limits_applied": note is None,
            "limits_note": note,
        }
        return NodeHandle(node_id=req.node_id, provider_ref=ref)

    def terminate(self, handle: NodeHandle) -> None:
        ref = handle.provider_ref
        installation = str(ref.get("installation_id", ""))
        pid = ref.get("pid")
        proc = self._procs.pop(handle.node_id, None)
        if isinstance(pid, int) and self._is_node_process(pid, handle.node_id):
            self._signal_group(int(ref.get("pgid") or pid), signal.SIGTERM)
            deadline = time.monotonic() + TERM_WAIT_S
            while process_alive(pid) and time.monotonic() < deadline:
                if proc is not None and proc.poll() is not None:
                    break
                time.sleep(0.02)
            self._signal_group(int(ref.get("pgid") or pid), signal.SIGKILL)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1)
        dirs = {c: Path(p) for c, p in (ref.get("cgroups") or {}).items()} or self.cgroup_dirs(handle.node_id)
        for _ in range(20):  # leftovers: runs (own sessions), anything still in the node's cgroups
            pids = set(node_processes(handle.node_id, installation))
            for path in dirs.values():
                raw = _read_bytes(str(path / "cgroup.procs")) or b""
                pids.update(int(p) for p in raw.split() if p.isdigit())
            if not pids:
                break
            for p in pids:
                self._signal_group(p, signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(p, signal.SIGKILL)
            time.sleep(0.05)
        self._remove_cgroups(dirs, wait_s=1.0)
        node_dir = ref.get("node_dir")
        if node_dir:
            for sub in ("work", "mnt"):
                shutil.rmtree(Path(node_dir) / sub, ignore_errors=True)

    def list_nodes(self, installation_id: str) -> list[NodeHandle]:
        found: dict[str, NodeHandle] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            raw = _read_bytes(f"/proc/{entry}/environ")
            if not raw or b"CLOUDLET_INSTALLATION=" not in raw:
                continue
            env = parse_environ(raw)
            node_id = env.get("CLOUDLET_NODE_ID")
            if env.get("CLOUDLET_INSTALLATION") != installation_id or not node_id or node_id in found:
                continue
            pid = int(entry)
            if not is_agent_cmdline(_read_bytes(f"/proc/{pid}/cmdline") or b"") or not process_alive(pid):
                continue
            try:
                pgid = os.getpgid(pid)
            except ProcessLookupError:
                continue
            node_dir = env.get("CLOUDLET_NODE_DIR", "")
            dirs = {c: str(p) for c, p in self.cgroup_dirs(node_id).items() if p.is_dir()}
            ref = {
                "pid": pid,
                "pgid": pgid,
                "node_dir": node_dir,
                "agent_log": str(Path(node_dir) / AGENT_LOG) if node_dir else None,
                "installation_id": installation_id,
                "cgroups": dirs,
                "limits_applied": bool(dirs),
            }
            found[node_id] = NodeHandle(node_id=node_id, provider_ref=ref)
        return sorted(found.values(), key=lambda h: h.node_id)

    # -- optional abilities --------------------------------------------------------------------
    def resource_limits(self, handle: NodeHandle) -> dict[str, Any] | None:
        dirs = {c: Path(p) for c, p in (handle.provider_ref.get("cgroups") or {}).items()}
        try:
            return {
                "cpu_quota_us": int((dirs["cpu"] / "cpu.cfs_quota_us").read_text()),
                "cpu_period_us": int((dirs["cpu"] / "cpu.cfs_period_us").read_text()),
                "memory_bytes": int((dirs["memory"] / "memory.limit_in_bytes").read_text()),
            }
        except (KeyError, OSError, ValueError):
            return None

    def node_log(self, handle: NodeHandle, tail_bytes: int = 65536) -> str:
        path = handle.provider_ref.get("agent_log")
        if not path:
            return ""
        try:
            with open(path, "rb") as f:
                f.seek(max(0, os.path.getsize(path) - tail_bytes))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def exit_code(self, handle: NodeHandle) -> int | None:
        """The agent's exit status if this provider started it and it has exited, else None."""
        proc = self._procs.get(handle.node_id)
        return None if proc is None else proc.poll()

    # -- helpers -------------------------------------------------------------------------------
    @staticmethod
    def _is_node_process(pid: int, node_id: str) -> bool:
        env = parse_environ(_read_bytes(f"/proc/{pid}/environ") or b"")
        return env.get("CLOUDLET_NODE_ID") == node_id and process_alive(pid)

    @staticmethod
    def _signal_group(pgid: int, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
