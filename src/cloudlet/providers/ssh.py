"""SSH hosts as a location: nodes are agents on machines cloudlet reaches over SSH (asyncssh).

The location's configuration (``SshConfig``) lists the hosts; the provider connects to each (through
``proxy_jump`` when given), checks it and installs the agent from this server
(``providers/ssh_hosts.py``), and keeps one connection per host open, so a node's start is one
SFTP write and one command. The provider interface is synchronous and called from the control
loops' threads: every SSH call runs on the provider's own event loop, on a thread of its own.

Nodes are slices of a host (the size's cores and memory) or whole hosts (``domain/compute/host_placement``).
The provider owns its capacity (``CapacityOwner``): the hosts' cores, memory and GPUs, so the
autoscaler places nodes by what the hosts have. ``list_nodes`` asks each host for the nodes of this
installation (orphans after a crash included); a host that cannot be reached keeps its last listing,
so its nodes go lost through the usual path (their agents stop reporting) and their jobs requeue;
a host that comes back is connected to again and its leftovers are terminated as orphans.

Agents dial the control plane over TLS (the server's HTTPS listener, its CA copied to the host) at
the address the server listens on; a server that listens on loopback cannot be reached from other
hosts, which ``create`` says (``server_address`` names the address hosts reach the server at).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import shlex
import threading
import urllib.parse
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import asyncssh

from cloudlet.domain.compute.host_placement import HostRoom, Slice, place, total
from cloudlet.domain.compute.sizes import ISOLATED_SIZES
from cloudlet.providers import ssh_hosts
from cloudlet.providers.base import (
    HOST_DISK_ENV,
    HOST_SHARE_ENV,
    HOST_SHARE_USER_ENV,
    PIN_HOST_ENV,
    Capacity,
    NodeHandle,
    NodeRequest,
    ProviderError,
)
from cloudlet.providers.ssh_config import SshConfig, SshHostConfig
from cloudlet.providers.ssh_host_keys import HostKeyJudge, HostKeyRefused, HostKeyStore, MemoryHostKeys

log = logging.getLogger(__name__)
T = TypeVar("T")
CALL_TIMEOUT_S = 120.0
LOOPBACK = ("127.0.0.1", "localhost", "::1", "0.0.0.0", "")
RETRY_CONNECT_S = 5.0  # an unreachable host is tried again after this long


@dataclass
class _Host:
    config: SshHostConfig
    conn: asyncssh.SSHClientConnection | None = None
    facts: ssh_hosts.HostFacts | None = None
    pythonpath: str = ""  # the installed agent version's folder
    agent_dir: str = ""
    error: str = ""
    failed_at: float = float("-inf")
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # node id -> its provider ref
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def key(self) -> str:
        return f"{self.config.user}@{self.config.address}:{self.config.port}"


class SshProvider:
    kind = "ssh"

    def __init__(
        self,
        config: SshConfig,
        home: Path,
        installation_id: str = "",
        host_keys: HostKeyStore | None = None,
        scope: str = "",
    ) -> None:
        self.config = config
        self.host_keys: HostKeyStore = host_keys or MemoryHostKeys()
        self.scope = scope
        self.home = Path(home)
        self.installation_id = installation_id
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="ssh-provider", daemon=True)
        self._thread.start()
        self._hosts = [_Host(h) for h in config.hosts]
        self._jump: asyncssh.SSHClientConnection | None = None
        self._place_lock = threading.Lock()

    # -- the private loop -------------------------------------------------------------------------
    def _call(self, coro: Coroutine[Any, Any, T], timeout: float = CALL_TIMEOUT_S) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def close(self) -> None:
        async def _close() -> None:
            for host in self._hosts:
                if host.conn is not None:
                    host.conn.close()
            if self._jump is not None:
                self._jump.close()

        with contextlib.suppress(Exception):
            self._call(_close(), timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)

    # -- connections ------------------------------------------------------------------------------
    async def _connect_to(
        self, cfg: SshHostConfig, tunnel: asyncssh.SSHClientConnection | None
    ) -> asyncssh.SSHClientConnection:
        """Log in, the host's key checked (``domain/compute/host_keys.py``): a pinned ``host_key``, else
        the ``known_hosts`` file (asyncssh matches both), else the key recorded on first use."""
        recorded: tuple[str, str] | None = None
        known: Any
        if cfg.host_key:
            known = ([asyncssh.import_public_key(cfg.host_key)], [], [])
        elif self.config.known_hosts:
            known = self.config.known_hosts
        else:
            recorded = await asyncio.to_thread(self.host_keys.lookup, self.scope, cfg.address, cfg.port)
            known = ([asyncssh.import_public_key(recorded[0])] if recorded else [], [], [])
        judge = HostKeyJudge(
            f"{cfg.user}@{cfg.address}:{cfg.port}",
            self._accept_fix(cfg),
            cfg.host_key,
            self.config.known_hosts,
            recorded,
        )
        try:
            conn = await asyncio.wait_for(
                asyncssh.connect(
                    cfg.address,
                    port=cfg.port,
                    username=cfg.user,
                    client_keys=[cfg.identity_file],
                    known_hosts=known,
                    client_factory=judge.client,
                    tunnel=tunnel,
                    agent_path=None,
                    keepalive_interval=5,
                    keepalive_count_max=3,
                ),
                self.config.connect_timeout_s,
            )
        except asyncssh.HostKeyNotVerifiable:
            verdict = judge.verdict
            if verdict is None or verdict.error is None:
                raise
            if verdict.source == "changed" and judge.presented:
                refused = judge.presented
                await asyncio.to_thread(self.host_keys.refused, self.scope, cfg.address, cfg.port, refused)
            raise HostKeyRefused(verdict.error) from None
        if judge.verdict is not None and judge.verdict.record and judge.presented:
            await asyncio.to_thread(self.host_keys.record, self.scope, cfg.address, cfg.port, judge.presented)
        return conn

    def _accept_fix(self, cfg: SshHostConfig) -> str:
        if self.scope.startswith("vm:"):
            return "detach the VM and attach it again (`cloudlet compute detach`, then `compute attach`)"
        name = self.scope or "NAME"
        return f"run `cloudlet location update -n {name} --accept-host-key {cfg.address}:{cfg.port}`"

    async def _ready(self, host: _Host) -> None:
        """Connected, checked and with the agent installed; raises ProviderError naming the host."""
        async with host.lock:
            if host.conn is not None and not host.conn.is_closed() and host.pythonpath:
                return
            now = self._loop.time()
            if host.error and now - host.failed_at < RETRY_CONNECT_S:
                raise ProviderError(f"SSH host {host.key}: {host.error}")
            try:
                tunnel = None
                if self.config.proxy_jump is not None:
                    if self._jump is None or self._jump.is_closed():
                        self._jump = await self._connect_to(self.config.proxy_jump, None)
                    tunnel = self._jump
                host.conn = await self._connect_to(host.config, tunnel)
                host.facts = await ssh_hosts.probe(host.conn, self.config.python)
                agent_dir = self.config.agent_dir
                host.agent_dir = agent_dir if agent_dir.startswith("/") else f"{host.facts.home}/{agent_dir}"
                host.pythonpath = await ssh_hosts.install_agent(host.conn, host.agent_dir, self.config.python)
                host.error = ""
            except (OSError, asyncssh.Error, TimeoutError, ssh_hosts.HostError, HostKeyRefused) as exc:
                if host.conn is not None:
                    host.conn.close()
                host.conn, host.pythonpath = None, ""
                host.error, host.failed_at = _describe(exc), self._loop.time()
                raise ProviderError(f"SSH host {host.key}: {host.error}") from exc

    def _by_key(self, key: str) -> _Host | None:
        return next((h for h in self._hosts if h.key == key), None)

    # -- the agent's environment --------------------------------------------------------------------
    def _server(self, req: NodeRequest) -> tuple[str, str | None]:
        """The URL the host's agent dials and the CA that signs it (None: plain HTTP)."""
        url = req.server_url
        ca_pem: str | None = None
        if self.config.tls:
            try:
                cfg = json.loads((self.home / "config.json").read_text())
                url = str(cfg["https_endpoint"])
                ca_pem = Path(str(cfg["ca_file"])).read_text()
            except (OSError, KeyError, ValueError) as exc:
                raise ProviderError(f"the server's HTTPS endpoint and CA are not known yet: {exc}") from exc
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        if self.config.server_address:
            url = urllib.parse.urlunsplit(parts._replace(netloc=f"{self.config.server_address}:{parts.port}"))
        elif host in LOOPBACK:
            raise ProviderError(
                f"the server listens on {host or 'all addresses'} ({url}), which other hosts cannot "
                "reach: start it with --host <an address the SSH hosts reach>, or set "
                "server_address in the location's config"
            )
        return url, ca_pem

    def _env(self, req: NodeRequest, host: _Host, node_dir: str, server: str, whole: bool) -> dict[str, str]:
        python = host.facts.python if host.facts else self.config.python
        python_bin = python.rsplit("/", 1)[0] if "/" in python else ""
        env = {
            # Jobs' `python` is the agent's interpreter (as on a local node).
            "PATH": ":".join(p for p in (python_bin, "/usr/local/bin:/usr/bin:/bin") if p),
            "HOME": host.facts.home if host.facts else "/tmp",
            "LANG": "C.UTF-8",
            "PYTHONPATH": host.pythonpath,
            "CLOUDLET_PYTHON": python,
            **req.env,
            "CLOUDLET_SERVER": server,
            "CLOUDLET_NODE_ID": req.node_id,
            "CLOUDLET_NODE_TOKEN": req.token,
            "CLOUDLET_NODE_DIR": node_dir,
            "CLOUDLET_INSTALLATION": req.installation_id,
            "CLOUDLET_NODE_VCPUS": f"{req.vcpus:g}",
            "CLOUDLET_NODE_MEMORY_GB": f"{req.memory_gb:g}",
            "CLOUDLET_NODE_GPUS": str(req.gpus),
            "CLOUDLET_NODE_SIZE": req.size,
            "CLOUDLET_NODE_TIER": req.tier,
            "CLOUDLET_NODE_ADDRESS": host.config.address,
            "CLOUDLET_SANDBOX": self.config.sandbox,
            "CLOUDLET_ENV_CACHE": f"{host.agent_dir}/envs",
            "CLOUDLET_BUILD_CACHE": f"{host.agent_dir}/build-cache",
            "CLOUDLET_DOWNLOAD_CACHE": f"{host.agent_dir}/downloads",
            "CLOUDLET_WHOLE_HOST": "1" if whole else "0",
            "CLOUDLET_SHARED_FILESYSTEM": "1" if self.config.shared_filesystem else "0",
            "PYTHONUNBUFFERED": "1",
        }
        if server.startswith("https://"):
            env["CLOUDLET_CA_FILE"] = f"{host.agent_dir}/ca.pem"
        env.update(_instance_disks(req.env, host.agent_dir))
        return env

    # -- the provider protocol ---------------------------------------------------------------------
    def create(self, req: NodeRequest) -> NodeHandle:
        server, ca_pem = self._server(req)
        return self._call(self._create(req, server, ca_pem))

    async def _create(self, req: NodeRequest, server: str, ca_pem: str | None) -> NodeHandle:
        for known in self._hosts:
            if req.node_id in known.nodes:
                return NodeHandle(req.node_id, dict(known.nodes[req.node_id]))  # a retried create
        await asyncio.gather(*(self._try_ready(h) for h in self._hosts))
        rooms = [self._room(h) for h in self._hosts]
        pinned = req.env.get(PIN_HOST_ENV)
        if pinned:  # an instance's next node goes where its OS disk is
            rooms = [r for r in rooms if r.key == pinned]
            if not rooms:
                raise ProviderError(
                    f"the instance's OS disk is on SSH host {pinned}, which is no longer in the "
                    "location's hosts: put it back, or delete the instance and create it again"
                )
        placement = place(
            rooms,
            req.vcpus,
            req.memory_gb,
            req.gpus,
            isolated=req.size in ISOLATED_SIZES,
        )
        if placement.host is None:
            where = f"the instance's OS disk is on SSH host {pinned}: " if pinned else ""
            raise ProviderError(where + placement.reason)
        host = self._by_key(placement.host)
        assert host is not None and host.conn is not None
        node_dir = f"{host.agent_dir}/nodes/{req.node_id}"
        ref = {
            "host": host.key,
            "address": host.config.address,
            "node_dir": node_dir,
            "installation_id": req.installation_id,
            "vcpus": req.vcpus,
            "memory_gb": req.memory_gb,
            "gpus": req.gpus,
            "whole_host": placement.whole_host,
        }
        host.nodes[req.node_id] = ref  # held while it starts: a concurrent create sees it
        try:
            if ca_pem is not None:
                async with (
                    host.conn.start_sftp_client() as sftp,
                    sftp.open(f"{host.agent_dir}/ca.pem", "w") as f,
                ):
                    await f.write(ca_pem)
            env = self._env(req, host, node_dir, server, placement.whole_host)
            python = env["CLOUDLET_PYTHON"]
            started = await ssh_hosts.start_agent(host.conn, python, host.pythonpath, node_dir, env)
        except (OSError, asyncssh.Error, ssh_hosts.HostError) as exc:
            host.nodes.pop(req.node_id, None)
            raise ProviderError(f"SSH host {host.key}: cannot start the node: {_describe(exc)}") from exc
        ref.update({"supervisor": started.get("supervisor"), "pid": started.get("pid")})
        return NodeHandle(req.node_id, dict(ref))

    async def _try_ready(self, host: _Host) -> None:
        with contextlib.suppress(ProviderError):
            await self._ready(host)

    def _room(self, host: _Host) -> HostRoom:
        facts = host.facts
        usable = host.conn is not None and not host.conn.is_closed() and bool(host.pythonpath)
        slices = tuple(
            Slice(
                node_id,
                float(ref.get("vcpus") or 0),
                float(ref.get("memory_gb") or 0),
                int(ref.get("gpus") or 0),
                bool(ref.get("whole_host")),
            )
            for node_id, ref in sorted(host.nodes.items())
        )
        over = self.config.overcommit
        return HostRoom(
            host.key,
            float(facts.cores) * over if facts else 0.0,
            facts.memory_gb * over if facts else 0.0,
            len(facts.gpus) if facts else 0,
            slices,
            usable=usable and facts is not None,
            why_not=host.error or "not connected",
        )

    def terminate(self, handle: NodeHandle) -> None:
        self._call(self._terminate(handle))

    async def _terminate(self, handle: NodeHandle) -> None:
        ref = handle.provider_ref
        host = self._by_key(str(ref.get("host", "")))
        if host is None:
            return  # a host no longer in the configuration: nothing cloudlet can reach
        node_dir = str(ref.get("node_dir") or f"{host.agent_dir}/nodes/{handle.node_id}")
        try:
            await self._ready(host)
            assert host.conn is not None and host.facts is not None
            await ssh_hosts.stop_agent(host.conn, host.facts.python, host.pythonpath, node_dir)
        except (ProviderError, OSError, asyncssh.Error, ssh_hosts.HostError) as exc:
            # An unreachable host's node is gone for the control plane; when the host comes
            # back its agent is found by the listing and stopped as an orphan.
            log.warning("node %s: could not stop it on %s: %s", handle.node_id, host.key, exc)
        host.nodes.pop(handle.node_id, None)

    def list_nodes(self, installation_id: str) -> list[NodeHandle]:
        return self._call(self._list(installation_id))

    async def _list(self, installation_id: str) -> list[NodeHandle]:
        listed = await asyncio.gather(*(self._list_host(h, installation_id) for h in self._hosts))
        return sorted((h for part in listed for h in part), key=lambda h: h.node_id)

    async def _list_host(self, host: _Host, installation_id: str) -> list[NodeHandle]:
        try:
            await self._ready(host)
            assert host.conn is not None and host.facts is not None
            found = await ssh_hosts.list_agents(
                host.conn, host.facts.python, host.pythonpath, host.agent_dir, installation_id
            )
        except (ProviderError, OSError, asyncssh.Error, ssh_hosts.HostError) as exc:
            log.info("listing %s: %s (its nodes keep their last listing)", host.key, exc)
            return [NodeHandle(n, dict(ref)) for n, ref in host.nodes.items()]
        fresh: dict[str, dict[str, Any]] = {}
        for item in found:
            node_id = str(item["node_id"])
            ref = dict(host.nodes.get(node_id) or {})
            ref.update(
                {
                    "host": host.key,
                    "address": host.config.address,
                    "node_dir": item["node_dir"],
                    "installation_id": installation_id,
                    "vcpus": item.get("vcpus", 0),
                    "memory_gb": item.get("memory_gb", 0),
                    "gpus": item.get("gpus", 0),
                    "whole_host": bool(item.get("whole_host")),
                    "pid": item.get("watchdog_pid"),
                }
            )
            fresh[node_id] = ref
        # A node being started right now is not listed yet: keep it.
        starting = {n: r for n, r in host.nodes.items() if n not in fresh and "supervisor" not in r}
        host.nodes = {**starting, **fresh}
        return [NodeHandle(n, dict(ref)) for n, ref in fresh.items()]

    # -- optional abilities ------------------------------------------------------------------------
    def capacity(self) -> Capacity:
        """The reachable hosts' cores, memory and GPUs; ProviderError when none is reachable."""
        return self._call(self._capacity())

    async def _capacity(self) -> Capacity:
        await asyncio.gather(*(self._try_ready(h) for h in self._hosts))
        # The same rooms placement sees (× overcommit), each usable host counted.
        offered = total([self._room(h) for h in self._hosts])
        if not offered.hosts:
            errors = "; ".join(f"{h.key}: {h.error or 'not connected'}" for h in self._hosts)
            raise ProviderError(f"no SSH host is reachable ({errors})")
        return Capacity(offered.cores, offered.memory_gb, float(offered.gpus))

    def remove_instance_disk(self, disk: str, host: str) -> None:
        """Delete an instance's OS disk on its host (``HostsInstanceDisks``)."""
        target = self._by_key(host)
        if target is None or not _SAFE_NAME.fullmatch(disk):
            return

        async def _remove() -> None:
            await self._ready(target)
            assert target.conn is not None
            await ssh_hosts.run(target.conn, f"rm -rf {shlex.quote(_disk_dir(target.agent_dir, disk))}")

        try:
            self._call(_remove(), timeout=60)
        except (OSError, asyncssh.Error, ssh_hosts.HostError, TimeoutError) as exc:
            why = _describe(exc)
            raise ProviderError(f"SSH host {host}: cannot remove the OS disk {disk}: {why}") from exc

    def hosts(self) -> list[dict[str, Any]]:
        """Each host's state and facts (for status pages and tests)."""
        return [
            {
                "host": h.key,
                "reachable": bool(h.pythonpath) and h.conn is not None and not h.conn.is_closed(),
                "error": h.error,
                "facts": h.facts.to_json() if h.facts else None,
                "nodes": sorted(h.nodes),
            }
            for h in self._hosts
        ]

    def node_log(self, handle: NodeHandle, tail_bytes: int = 65536) -> str:
        host = self._by_key(str(handle.provider_ref.get("host", "")))
        node_dir = str(handle.provider_ref.get("node_dir") or "")
        if host is None or not node_dir:
            return ""

        async def _log() -> str:
            await self._ready(host)
            assert host.conn is not None and host.facts is not None
            return await ssh_hosts.agent_log(
                host.conn, host.facts.python, host.pythonpath, node_dir, tail_bytes
            )

        try:
            return self._call(_log(), timeout=30)
        except (ProviderError, OSError, asyncssh.Error, ssh_hosts.HostError, TimeoutError):
            return ""


_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._@-]{0,200}")


def _disk_dir(agent_dir: str, disk: str) -> str:
    return f"{agent_dir}/instances/{disk}"


def _instance_disks(request_env: dict[str, str], agent_dir: str) -> dict[str, str]:
    """An instance node's OS disk and file share as folders of the host's agent dir (pure): the
    disk at ``instances/<disk>/os`` (kept across stop and start, removed on delete), the share at
    ``shares/<workspace>/`` (this host's own: not the workspace's share on the server)."""
    disk = request_env.get(HOST_DISK_ENV, "")
    if not _SAFE_NAME.fullmatch(disk):
        return {}
    out = {"CLOUDLET_OS_DISK": f"{_disk_dir(agent_dir, disk)}/os"}
    share, user = request_env.get(HOST_SHARE_ENV, ""), request_env.get(HOST_SHARE_USER_ENV, "")
    if _SAFE_NAME.fullmatch(share) and _SAFE_NAME.fullmatch(user):
        out["CLOUDLET_SHARE"] = f"{agent_dir}/shares/{share}"
        out["CLOUDLET_SHARE_USER_DIR"] = f"{agent_dir}/shares/{share}/Users/{user}"
    return out


def _describe(exc: BaseException) -> str:
    if isinstance(exc, HostKeyRefused):
        return str(exc)
    if isinstance(exc, TimeoutError):
        return "the connection timed out (is the host up and its SSH port open?)"
    if isinstance(exc, asyncssh.PermissionDenied):
        return f"SSH login refused ({exc.reason}): check user and identity_file"
    if isinstance(exc, asyncssh.Error):
        return f"SSH error: {exc.reason}"
    if isinstance(exc, OSError):
        return f"cannot connect: {exc.strerror or exc}"
    return str(exc)
