"""Pure parts of the instance proxy: what reaches the app, where sign-in may redirect, origins."""

from __future__ import annotations

import pytest
from starlette.datastructures import Headers

from cloudlet.api.instance_proxy import Target, app_cookies, upstream_headers
from cloudlet.api.routes_instances import _safe_next, cookie_secret, same_origin
from cloudlet.domain.errors import CloudletError
from cloudlet.services.access.identity import mint_token, verify_token
from cloudlet.services.compute.instances import app_base_url, app_token

TARGET = Target("127.0.0.1", 41234, "app-token")


def test_the_callers_credentials_never_reach_the_app() -> None:
    headers = upstream_headers(
        [
            ("Authorization", "Bearer clk_secret"),
            ("Cookie", "cloudlet_signin=clt_x.y; _xsrf=abc"),
            ("Host", "cloudlet.example"),
            ("Origin", "http://cloudlet.example"),
            ("Connection", "keep-alive"),
            ("Accept", "application/json"),
        ],
        TARGET,
        "10.0.0.9",
    )
    assert headers == {
        "Accept": "application/json",
        "Cookie": "_xsrf=abc",
        "Authorization": "token app-token",
        "X-Forwarded-For": "10.0.0.9",
    }


def test_only_the_signin_cookie_is_dropped() -> None:
    assert app_cookies("cloudlet_signin=v") is None
    assert app_cookies("a=1; cloudlet_signin=v; b=2") == "a=1; b=2"
    assert app_cookies(None) is None


def test_signin_redirects_only_into_the_proxy() -> None:
    assert _safe_next("/instances/ci1/jupyterlab/lab") == "/instances/ci1/jupyterlab/lab"
    for bad in ("https://evil.example/", "//evil.example/instances/", "/api/v1/x", "/instances/\\evil", None):
        assert _safe_next(bad) == "/instances/"


def test_cross_site_origins_are_refused() -> None:
    assert same_origin(Headers({"host": "c.example"}), "http")
    assert same_origin(Headers({"host": "c.example", "origin": "http://c.example"}), "http")
    assert same_origin(Headers({"host": "c.example", "origin": "https://c.example"}), "wss")
    assert not same_origin(Headers({"host": "c.example", "origin": "http://evil.example"}), "http")


def test_behind_a_proxy_the_public_urls_origin_is_the_apps_whatever_the_host() -> None:
    # nginx's default Host is the upstream's address; the browser's Origin is the public URL
    upstream = {"host": "127.0.0.1:8571"}
    public = "https://c.example"
    assert same_origin(Headers({**upstream, "origin": "https://c.example"}), "ws", public)
    assert not same_origin(Headers({**upstream, "origin": "https://c.example"}), "ws")
    assert not same_origin(Headers({**upstream, "origin": "https://evil.example"}), "ws", public)


def test_a_signin_cookie_is_not_an_api_token() -> None:
    secret = "installation-secret"
    cookie, _ = mint_token(7, cookie_secret(secret), 60)
    assert verify_token(cookie, cookie_secret(secret)) == 7
    with pytest.raises(CloudletError, match="not issued by this server"):
        verify_token(cookie, secret)


def test_app_token_is_per_node_and_base_url_is_the_proxy_path() -> None:
    assert app_token("s", "n-1") != app_token("s", "n-2")
    assert app_token("s", "n-1") == app_token("s", "n-1")
    assert app_base_url("ci1") == "/instances/ci1/jupyterlab/"
