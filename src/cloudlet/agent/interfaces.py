"""Which network interface a node's address is on: what torch.distributed's collectives are told
to use (``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME``)."""

from __future__ import annotations

import fcntl
import socket
import struct


def interface_of(address: str) -> str | None:
    """The name of this host's network interface that holds the IPv4 ``address`` (Linux), or None."""
    siocgifaddr = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(sock.fileno(), siocgifaddr, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            if socket.inet_ntoa(raw[20:24]) == address:
                return name
    return None


def collective_interface(node_address: str) -> dict[str, str]:
    """``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME`` naming the interface of the node's address, so
    torch.distributed's ranks find each other there (not at whatever the host name resolves to,
    often 127.0.x.1); nothing for a loopback or unknown address (a job's own values win)."""
    if not node_address or node_address.startswith("127.") or node_address == "localhost":
        return {}
    try:
        name = interface_of(node_address)
    except OSError:
        return {}
    return {"GLOO_SOCKET_IFNAME": name, "NCCL_SOCKET_IFNAME": name} if name else {}
