"""Bootstrapping a host over SSH (asyncssh): probe its facts, install the agent, start and stop
nodes, uninstall. Reusable by anything that runs the agent on a machine it reaches by SSH (SSH
locations, attached VMs).

The agent is standard-library only, so the host needs a Python (>= 3.10) and nothing from the
internet: ``agent_bundle()`` packs ``cloudlet/__init__.py``, ``cloudlet/agent/`` and
``cloudlet/nodekit/`` of this server into a tarball named by its hash, ``install_agent`` copies
it over SFTP into ``<agent dir>/versions/<hash>/`` (once per version) and the host runs it as
``python3 -m cloudlet.agent`` with that folder on ``PYTHONPATH``. Nodes are driven by the bundle's
``cloudlet.agent.hostctl`` (one command per call, one JSON line back).

Every function takes an open ``asyncssh.SSHClientConnection`` and is a coroutine: the caller owns
the event loop (``providers/ssh.py`` runs one on a thread of its own).
"""

from __future__ import annotations

import hashlib
import io
import json
import shlex
import tarfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import asyncssh

import cloudlet

MIN_PYTHON = (3, 10)
PROBE = r"""
echo "os=$(uname -s)"
echo "arch=$(uname -m)"
echo "home=$HOME"
echo "cores=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)"
echo "mem_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo 2>/dev/null)"
PY=__PYTHON__
echo "python=$(command -v $PY 2>/dev/null)"
echo "python_version=$($PY -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null)"
if [ -d /run/systemd/system ] && command -v systemd-run >/dev/null 2>&1; then echo "init=systemd"; \
else echo "init=none"; fi
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits 2>/dev/null | sed 's/^/gpu=/'
fi
"""


class HostError(Exception):
    """The host cannot run nodes (the message says why and what to do)."""


@dataclass(frozen=True)
class HostFacts:
    os: str
    arch: str
    home: str
    cores: int
    memory_gb: float
    python: str  # the interpreter's path on the host ("" when none)
    python_version: tuple[int, ...]
    init: str  # "systemd" or "none" (a watchdog supervises the agent)
    gpus: tuple[str, ...] = ()  # one model name per GPU (nvidia-smi)

    def to_json(self) -> dict[str, Any]:
        return {
            "os": self.os,
            "arch": self.arch,
            "cores": self.cores,
            "memory_gb": self.memory_gb,
            "python": self.python,
            "python_version": ".".join(map(str, self.python_version)),
            "init": self.init,
            "gpus": list(self.gpus),
        }


def parse_facts(text: str) -> HostFacts:
    """The probe's ``key=value`` lines as facts (pure)."""
    values: dict[str, str] = {}
    gpus: list[str] = []
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key == "gpu":
            gpus.append(value.split(",")[0].strip())
        else:
            values[key.strip()] = value.strip()

    def number(key: str) -> int:
        raw = values.get(key, "")
        return int(raw) if raw.isdigit() else 0

    version = tuple(int(p) for p in values.get("python_version", "").split(".") if p.isdigit())
    return HostFacts(
        os=values.get("os", ""),
        arch=values.get("arch", ""),
        home=values.get("home", ""),
        cores=number("cores"),
        memory_gb=round(number("mem_kb") / 1024**2, 2),
        python=values.get("python", ""),
        python_version=version,
        init=values.get("init", "none"),
        gpus=tuple(g for g in gpus if g),
    )


def check_facts(facts: HostFacts, python: str) -> None:
    """Raises HostError when the host cannot run the agent (pure)."""
    if facts.os != "Linux":
        raise HostError(f"the host runs {facts.os or 'an unknown OS'}; cloudlet's agent needs Linux")
    if not facts.python or not facts.python_version:
        raise HostError(f"no '{python}' on the host: install Python >= 3.10 or set 'python' in the config")
    if facts.python_version[:2] < MIN_PYTHON:
        found = ".".join(map(str, facts.python_version))
        raise HostError(f"the host's {python} is {found}; the agent needs Python >= 3.10")
    if facts.cores < 1 or facts.memory_gb <= 0:
        raise HostError("cannot read the host's cores and memory (nproc, /proc/meminfo)")


@dataclass(frozen=True)
class AgentBundle:
    version: str  # the first 16 hex digits of the tarball's SHA-256
    data: bytes


@lru_cache(maxsize=1)
def agent_bundle() -> AgentBundle:
    """``cloudlet/__init__.py``, ``cloudlet/agent/*.py`` and ``cloudlet/nodekit/*.py`` as a
    reproducible tar.gz."""
    package = Path(cloudlet.__file__).resolve().parent
    files = [package / "__init__.py"]
    for part in ("agent", "nodekit"):  # nodekit: what the agent shares with the control plane
        files += sorted((package / part).glob("*.py"))
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in files:
            data = path.read_bytes()
            info = tarfile.TarInfo(str(path.relative_to(package.parent)))
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    tarball = raw.getvalue()
    return AgentBundle(hashlib.sha256(tarball).hexdigest()[:16], tarball)


# -- calls ------------------------------------------------------------------------------------
async def run(conn: asyncssh.SSHClientConnection, command: str, timeout: float = 30.0) -> str:
    """Run ``command``; its stdout, or HostError with its stderr when it fails."""
    try:
        result = await conn.run(command, check=False, timeout=timeout)
    except (asyncssh.Error, OSError, TimeoutError) as exc:
        raise HostError(f"running a command failed: {exc}") from exc
    if result.exit_status != 0:
        err = str(result.stderr or result.stdout or "").strip()[-2000:]
        raise HostError(f"`{command.split(chr(10))[0][:80]}` exited with {result.exit_status}: {err}")
    return str(result.stdout or "")


async def probe(conn: asyncssh.SSHClientConnection, python: str = "python3") -> HostFacts:
    """The host's OS, arch, cores, memory, Python, init system and GPUs; HostError if unusable."""
    facts = parse_facts(await run(conn, PROBE.replace("__PYTHON__", shlex.quote(python))))
    check_facts(facts, python)
    return facts


def version_dir(agent_dir: str, bundle: AgentBundle) -> str:
    return f"{agent_dir}/versions/{bundle.version}"


async def install_agent(
    conn: asyncssh.SSHClientConnection, agent_dir: str, python: str, bundle: AgentBundle | None = None
) -> str:
    """Copy the agent to the host unless this version is there; the folder to put on PYTHONPATH."""
    bundle = bundle or agent_bundle()
    target = version_dir(agent_dir, bundle)
    marker = f"{target}/.complete"
    async with conn.start_sftp_client() as sftp:
        if await sftp.exists(marker):
            return target
        await sftp.makedirs(f"{agent_dir}/versions", exist_ok=True)
        await sftp.makedirs(f"{agent_dir}/nodes", exist_ok=True)
        part = f"{target}.tgz.part"
        async with sftp.open(part, "wb") as f:
            await f.write(bundle.data)
    unpack = (
        "import sys, tarfile, os; t = tarfile.open(sys.argv[1]); "
        "t.extractall(sys.argv[2], filter='data') if hasattr(tarfile, 'data_filter') "
        "else t.extractall(sys.argv[2]); os.remove(sys.argv[1]); open(sys.argv[3], 'w').close()"
    )
    q = shlex.quote
    await run(conn, f"{q(python)} -c {q(unpack)} {q(part)} {q(target)} {q(marker)}")
    return target


def _hostctl(python: str, pythonpath: str, *args: str) -> str:
    q = shlex.quote
    return f"PYTHONPATH={q(pythonpath)} {q(python)} -m cloudlet.agent.hostctl " + " ".join(q(a) for a in args)


async def start_agent(
    conn: asyncssh.SSHClientConnection, python: str, pythonpath: str, node_dir: str, env: dict[str, str]
) -> dict[str, Any]:
    """Write the node's environment (mode 600) and start its agent, supervised."""
    async with conn.start_sftp_client() as sftp:
        await sftp.makedirs(node_dir, exist_ok=True)
        part = f"{node_dir}/env.json.part"
        async with sftp.open(part, "w", asyncssh.SFTPAttrs(permissions=0o600)) as f:
            await f.write(json.dumps(env))
        await sftp.posix_rename(part, f"{node_dir}/env.json")
    out = await run(conn, _hostctl(python, pythonpath, "start", node_dir))
    return dict(json.loads(out.strip().splitlines()[-1]))


async def stop_agent(conn: asyncssh.SSHClientConnection, python: str, pythonpath: str, node_dir: str) -> None:
    await run(conn, _hostctl(python, pythonpath, "stop", node_dir))


async def list_agents(
    conn: asyncssh.SSHClientConnection, python: str, pythonpath: str, agent_dir: str, installation: str
) -> list[dict[str, Any]]:
    out = await run(conn, _hostctl(python, pythonpath, "list", agent_dir, installation))
    return list(json.loads(out.strip().splitlines()[-1]))


async def agent_log(
    conn: asyncssh.SSHClientConnection, python: str, pythonpath: str, node_dir: str, tail_bytes: int
) -> str:
    out = await run(conn, _hostctl(python, pythonpath, "log", node_dir, str(tail_bytes)))
    return str(json.loads(out.strip().splitlines()[-1]).get("log", ""))


async def uninstall(conn: asyncssh.SSHClientConnection, python: str, agent_dir: str) -> None:
    """Stop every node under ``agent_dir`` (any installation) and remove the folder."""
    bundle = agent_bundle()
    pythonpath = version_dir(agent_dir, bundle)
    q = shlex.quote
    script = (
        f'for d in {q(agent_dir)}/nodes/*/; do [ -d "$d" ] && '
        f"{_hostctl(python, pythonpath, 'stop', '$D')} ; done; rm -rf {q(agent_dir)}"
    ).replace("'$D'", '"$d"')
    await run(conn, script, timeout=120)
