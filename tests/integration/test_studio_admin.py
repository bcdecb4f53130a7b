"""The studio's Administration pages over real HTTP (issue 28 item 5): users created, disabled and
enabled; a key created (its secret on that answer only), rotated and revoked; a role assigned and
removed; a lock with hostile notes; the audit log's filters and pages, each studio write with the
channel ``studio`` (and a REST write with ``rest``, the client's with ``cli``); what an Owner and a
Reader may see and do (a hand-posted form: 403, nothing changed)."""

from __future__ import annotations

import html
import re
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import RunningServer
from tests.instance_helpers import new_user
from tests.jobs_helpers import cli_json, served
from tests.studio_http import csrf_of, home_of, sign_in, signed_in_admin, studio_client

HOSTILE = "<img src=x onerror=alert(1)></script><script>alert(2)</script>"
_SECRET = re.compile(r'id="secret" class="secret mono" readonly value="([^"]+)"')


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "studio-admin")


@pytest.fixture(scope="module")
def admin(srv: RunningServer) -> Iterator[tuple[httpx.Client, str]]:
    yield from signed_in_admin(srv)


def _post(client: httpx.Client, page_url: str, action: str, **fields: str) -> httpx.Response:
    page = client.get(page_url)
    assert page.status_code == 200, page.text[:2000]
    return client.post(action, data={"csrf_token": csrf_of(page), **fields})


def _audit(srv: RunningServer, **query: str) -> list[dict[str, object]]:
    with srv.client() as api:
        found: list[dict[str, object]] = api.get("/api/v1/audit", params=query).json()["value"]
        return found


def test_users_keys_and_roles_from_the_studio_are_audited_as_studio(
    srv: RunningServer, admin: tuple[httpx.Client, str]
) -> None:
    client, ws = admin
    users = f"{ws}admin/users"
    assert client.get(f"{ws}admin").headers["location"] == users
    # Without the session's CSRF token: refused, nothing written.
    assert client.post(users, data={"name": "carol"}).status_code == 403
    created = _post(client, users, users, name="carol")
    assert created.status_code == 303
    listed = client.get(users)
    assert 'data-user="carol"' in listed.text

    # A name the service refuses comes back at the form, escaped.
    refused = _post(client, users, users, name=HOSTILE)
    assert refused.status_code == 400 and "a user name is 1 to 128" in refused.text
    assert HOSTILE not in refused.text and html.escape(HOSTILE, quote=True) in refused.text

    keys = f"{ws}admin/keys?user=carol"
    issued = _post(client, keys, f"{ws}admin/keys/create", user="carol")
    assert issued.status_code == 200 and issued.headers["cache-control"] == "no-store"
    found = _SECRET.search(issued.text)
    assert found is not None
    secret = found.group(1)
    with srv.client(secret) as api:
        assert api.get("/api/v1/whoami").json()["principal"] == "carol"
    again = client.get(keys)
    assert secret not in again.text and secret[:8] in again.text  # the prefix only, never again

    roles = f"{ws}admin/roles"
    assert _post(client, roles, roles, principal="carol", role="Reader").status_code == 303
    assert 'data-user="carol"' in client.get(roles).text
    unknown = _post(client, roles, roles, principal="nobody", role="Reader")
    assert unknown.status_code == 404 and "nobody" in unknown.text

    disabled = _post(client, users, f"{users}/enabled", name="carol", enabled="false")
    assert disabled.status_code == 303
    with srv.client(secret) as api:
        assert api.get("/api/v1/whoami").status_code == 401
    assert _post(client, users, f"{users}/enabled", name="carol", enabled="true").status_code == 303

    entries = _audit(srv, actor="admin")
    by_action = {e["action"]: e for e in entries if "carol" in str(e["target"])}
    for action in (
        "principal.create",
        "apiKey.create",
        "roleAssignment.write",
        "principal.disable",
        "principal.enable",
    ):
        assert by_action[action]["channel"] == "studio", by_action.get(action)

    assert _post(client, roles, f"{roles}/remove", principal="carol").status_code == 303
    assert 'data-user="carol"' not in client.get(roles).text
    removed = [e for e in _audit(srv, action="roleAssignment.delete") if str(e["target"]).endswith("/carol")]
    assert [e["channel"] for e in removed] == ["studio"]

    # The page's own filters: actor and action, newest first.
    page = client.get(f"{ws}admin/audit", params={"actor": "admin", "action": "apiKey"})
    assert page.status_code == 200
    assert "apiKey.create" in page.text and "principal.create" not in page.text
    assert '<td class="audit-channel">studio</td>' in page.text


def test_the_channel_of_rest_and_client_writes(srv: RunningServer) -> None:
    with srv.client() as api:
        assert api.post("/api/v1/principals", json={"name": "via-rest"}).status_code == 201
    entry = _audit(srv, target="/principals/via-rest")[0]
    assert entry["channel"] == "rest"
    from cloudlet.client._rest import RestClient

    with RestClient(srv.endpoint, api_key=srv.api_key) as rc:
        rc.send("POST", "/api/v1/principals", json={"name": "via-client"})
    assert _audit(srv, target="/principals/via-client")[0]["channel"] == "cli"
    # The CLI itself, creating a user and reading the log by channel.
    cli_json(srv, "user", "create", "via-cli")
    found = cli_json(srv, "audit", "list", "--channel", "cli", "--action", "principal.create")
    assert {e["target"] for e in found} == {"/principals/via-client", "/principals/via-cli"}


def test_rotate_and_revoke_a_key(srv: RunningServer, admin: tuple[httpx.Client, str]) -> None:
    client, ws = admin
    with srv.client() as api:
        key = new_user(api, srv, "dora", None)
        key_id = api.get("/api/v1/principals/dora/keys").json()["value"][0]["id"]
    keys = f"{ws}admin/keys?user=dora"
    rotated = _post(client, keys, f"{ws}admin/keys/rotate", user="dora", key_id=key_id)
    assert rotated.status_code == 200
    found = _SECRET.search(rotated.text)
    assert found is not None
    new_secret = found.group(1)
    with srv.client(key) as api:
        assert api.get("/api/v1/whoami").status_code == 401
    with srv.client() as api:
        listed = api.get("/api/v1/principals/dora/keys").json()["value"]
        new_id = next(k["id"] for k in listed if not k["revoked"])
    assert _post(client, keys, f"{ws}admin/keys/revoke", user="dora", key_id=new_id).status_code == 303
    with srv.client(new_secret) as api:
        assert api.get("/api/v1/whoami").status_code == 401
    actions = [e["action"] for e in _audit(srv, target="/principals/dora", channel="studio")]
    assert actions[:2] == ["apiKey.revoke", "apiKey.rotate"]


def test_a_lock_with_hostile_notes_and_audit_paging(
    srv: RunningServer, admin: tuple[httpx.Client, str]
) -> None:
    client, ws = admin
    locks = f"{ws}admin/locks"
    assert _post(client, locks, locks, name="keep", level="CanNotDelete", notes=HOSTILE).status_code == 303
    shown = client.get(locks)
    assert HOSTILE not in shown.text and html.escape(HOSTILE, quote=True) in shown.text
    bad = _post(client, locks, locks, name="x", level="Sometimes")
    assert bad.status_code == 400 and "level" in bad.text
    assert _post(client, locks, f"{locks}/remove", name="keep").status_code == 303
    assert 'data-lock="keep"' not in client.get(locks).text

    # 120 entries: three pages of 50, no entry twice, newest first.
    with srv.client() as api:
        for i in range(60):
            api.put(f"{srv.ws_path}/locks/l{i}", json={"level": "CanNotDelete"})
            api.delete(f"{srv.ws_path}/locks/l{i}")
    times: list[str] = []
    targets: list[str] = []
    url: str | None = f"{ws}admin/audit?action=lock"
    pages = 0
    while url:
        page = client.get(url)
        assert page.status_code == 200
        pages += 1
        times.extend(
            re.findall(r'<td class="nowrap muted">([^<]+)</td>\s*<td class="mono audit-actor">', page.text)
        )
        targets.extend(t.rsplit("/", 1)[1] for t in re.findall(r'audit-target">([^<]+)<', page.text))
        older = re.search(r'id="older" href="([^"]+)"', page.text)
        url = html.unescape(older.group(1)) if older else None
    # 60 puts and 60 deletes, and the studio's write and delete of "keep" (the bad level wrote nothing)
    assert pages == 3 and len(targets) == 122
    assert Counter(targets) == {**{f"l{i}": 2 for i in range(60)}, "keep": 2}
    assert times == sorted(times, reverse=True)


def test_an_owner_and_a_reader(srv: RunningServer, admin: tuple[httpx.Client, str]) -> None:
    with srv.client() as api:
        owner_key = new_user(api, srv, "olga", "Owner")
        reader_key = new_user(api, srv, "rita", "Reader")
    with studio_client(srv) as owner:
        assert sign_in(owner, owner_key).status_code == 303
        ws = str(home_of(owner).url.path)
        assert f'href="{ws}admin"' in home_of(owner).text  # the navigation shows Admin to an Owner
        assert owner.get(f"{ws}admin").headers["location"] == f"{ws}admin/keys"
        tabs = owner.get(f"{ws}admin/roles").text
        assert "Role assignments" in tabs and ">Users<" not in tabs and ">Audit log<" not in tabs
        assert owner.get(f"{ws}admin/users").status_code == 403
        assert owner.get(f"{ws}admin/audit").status_code == 403
        assert (
            _post(
                owner, f"{ws}admin/roles", f"{ws}admin/roles", principal="rita", role="Contributor"
            ).status_code
            == 303
        )
        assert (
            _post(owner, f"{ws}admin/roles", f"{ws}admin/roles", principal="rita", role="Reader").status_code
            == 303
        )
    with studio_client(srv) as reader:
        assert sign_in(reader, reader_key).status_code == 303
        home = home_of(reader)
        ws = str(home.url.path)
        assert f'href="{ws}admin"' not in home.text
        token = csrf_of(home)
        for action, fields in (
            ("users", {"name": "mallory"}),
            ("roles", {"principal": "rita", "role": "Owner"}),
            ("locks", {"name": "mine", "level": "ReadOnly"}),
            ("keys/create", {"user": "rita"}),
        ):
            refused = reader.post(f"{ws}admin/{action}", data={"csrf_token": token, **fields})
            assert refused.status_code == 403, (action, refused.status_code)
    with srv.client() as api:
        assert "mallory" not in {p["name"] for p in api.get("/api/v1/principals").json()["value"]}
        roles = api.get(f"{srv.ws_path}/roleAssignments").json()["value"]
        assert {r["principal"]: r["role"] for r in roles}["rita"] == "Reader"
        assert api.get(f"{srv.ws_path}/locks").json()["value"] == []


def test_an_administrator_adds_a_size(srv: RunningServer, admin: tuple[httpx.Client, str]) -> None:
    client, ws = admin
    places = f"{ws}admin/places"
    added = _post(client, places, f"{places}/sizes", name="Site_GPU_8", vcpus="8", memory_gb="64", gpus="1")
    assert added.status_code == 303
    assert "Site_GPU_8" in client.get(places).text
    assert _audit(srv, target="/sizes/Site_GPU_8")[0]["channel"] == "studio"
    bad = _post(client, places, f"{places}/sizes", name="Site_Bad", vcpus="0", memory_gb="4")
    assert bad.status_code == 400 and "vcpus" in bad.text
    hostile = _post(client, places, f"{places}/sizes", name=HOSTILE, vcpus="1", memory_gb="1")
    assert hostile.status_code == 400 and HOSTILE not in hostile.text
    with srv.client() as api:
        owner_key = new_user(api, srv, "sizer", "Owner")
    with studio_client(srv) as owner:
        assert sign_in(owner, owner_key).status_code == 303
        home = home_of(owner)
        refused = owner.post(
            f"{home.url.path}admin/places/sizes",
            data={"csrf_token": csrf_of(home), "name": "Owner_Size", "vcpus": "1", "memory_gb": "1"},
        )
        assert refused.status_code == 403
    with srv.client() as api:
        assert "Owner_Size" not in {s["name"] for s in api.get("/api/v1/sizes").json()["value"]}


def test_the_audit_time_range(srv: RunningServer, admin: tuple[httpx.Client, str]) -> None:
    client, ws = admin
    with srv.client() as api:
        assert api.post("/api/v1/principals", json={"name": "timed"}).status_code == 201
    audit_url = f"{ws}admin/audit"
    base = {"target": "/principals/timed"}
    assert 'audit-action">principal.create' in client.get(audit_url, params=base).text
    past = client.get(audit_url, params={**base, "until": "2020-01-01T00:00"})
    future = client.get(audit_url, params={**base, "since": "2999-01-01T00:00"})
    both = client.get(audit_url, params={**base, "since": "2020-01-01T00:00", "until": "2999-01-01T00:00"})
    for page in (past, future):
        assert page.status_code == 200 and "No entries match these filters" in page.text
    assert 'audit-action">principal.create' in both.text
    bad = client.get(audit_url, params={"since": "yesterday"})
    assert bad.status_code == 400 and "is not a date and time" in bad.text
    stale = client.get(audit_url, params={"after": "not-a-token"})
    assert stale.status_code == 400 and "continuation token" in stale.text
