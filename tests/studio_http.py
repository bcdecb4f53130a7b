"""The studio over plain HTTP (httpx), for tests: sign in with a key, read a page's CSRF token."""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterator

import httpx

from tests.conftest import RunningServer

COOKIE = "cloudlet_studio"
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def studio_client(srv: RunningServer, https: bool = False) -> httpx.Client:
    """A cookie-keeping client for the studio that follows no redirect (tests look at each)."""
    if https:
        return httpx.Client(
            base_url=srv.https_url, verify=ssl.create_default_context(cafile=srv.ca_file), timeout=30
        )
    return httpx.Client(base_url=srv.endpoint, timeout=30)


def sign_in(client: httpx.Client, key: str) -> httpx.Response:
    """POST the sign-in form; the client keeps the session cookie it sets."""
    return client.post("/studio/signin", data={"api_key": key, "next": "/studio/"})


def csrf_of(page: httpx.Response) -> str:
    found = _CSRF.search(page.text)
    assert found is not None, f"no CSRF token on the page: {page.text[:500]}"
    return found.group(1)


def home_of(client: httpx.Client) -> httpx.Response:
    """The signed-in caller's Home (``/studio/`` redirects to their first workspace)."""
    start = client.get("/studio/")
    assert start.status_code == 303, start.text
    return client.get(start.headers["location"])


def signed_out(response: httpx.Response) -> bool:
    return response.status_code == 303 and response.headers["location"].startswith("/studio/signin")


def signed_in_admin(srv: RunningServer) -> Iterator[tuple[httpx.Client, str]]:
    """A studio client signed in with SRV's admin key, and its first workspace's path (a module
    fixture's body: ``yield from signed_in_admin(srv)``)."""
    with studio_client(srv) as client:
        assert sign_in(client, srv.api_key).status_code == 303
        yield client, str(home_of(client).url.path)


def events(response: httpx.Response) -> Iterator[tuple[str, str | None, str]]:
    """The (event, id, data) of a server-sent event stream as they arrive; data as sent (JSON or
    HTML), its lines joined as a browser joins them."""
    kind, ident, data = "message", None, []
    for line in response.iter_lines():
        if line == "":
            if data:
                yield kind, ident, "\n".join(data)
            kind, ident, data = "message", None, []
        elif line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("id: "):
            ident = line[4:]
        elif line.startswith("data: "):
            data.append(line[6:])
