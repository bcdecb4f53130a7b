"""Whose forwarded headers the server believes (``domain/forwarded.py``, ``cloudlet server
--forwarded-allow-ips``): addresses, networks or everyone; loopback by default, as before."""

from __future__ import annotations

from typing import NoReturn

import pytest

from cloudlet.domain import forwarded
from cloudlet.server_command import resolve_forwarded_allow_ips


@pytest.mark.parametrize(
    ("given", "trusted"),
    [
        ("10.0.0.5", ["10.0.0.5"]),
        (" 10.0.0.5 , 192.168.10.7/24,fd00::1 ", ["10.0.0.5", "192.168.10.0/24", "fd00::1"]),
        ("*", ["*"]),
        ("10.0.0.5,*", ["*"]),  # uvicorn trusts everyone only for a lone "*"
        ("", []),  # nobody
        (" , ", []),
    ],
)
def test_trusted_proxies_are_addresses_networks_or_everyone(given: str, trusted: list[str]) -> None:
    assert forwarded.parse(given) == trusted


@pytest.mark.parametrize("given", ["proxy.lan", "10.0.0.0/33", "10.0.0.256", "10.0.0.5,unix:/run/x"])
def test_anything_else_is_refused_naming_the_entry(given: str) -> None:
    with pytest.raises(ValueError, match="is not an IP address, a network"):
        forwarded.parse(given)


def _fail(message: str) -> NoReturn:
    raise SystemExit(message)


def test_the_default_is_loopback_only_as_before() -> None:
    assert resolve_forwarded_allow_ips(None, {}, _fail) == ["127.0.0.1"]
    assert resolve_forwarded_allow_ips(None, {"CLOUDLET_FORWARDED_ALLOW_IPS": " "}, _fail) == ["127.0.0.1"]


def test_the_option_wins_over_the_environment_and_may_trust_nobody() -> None:
    env = {"CLOUDLET_FORWARDED_ALLOW_IPS": "10.0.0.5", "FORWARDED_ALLOW_IPS": "10.0.0.6"}
    assert resolve_forwarded_allow_ips("10.0.0.4", env, _fail) == ["10.0.0.4"]
    assert resolve_forwarded_allow_ips("", env, _fail) == []
    assert resolve_forwarded_allow_ips(None, env, _fail) == ["10.0.0.5"]
    # uvicorn's own variable, which the server honoured through uvicorn before it had its own
    assert resolve_forwarded_allow_ips(None, {"FORWARDED_ALLOW_IPS": "10.0.0.6"}, _fail) == ["10.0.0.6"]


def test_a_bad_value_names_where_it_came_from_and_an_example() -> None:
    with pytest.raises(SystemExit, match=r"^CLOUDLET_FORWARDED_ALLOW_IPS: 'proxy\.lan' is not") as refused:
        resolve_forwarded_allow_ips(None, {"CLOUDLET_FORWARDED_ALLOW_IPS": "proxy.lan"}, _fail)
    assert "e.g. --forwarded-allow-ips 10.0.0.5" in str(refused.value)
