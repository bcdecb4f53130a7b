"""Attached VMs: the SSH work of attaching and detaching (``domain/compute/attached_vms.py`` has the rules).

``attach_check`` logs in, probes the machine and installs the agent (``providers/ssh_hosts``);
it raises a 400 naming the field when the VM cannot be used, before anything is stored, so a
refused attach leaves nothing behind (on the VM, a first install is removed again). ``uninstall``
stops the VM's agents and removes the agent's folder. Both are blocking calls made from worker
threads (the API's thread pool, the operation reconciler), each on an event loop of its own.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any

import asyncssh

from cloudlet.domain.compute import host_keys
from cloudlet.domain.compute.attached_vms import AGENT_DIR, host_config
from cloudlet.domain.errors import CloudletError, validation_error
from cloudlet.providers import ssh_hosts
from cloudlet.providers.ssh import _describe

CONNECT_TIMEOUT_S = 10.0


def _connect(host: Mapping[str, Any], host_key: str | None = None) -> Any:
    """Log in; the host's key must be ``host_key`` (the one attach saw) when given. Attach itself
    has none yet: it takes the key the VM presents (trust on first use, docs/security.md)."""
    known: Any = ([asyncssh.import_public_key(host_key)], [], []) if host_key else None
    return asyncio.wait_for(
        asyncssh.connect(
            host["address"],
            port=host["port"],
            username=host["user"],
            client_keys=[host["identity_file"]],
            known_hosts=known,
            agent_path=None,
        ),
        CONNECT_TIMEOUT_S,
    )


def attach_check(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Reach the VM, check it can run the agent, install it; the VM's facts (cores, memory, OS)."""
    host = host_config(doc)
    key = host["identity_file"]
    if not os.path.isfile(key) or not os.access(key, os.R_OK):
        raise validation_error(
            "ssh_settings.ssh_private_key_file", f"the cloudlet server cannot read the private key {key}"
        )
    where = f"{host['user']}@{host['address']}:{host['port']}"

    async def check() -> dict[str, Any]:
        async with await _connect(host) as conn:
            facts = await ssh_hosts.probe(conn)
            agent_dir = f"{facts.home}/{AGENT_DIR}"
            had_dir = await conn.run(f"test -e {agent_dir}", check=False)
            try:
                await ssh_hosts.install_agent(conn, agent_dir, facts.python)
            except BaseException:
                if had_dir.exit_status != 0:  # ours alone: leave the VM as it was
                    await conn.run(f"rm -rf {agent_dir}", check=False)
                raise
            presented = conn.get_server_host_key()
            key = presented.export_public_key("openssh").decode() if presented is not None else ""
            seen = host_keys.normalize(key) if key else ""
            return {**facts.to_json(), "home": facts.home, "host_key": seen}

    try:
        return asyncio.run(check())
    except ssh_hosts.HostError as exc:
        message = f"VM {where} cannot run cloudlet's agent: {exc}; nothing was attached"
        raise CloudletError("VirtualMachineUnusable", message, "address") from None
    except (OSError, asyncssh.Error, TimeoutError) as exc:
        field = "ssh_settings" if isinstance(exc, asyncssh.PermissionDenied) else "address"
        raise CloudletError(
            "VirtualMachineUnreachable",
            f"cannot attach VM {where}: {_describe(exc)}; nothing was attached",
            field,
        ) from None


def uninstall(doc: Mapping[str, Any], facts: Mapping[str, Any]) -> str | None:
    """Stop the VM's agents and remove the agent's folder; None, or why it could not."""
    host = host_config(doc)
    python = str(facts.get("python") or "python3")
    home = str(facts.get("home") or "")

    async def remove() -> None:
        async with await _connect(host, str(facts.get("host_key") or "") or None) as conn:
            base = home or (await ssh_hosts.run(conn, "echo $HOME")).strip()
            await ssh_hosts.uninstall(conn, python, f"{base}/{AGENT_DIR}")

    try:
        asyncio.run(remove())
    except (OSError, asyncssh.Error, TimeoutError, ssh_hosts.HostError) as exc:
        return _describe(exc)
    return None
