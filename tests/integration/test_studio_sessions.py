"""The studio's sessions over real HTTP (issue 27): sign-in, the cookie's flags, CSRF, idle and
absolute expiry, revocation within the caller cache period, one-time links, security headers."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from http.cookies import SimpleCookie

import httpx
import pytest

from cloudlet.services.access.identity import CALLER_CACHE_TTL_S
from tests.conftest import RunningServer
from tests.jobs_helpers import served, wait_until
from tests.studio_http import COOKIE, csrf_of, home_of, sign_in, signed_out, studio_client

PRINCIPALS = "/api/v1/principals"
REVOCATION_BOUND_S = CALLER_CACHE_TTL_S + 3  # as tests/integration/test_access.py: load margin
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "studio")


def new_user(api: httpx.Client, srv: RunningServer, name: str, role: str | None = "Reader") -> str:
    assert api.post(PRINCIPALS, json={"name": name}).status_code == 201
    key = api.post(f"{PRINCIPALS}/{name}/keys")
    assert key.status_code == 201, key.text
    if role:
        assigned = api.put(f"{srv.ws_path}/roleAssignments/{name}", json={"role": role})
        assert assigned.status_code == 200, assigned.text
    return str(key.json()["api_key"])


def cookie_flags(response: httpx.Response) -> dict[str, str | bool]:
    jar: SimpleCookie = SimpleCookie()
    jar.load(response.headers["set-cookie"])
    morsel = jar[COOKIE]
    return {name: morsel[name] for name in ("httponly", "samesite", "path", "secure")}


def test_sign_in_with_a_key_sets_a_strict_http_only_cookie(srv: RunningServer) -> None:
    with studio_client(srv) as client:
        signed = sign_in(client, srv.api_key)
        assert signed.status_code == 303 and signed.headers["location"] == "/studio/"
        flags = cookie_flags(signed)
        assert flags["httponly"] is True and flags["path"] == "/studio"
        assert str(flags["samesite"]).lower() == "strict" and not flags["secure"]
        home = home_of(client)
        assert home.status_code == 200 and "Recent jobs" in home.text and "admin" in home.text


def test_the_tls_port_sets_a_secure_cookie(srv: RunningServer) -> None:
    with studio_client(srv, https=True) as client:
        signed = sign_in(client, srv.api_key)
        assert signed.status_code == 303
        assert cookie_flags(signed)["secure"] is True
        assert home_of(client).status_code == 200


def test_a_bad_key_is_refused_on_the_form(srv: RunningServer) -> None:
    with studio_client(srv) as client:
        for key in ("clk_not-a-key", "not even a key", ""):
            refused = sign_in(client, key)
            assert refused.status_code == 401 and "set-cookie" not in refused.headers
            assert 'role="alert"' in refused.text
        assert signed_out(client.get("/studio/"))


def test_state_changes_need_the_session_csrf_token_and_the_same_origin(srv: RunningServer) -> None:
    with studio_client(srv) as client:
        sign_in(client, srv.api_key)
        token = csrf_of(home_of(client))
        assert client.post("/studio/signout").status_code == 403  # no token
        assert client.post("/studio/signout", data={"csrf_token": "stale"}).status_code == 403
        foreign = {"Origin": "https://elsewhere.example", "X-CSRF-Token": token}
        assert client.post("/studio/signout", headers=foreign).status_code == 403
        cross_site = {"Sec-Fetch-Site": "cross-site", "X-CSRF-Token": token}
        assert client.post("/studio/signout", headers=cross_site).status_code == 403
        assert home_of(client).status_code == 200  # none of those signed out
        # htmx sends the token as a header; a form as a field: either is accepted.
        out = client.post("/studio/signout", headers={"X-CSRF-Token": token, "Origin": srv.endpoint})
        assert out.status_code == 303 and out.headers["location"] == "/studio/signin"
        assert signed_out(client.get("/studio/"))


def test_sign_out_deletes_the_session(srv: RunningServer) -> None:
    with studio_client(srv) as client:
        sign_in(client, srv.api_key)
        stolen = client.cookies[COOKIE]
        token = csrf_of(home_of(client))
        assert client.post("/studio/signout", data={"csrf_token": token}).status_code == 303
    with studio_client(srv) as replay:
        replay.cookies.set(COOKIE, stolen, path="/studio")
        assert signed_out(replay.get("/studio/"))


def test_revoking_the_key_or_disabling_the_user_ends_the_session(srv: RunningServer) -> None:
    with srv.client() as api, studio_client(srv) as by_key, studio_client(srv) as by_user:
        key = new_user(api, srv, "revoked-key")
        sign_in(by_key, key)
        assert home_of(by_key).status_code == 200
        key_id = api.get(f"{PRINCIPALS}/revoked-key/keys").json()["value"][0]["id"]
        assert api.delete(f"{PRINCIPALS}/revoked-key/keys/{key_id}").status_code == 204
        started = time.monotonic()
        wait_until(
            lambda: signed_out(by_key.get("/studio/")), REVOCATION_BOUND_S, "the revoked key's session"
        )
        assert time.monotonic() - started <= REVOCATION_BOUND_S

        sign_in(by_user, new_user(api, srv, "disabled-user"))
        assert home_of(by_user).status_code == 200
        assert api.patch(f"{PRINCIPALS}/disabled-user", json={"enabled": False}).status_code == 200
        started = time.monotonic()
        wait_until(
            lambda: signed_out(by_user.get("/studio/")), REVOCATION_BOUND_S, "the disabled user's session"
        )
        assert time.monotonic() - started <= REVOCATION_BOUND_S


def test_a_removed_role_hides_the_workspace(srv: RunningServer) -> None:
    with srv.client() as api, studio_client(srv) as client:
        sign_in(client, new_user(api, srv, "role-removed"))
        home = home_of(client)
        assert home.status_code == 200
        assert api.delete(f"{srv.ws_path}/roleAssignments/role-removed").status_code == 204
        wait_until(
            lambda: client.get(str(home.url)).status_code == 404, REVOCATION_BOUND_S, "the workspace refused"
        )


def test_a_one_time_link_signs_in_once(srv: RunningServer) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cloudlet", "studio", "open", "--no-browser"],
        env=srv.cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    url = done.stdout.strip().splitlines()[-1]
    assert url.startswith(f"{srv.endpoint}/studio/link/"), done.stdout
    path = url[len(srv.endpoint) :]
    with studio_client(srv) as first, studio_client(srv) as second:
        followed = first.get(path)
        # A page that moves on by itself (a redirect would not carry the SameSite=Strict cookie
        # when the link was followed from another site).
        assert followed.status_code == 200 and COOKIE in first.cookies
        assert 'http-equiv="refresh" content="0;url=/studio/"' in followed.text
        assert home_of(first).status_code == 200
        again = second.get(path)
        assert again.status_code == 401 and COOKIE not in second.cookies
        assert signed_out(second.get("/studio/"))


# Where a sign-in must not send the browser: another site, the API, or out of /studio/ once the
# browser resolves dots and backslashes.
OFF_STUDIO = (
    "https://evil.example/",
    "//evil.example",
    "/api/v1/principals",
    "/studio/../api/v1/principals",
    "/studio/%2e%2E/api/v1/principals",
    "/studio//evil.example",
    "/studio/\\evil.example",
    "/studio/\t/evil.example",
)


def test_sign_in_lands_only_on_studio_pages(srv: RunningServer) -> None:
    with studio_client(srv) as client:
        for target in OFF_STUDIO:
            form = client.get("/studio/signin", params={"next": target})
            assert form.status_code == 200 and 'name="next" value="/studio/"' in form.text, target
            signed = client.post("/studio/signin", data={"api_key": srv.api_key, "next": target})
            assert signed.status_code == 303 and signed.headers["location"] == "/studio/", target


def test_a_signed_out_page_is_returned_to_as_the_browser_asked_for_it(srv: RunningServer) -> None:
    page = f"/studio/ws/{srv.subscription_id}/default/default/jobs/no%20such%20job?tab=outputs"
    with studio_client(srv) as client:
        went = client.get(page)
        assert went.status_code == 303, went.text
        assert httpx.URL(went.headers["location"]).params["next"] == page  # as sent, not decoded
        form = client.get(went.headers["location"])
        assert f'name="next" value="{page}"' in form.text
        signed = client.post("/studio/signin", data={"api_key": srv.api_key, "next": page})
        assert signed.status_code == 303 and signed.headers["location"] == page


def test_a_one_time_link_lands_on_the_page_it_was_made_for_and_only_in_the_studio(
    srv: RunningServer,
) -> None:
    page = f"/studio/ws/{srv.subscription_id}/default/default/jobs"
    with srv.client() as api:
        for target in OFF_STUDIO:
            refused = api.post("/api/v1/studio/signin-links", json={"next": target})
            assert refused.status_code == 400 and "next" in refused.text, (target, refused.text)
        made = [api.post("/api/v1/studio/signin-links", json={"next": page}) for _ in range(2)]
    assert [m.status_code for m in made] == [201, 201], [m.text for m in made]
    url = httpx.URL(made[0].json()["url"])
    assert str(url).startswith(f"{srv.endpoint}/studio/link/") and url.params["next"] == page
    with studio_client(srv) as client:
        followed = client.get(url.raw_path.decode())
        assert followed.status_code == 200 and f'http-equiv="refresh" content="0;url={page}"' in followed.text
        assert client.get(page).status_code == 200
    # NEXT is outside the link's secret: one rewritten to leave the studio lands on Home instead.
    tampered = httpx.URL(made[1].json()["url"]).copy_set_param("next", "https://evil.example/")
    with studio_client(srv) as client:
        followed = client.get(tampered.raw_path.decode())
        assert followed.status_code == 200 and 'content="0;url=/studio/"' in followed.text
        assert "evil.example" not in followed.text


def test_a_link_needs_an_authenticated_caller(srv: RunningServer) -> None:
    refused = httpx.post(f"{srv.endpoint}/api/v1/studio/signin-links")
    assert refused.status_code == 401
    with srv.client() as api:
        made = api.post("/api/v1/studio/signin-links")
        assert made.status_code == 201 and json.loads(made.text)["url"].startswith(srv.endpoint)


def test_every_studio_response_carries_the_security_headers(srv: RunningServer) -> None:
    with studio_client(srv) as client:
        anonymous = [client.get("/studio/"), client.get("/studio/signin"), client.get("/studio/nowhere")]
        sign_in(client, srv.api_key)
        home = home_of(client)
        signed = [
            home,
            client.get("/studio/nowhere"),  # the studio's 404 page
            client.get("/studio/ws/nosub/norg/nows/"),  # a workspace the caller cannot see
            client.get("/studio/static/studio.css"),
            client.get("/studio/static/vendor/htmx.min.js"),
            client.post("/studio/signout"),  # 403 without a token
            client.get("/studio/link/unknown"),
        ]
        for response in [*anonymous, *signed]:
            for name, value in SECURITY_HEADERS.items():
                assert response.headers.get(name) == value, (response.url, name, response.status_code)
        assert [r.status_code for r in signed[1:3]] == [404, 404]
        assert "Traceback" not in signed[1].text and "Not found" in signed[1].text
    browser = httpx.get(f"{srv.endpoint}/", headers={"Accept": "text/html"})
    assert browser.status_code == 303 and browser.headers["location"] == "/studio/"
    assert httpx.get(f"{srv.endpoint}/").status_code == 404  # an API client: as before


@pytest.fixture
def short_sessions(server_factory: Callable[..., RunningServer]) -> RunningServer:
    """A server whose studio sessions idle out after 2 s and end 6 s after sign-in."""
    env = {"CLOUDLET_STUDIO_IDLE_S": "2", "CLOUDLET_STUDIO_ABSOLUTE_S": "6"}
    return server_factory(extra_env=env)


def test_sessions_expire_when_idle_and_at_their_absolute_limit(short_sessions: RunningServer) -> None:
    srv = short_sessions
    with studio_client(srv) as idle, studio_client(srv) as busy:
        sign_in(idle, srv.api_key)
        sign_in(busy, srv.api_key)
        signed_at = time.monotonic()
        assert home_of(idle).status_code == 200

        def busy_past(seconds: float) -> bool:
            """Use the busy session (every 0.3 s: never idle) until SECONDS after sign-in."""
            assert not signed_out(busy.get("/studio/")), "the busy session ended early"
            return time.monotonic() - signed_at > seconds

        # Looking at the idle session would count as use: it is left alone past its idle limit.
        wait_until(lambda: busy_past(2 + 1), 10, "the idle limit to pass", interval=0.3)
        assert signed_out(idle.get("/studio/"))
        # The busy one ends only at its absolute limit.
        wait_until(lambda: signed_out(busy.get("/studio/")), 20, "the absolute expiry", interval=0.3)
        lasted = time.monotonic() - signed_at
        assert lasted > 6 - 1, f"the busy session ended after {lasted:.1f} s"
