"""``cloudlet server``'s entry point (the CLI execs ``main``): a supervisor of N worker processes
(``serving.py``; ``--workers auto``, the default, is one per usable CPU, at most 8), or with
``--workers 1`` (or on a host with one usable CPU) one server process (``server.py``)."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import NoReturn

from cloudlet import serving
from cloudlet.domain import forwarded, public_url
from cloudlet.server import LOG_FORMAT, bind_listeners, build_state, replica_identity, resolve_home, serve


def run_server(
    host: str = "127.0.0.1",
    port: int = 8571,
    home: str | None = None,
    db: str | None = None,
    tls_port: int | None = None,
    workers: int = 1,
    public: str = "",
    trusted_proxies: Sequence[str] = (forwarded.DEFAULT,),
) -> None:
    """TLS_PORT None: the port after PORT (8572 beside the default 8571), or ephemeral when PORT is
    0; 0: ephemeral. WORKERS > 1: that many server processes under a supervisor (``serving.py``).
    PUBLIC: the base of the links the server hands out (``public_url.parse``'s; "": its bind URL).
    TRUSTED_PROXIES: whose forwarded headers stand for the client's (``forwarded.parse``'s)."""
    if workers > 1:
        serving.supervise(host, port, home, db, tls_port, workers, public, list(trusted_proxies))
        return
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    home_path = resolve_home(home)
    replica = replica_identity(home_path)
    state, store = build_state(home_path, db, replica)
    listeners = bind_listeners(
        home_path, host, port, tls_port, state.installation_id, state.sessions, public=public
    )
    serve(state, store, listeners, trusted_proxies)


def main(argv: list[str] | None = None) -> None:
    """``cloudlet server``'s options (the CLI execs this: it never loads the server itself)."""
    parser = argparse.ArgumentParser(prog="cloudlet server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8571)
    parser.add_argument("--home")
    parser.add_argument("--db")
    parser.add_argument("--tls-port", type=int)
    parser.add_argument("--workers", default=os.environ.get("CLOUDLET_WORKERS", serving.DEFAULT_WORKERS))
    parser.add_argument("--public-url")
    parser.add_argument("--forwarded-allow-ips")
    args = parser.parse_args(argv)
    try:
        workers = serving.parse_workers(args.workers)
    except ValueError as exc:
        parser.error(f"--workers: {exc}")
    public = resolve_public_url(args.public_url, os.environ, parser.error)
    trusted = resolve_forwarded_allow_ips(args.forwarded_allow_ips, os.environ, parser.error)
    run_server(args.host, args.port, args.home, args.db, args.tls_port, workers, public, trusted)


PUBLIC_URL_ENV = "CLOUDLET_PUBLIC_URL"
# The older name, from when only notifications' links used it (docs/observability.md).
EXTERNAL_URL_ENV = "CLOUDLET_EXTERNAL_URL"


def resolve_public_url(option: str | None, env: Mapping[str, str], fail: Callable[[str], NoReturn]) -> str:
    """The public URL (``domain/public_url.py``) from ``--public-url``, else ``CLOUDLET_PUBLIC_URL``,
    else ``CLOUDLET_EXTERNAL_URL``; "" when none is set. A bad value is FAIL (exit 2) with what is
    wrong, where it came from and an example."""
    given = [
        (name, value)
        for name, value in (
            ("--public-url", option),
            (PUBLIC_URL_ENV, env.get(PUBLIC_URL_ENV)),
            (EXTERNAL_URL_ENV, env.get(EXTERNAL_URL_ENV)),
        )
        if value is not None and (value.strip() or name == "--public-url")
    ]
    if not given:
        return ""
    source, value = given[0]
    try:
        return public_url.parse(value)
    except ValueError as exc:
        fail(
            f"{source}: {exc}. The public URL is the address people reach this server at, as "
            f"scheme://host[:port], e.g. --public-url {public_url.EXAMPLE} or "
            f"{PUBLIC_URL_ENV}=http://cloudlet.lan:8571"
        )


FORWARDED_ALLOW_IPS_ENV = "CLOUDLET_FORWARDED_ALLOW_IPS"
# uvicorn's own name for it, which the server honoured (through uvicorn) before it had its own.
UVICORN_FORWARDED_ALLOW_IPS_ENV = "FORWARDED_ALLOW_IPS"


def resolve_forwarded_allow_ips(
    option: str | None, env: Mapping[str, str], fail: Callable[[str], NoReturn]
) -> list[str]:
    """The peers whose ``X-Forwarded-Proto`` / ``-For`` the server believes (``domain/forwarded.py``)
    from ``--forwarded-allow-ips`` (``""``: none), else ``CLOUDLET_FORWARDED_ALLOW_IPS``, else
    ``FORWARDED_ALLOW_IPS``, else loopback's 127.0.0.1. A bad value is FAIL (exit 2) naming it."""
    given = [
        (name, value)
        for name, value in (
            ("--forwarded-allow-ips", option),
            (FORWARDED_ALLOW_IPS_ENV, env.get(FORWARDED_ALLOW_IPS_ENV)),
            (UVICORN_FORWARDED_ALLOW_IPS_ENV, env.get(UVICORN_FORWARDED_ALLOW_IPS_ENV)),
        )
        if value is not None and (value.strip() or name == "--forwarded-allow-ips")
    ]
    if not given:
        return [forwarded.DEFAULT]
    source, value = given[0]
    try:
        return forwarded.parse(value)
    except ValueError as exc:
        fail(
            f"{source}: {exc}. It lists the reverse proxies whose X-Forwarded-Proto and "
            f"X-Forwarded-For the server believes, comma-separated, e.g. --forwarded-allow-ips "
            f"{forwarded.EXAMPLE} (default {forwarded.DEFAULT})"
        )
