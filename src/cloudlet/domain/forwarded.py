"""Which peers the server believes about the client (``cloudlet server --forwarded-allow-ips``,
``CLOUDLET_FORWARDED_ALLOW_IPS``): a reverse proxy that terminates TLS tells the server the
browser's scheme (``X-Forwarded-Proto``) and address (``X-Forwarded-For``); the server takes those
headers only from the proxies named here (uvicorn's ``forwarded_allow_ips``), since any other
client could forge them to pass for HTTPS (cookies' ``Secure`` flag, the studio's same-origin
check) or for another address.

The default is uvicorn's, what the server did before the option existed: loopback's 127.0.0.1
only (a proxy on the same host)."""

from __future__ import annotations

import ipaddress

DEFAULT = "127.0.0.1"
ANY = "*"  # every peer: only where nothing but the proxy can reach the server's port
EXAMPLE = "10.0.0.5,192.168.10.0/24"


def parse(value: str) -> list[str]:
    """VALUE (comma-separated addresses, networks, or ``*``) as the list uvicorn takes, or
    ValueError naming the entry that is none of those. An empty VALUE trusts no peer."""
    trusted: list[str] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            continue
        if entry == ANY:
            trusted.append(entry)
            continue
        try:
            if "/" in entry:
                trusted.append(str(ipaddress.ip_network(entry, strict=False)))
            else:
                trusted.append(str(ipaddress.ip_address(entry)))
        except ValueError:
            raise ValueError(
                f"{entry!r} is not an IP address, a network (address/prefix) or '*'; name the "
                "proxy by its address, as the server sees it connect"
            ) from None
    # uvicorn trusts every peer only for a lone "*" (beside others it would be a name to match)
    return [ANY] if ANY in trusted else trusted
