"""Administration → Teams over HTTP (issue 31): the form's and the YAML's refusals come back at the
form naming the field (a share that is not a number, a user already in another team, a YAML that is
not a team), each as the team use cases answer the REST door; a saved form is the same team as
``GET /api/v1/teams/{team}`` shows; an edit form holds the team's rows; a team that does not exist
is the studio's 404."""

from __future__ import annotations

import html
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import RunningServer
from tests.jobs_helpers import create_compute, served
from tests.studio_http import csrf_of, signed_in_admin

CLUSTER = "st-cpu"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "studio-teams")


@pytest.fixture(scope="module")
def admin(srv: RunningServer) -> Iterator[tuple[httpx.Client, str]]:
    with srv.client() as api:
        body = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 2}
        create_compute(api, srv, CLUSTER, body)
        for name in ("st-ann", "st-ben"):
            assert api.post("/api/v1/principals", json={"name": name}).status_code == 201
    yield from signed_in_admin(srv)


def test_form_saves_the_team_the_rest_door_shows(
    srv: RunningServer, api: httpx.Client, admin: tuple[httpx.Client, str]
) -> None:
    client, ws = admin
    new = client.get(f"{ws}admin/teams/_new")
    assert new.status_code == 200 and f"compute:default/default/{CLUSTER}" in new.text
    form = {
        "csrf_token": csrf_of(new),
        "name": "st-vision",
        "description": "the vision team",
        "members": ["st-ann"],
        "pool_0": f"compute:default/default/{CLUSTER}",
        "share_0": "50",
        "borrow_0": "",
        "pool_1": "location:local",
        "share_1": "2.5",
        "borrow_1": "0",
    }
    saved = client.post(f"{ws}admin/teams", data=form)
    assert saved.status_code == 303, saved.text[:500]
    team = api.get("/api/v1/teams/st-vision").json()
    assert team["members"] == ["st-ann"] and team["description"] == "the vision team"
    pools = {(s.get("location") or s["compute"]): (s["share"], s["borrow_limit"]) for s in team["shares"]}
    assert pools == {CLUSTER: (50, None), "local": (2.5, 0)}
    edit = client.get(f"{ws}admin/teams/st-vision")
    assert edit.status_code == 200
    assert 'name="share_0" value="2.5"' in edit.text or 'name="share_1" value="2.5"' in edit.text
    assert "share: 2.5" in edit.text and "name: st-vision" in edit.text  # its YAML, as REST shows it
    assert 'value="st-ann" checked' in edit.text
    assert client.get(f"{ws}admin/teams/no-such-team").status_code == 404


def test_refusals_name_their_field_at_the_form(
    srv: RunningServer, api: httpx.Client, admin: tuple[httpx.Client, str]
) -> None:
    client, ws = admin
    csrf = csrf_of(client.get(f"{ws}admin/teams/_new"))
    base = {"csrf_token": csrf, "name": "st-nlp", "pool_0": "location:local"}
    bad_share = client.post(f"{ws}admin/teams", data={**base, "share_0": "half"})
    assert bad_share.status_code == 400
    assert "shares[0].share" in html.unescape(bad_share.text) and "'half'" in html.unescape(bad_share.text)
    assert 'value="st-nlp"' in bad_share.text  # the form as typed
    api.put("/api/v1/teams/st-other", json={"members": ["st-ben"]})
    taken = client.post(f"{ws}admin/teams", data={**base, "share_0": "1", "members": "st-ben"})
    assert taken.status_code == 409 and "already in team" in html.unescape(taken.text)
    not_team = client.post(
        f"{ws}admin/teams/_yaml", data={"csrf_token": csrf, "yaml": "name: st-y\nshares: 3\n"}
    )
    assert not_team.status_code == 400 and "shares" in not_team.text
    nameless = client.post(f"{ws}admin/teams/_yaml", data={"csrf_token": csrf, "yaml": "members: []\n"})
    assert nameless.status_code == 400 and "needs a name" in nameless.text
    assert api.get("/api/v1/teams/st-nlp").status_code == 404
    assert api.get("/api/v1/teams/st-y").status_code == 404
    made = client.post(
        f"{ws}admin/teams/_yaml",
        data={"csrf_token": csrf, "yaml": "name: st-y\nshares:\n- location: local\n  share: 1\n"},
    )
    assert made.status_code == 303
    assert api.get("/api/v1/teams/st-y").json()["shares"][0]["location"] == "local"
