"""The studio's Compute and Quota pages over real HTTP (issue 27): the lists, a cluster from the form,
an instance from YAML, a cluster's min/max, stop/start, field-level validation errors, CSRF, a
Reader refused every write, the quota page's numbers as the REST usages report them, an
administrator raising a limit, and the one-click JupyterLab cookie (owner only)."""

from __future__ import annotations

import html
import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import RunningServer
from tests.instance_helpers import OP_TIMEOUT_S, new_user
from tests.jobs_helpers import served
from tests.studio_http import csrf_of, home_of, sign_in, studio_client

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "compute"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    # Instances without JupyterLab: these tests need the machine and its states, not the app.
    yield from served(tmp_path_factory, "studio-compute", extra_env={"CLOUDLET_INSTANCE_APPS": ""})


@pytest.fixture(scope="module")
def admin(srv: RunningServer) -> Iterator[tuple[httpx.Client, str]]:
    """A signed-in studio client for the administrator and the workspace's studio URL."""
    with studio_client(srv) as client:
        assert sign_in(client, srv.api_key).status_code == 303
        home = home_of(client)
        yield client, str(home.url.path)


def page_csrf(client: httpx.Client, url: str) -> str:
    page = client.get(url)
    assert page.status_code == 200, page.text[:2000]
    return csrf_of(page)


def wait_op(srv: RunningServer, response: httpx.Response) -> tuple[str, dict[str, Any]]:
    """A write's redirect to the compute's page (with its operation); the operation once ended."""
    assert response.status_code == 303, response.text[:3000]
    location = response.headers["location"]
    op_id = urllib.parse.parse_qs(urllib.parse.urlsplit(location).query)["op"][0]
    with srv.client() as api:
        op = srv.wait_operation(api, f"/api/v1/operations/{op_id}", timeout=OP_TIMEOUT_S)
    assert op["status"] == "Succeeded", op
    return location, op


def rest(srv: RunningServer, name: str) -> dict[str, Any]:
    with srv.client() as api:
        shown: dict[str, Any] = api.get(f"{srv.ws_path}/computes/{name}").json()
        return shown


def test_create_a_cluster_from_the_form_then_edit_its_min_and_max(
    srv: RunningServer, admin: tuple[httpx.Client, str]
) -> None:
    client, ws = admin
    form_url = f"{ws}compute/_new?type=amlcompute"
    page = client.get(form_url)
    assert page.status_code == 200 and "Standard_DS3_v2" in page.text and "Minimum nodes" in page.text
    fields = {
        "csrf_token": csrf_of(page),
        "type": "amlcompute",
        "name": "form-cluster",
        "location": "local",
        "tier": "dedicated",
        "size": "Standard_DS3_v2",
        "min_instances": "0",
        "max_instances": "3",
        "idle_time_before_scale_down": "120",
        "description": "made in the studio",
    }
    location, _ = wait_op(srv, client.post(f"{ws}compute/_new", data=fields))
    assert location.startswith(f"{ws}compute/form-cluster?op=")
    shown = rest(srv, "form-cluster")
    assert (shown["min_instances"], shown["max_instances"], shown["size"]) == (0, 3, "Standard_DS3_v2")

    listed = client.get(f"{ws}compute?tab=clusters")
    assert listed.status_code == 200 and "form-cluster" in listed.text and "0 / 0 / 3" in listed.text
    assert f'sse-connect="{ws}compute/_live?tab=clusters"' in listed.text  # its stream: test_studio_live
    places = client.get(f"{ws}compute?tab=locations")  # an administrator: every location, its provider
    assert places.status_code == 200 and "<td>local</td>" in places.text
    assert "An administrator sees every location" not in places.text
    nodes = client.get(f"{ws}compute/form-cluster?tab=nodes")
    assert nodes.status_code == 200 and "Nodes" in nodes.text and "steady at 0 nodes" in nodes.text

    token = page_csrf(client, f"{ws}compute/form-cluster")
    edit = {
        "csrf_token": token,
        "min_instances": "0",
        "max_instances": "5",
        "idle_time_before_scale_down": "300",
    }
    wait_op(srv, client.post(f"{ws}compute/form-cluster/scale", data=edit))
    shown = rest(srv, "form-cluster")
    assert (shown["max_instances"], shown["idle_time_before_scale_down"]) == (5, 300)


def test_validation_errors_are_shown_at_their_field(
    srv: RunningServer, admin: tuple[httpx.Client, str]
) -> None:
    client, ws = admin
    token = page_csrf(client, f"{ws}compute/_new?type=amlcompute")
    base = {"csrf_token": token, "type": "amlcompute", "location": "local", "size": "Standard_DS3_v2"}
    bad_number = client.post(f"{ws}compute/_new", data={**base, "name": "bad-one", "max_instances": "many"})
    assert bad_number.status_code == 400
    assert re.search(r'id="f-max_instances"[^>]*aria-invalid="true"', bad_number.text)
    assert 'id="e-max_instances"' in bad_number.text

    bad_name = client.post(f"{ws}compute/_new", data={**base, "name": "9-starts-with-a-digit"})
    assert bad_name.status_code == 400 and 'id="e-name"' in bad_name.text
    assert rest(srv, "9-starts-with-a-digit").get("error")  # nothing was made

    no_size = client.post(f"{ws}compute/_new", data={**base, "name": "sizeless", "size": ""})
    assert no_size.status_code == 400 and 'id="e-size"' in no_size.text

    bad_yaml = client.post(f"{ws}compute/_yaml", data={"csrf_token": token, "yaml": "name: [unclosed"})
    assert bad_yaml.status_code == 400 and 'id="e-yaml"' in bad_yaml.text
    wrong = yaml.safe_dump({"name": "yaml-bad", "type": "amlcompute", "size": "Standard_NOPE"})
    refused = client.post(f"{ws}compute/_yaml", data={"csrf_token": token, "yaml": wrong})
    assert refused.status_code == 400 and 'id="e-yaml"' in refused.text and "Standard_NOPE" in refused.text


def test_an_instance_from_yaml_stops_and_starts(srv: RunningServer, admin: tuple[httpx.Client, str]) -> None:
    client, ws = admin
    doc = yaml.safe_load((EXAMPLES / "instance.yml").read_text())
    doc["name"] = "yaml-inst"
    token = page_csrf(client, f"{ws}compute/_new")
    wait_op(srv, client.post(f"{ws}compute/_yaml", data={"csrf_token": token, "yaml": yaml.safe_dump(doc)}))
    assert rest(srv, "yaml-inst")["state"] == "Running"
    listed = client.get(f"{ws}compute?tab=instances")
    assert "yaml-inst" in listed.text and "Running" in listed.text

    page = client.get(f"{ws}compute/yaml-inst")
    assert "0 18 * * *" in page.text and "after 30 min idle" in page.text  # its schedule, idle shutdown
    wait_op(srv, client.post(f"{ws}compute/yaml-inst/stop", data={"csrf_token": csrf_of(page)}))
    assert rest(srv, "yaml-inst")["state"] == "Stopped"
    wait_op(srv, client.post(f"{ws}compute/yaml-inst/start", data={"csrf_token": csrf_of(page)}))
    assert rest(srv, "yaml-inst")["state"] == "Running"


def test_a_write_without_the_csrf_token_is_refused(
    srv: RunningServer, admin: tuple[httpx.Client, str]
) -> None:
    client, ws = admin
    fields = {"type": "amlcompute", "name": "no-csrf", "size": "Standard_DS3_v2"}
    assert client.post(f"{ws}compute/_new", data=fields).status_code == 403
    assert client.post(f"{ws}compute/_new", data={**fields, "csrf_token": "stale"}).status_code == 403
    assert rest(srv, "no-csrf").get("error")


def test_a_reader_sees_no_write_control_and_is_refused_every_write(
    srv: RunningServer, admin: tuple[httpx.Client, str]
) -> None:
    _, ws = admin
    with srv.client() as api:
        key = new_user(api, srv, "compute-reader", "Reader")
    with studio_client(srv) as reader:
        assert sign_in(reader, key).status_code == 303
        listed = reader.get(f"{ws}compute?tab=clusters")
        assert listed.status_code == 200 and "form-cluster" in listed.text and "+ New" not in listed.text
        page = reader.get(f"{ws}compute/form-cluster")
        assert page.status_code == 200 and "Delete" not in page.text and "Save" not in page.text
        places = reader.get(f"{ws}compute?tab=locations")
        assert places.status_code == 200 and "An administrator sees every location" in places.text
        quota = reader.get(f"{ws}quota")
        assert quota.status_code == 200 and 'name="limit"' not in quota.text
        token = csrf_of(page)  # the sign-out form's
        writes = {
            f"{ws}compute/_new": {"type": "amlcompute", "name": "reader-made", "size": "Standard_DS3_v2"},
            f"{ws}compute/_yaml": {"yaml": "name: reader-yaml\ntype: amlcompute\n"},
            f"{ws}compute/form-cluster/scale": {"max_instances": "9"},
            f"{ws}compute/form-cluster/delete": {},
            f"{ws}compute/yaml-inst/stop": {},
            f"{ws}compute/yaml-inst/start": {},
            f"{ws}compute/yaml-inst/restart": {},
            f"{ws}compute/yaml-inst/delete": {},
            f"{ws}quota": {"location": "local", "name": "standardDSv2Family", "limit": "999"},
        }
        for url, data in writes.items():
            refused = reader.post(url, data={**data, "csrf_token": token})
            assert refused.status_code == 403, (url, refused.status_code, refused.text[:500])
        assert reader.get(f"{ws}compute/_new").status_code == 403
    assert rest(srv, "form-cluster")["max_instances"] == 5 and rest(srv, "reader-made").get("error")


USAGE_ROW = re.compile(
    r'<span class="strong mono">([^<]+)</span>.*?'
    r'<span class="used">(\d+)</span> / <span class="limit">(\d+)</span>',
    re.S,
)


def test_the_quota_page_shows_the_rest_usage_and_an_admin_raises_a_limit(
    srv: RunningServer, admin: tuple[httpx.Client, str]
) -> None:
    client, ws = admin
    page = client.get(f"{ws}quota")
    assert page.status_code == 200
    shown = {
        html.unescape(name): (int(used), int(limit)) for name, used, limit in USAGE_ROW.findall(page.text)
    }
    with srv.client() as api:
        usage = api.get(f"/api/v1/subscriptions/{srv.subscription_id}/locations/local/usages").json()["value"]
    for line in usage:
        if line["name"] in shown:
            assert shown[line["name"]] == (line["current_value"], line["limit"]), line
    assert "total_dedicated" in {line["kind"] for line in usage}
    held = next(line for line in usage if line["name"] == "standardDSv2Family")
    assert held["current_value"] >= 4 and shown["standardDSv2Family"][0] == held["current_value"]
    assert "yaml-inst" in page.text  # who holds the cores: its kind, workspace and owner
    assert "computeinstance · default · admin" in page.text

    raised = held["limit"] + 8
    fields = {
        "csrf_token": csrf_of(page),
        "location": "local",
        "name": "standardDSv2Family",
        "limit": str(raised),
    }
    assert client.post(f"{ws}quota", data=fields).status_code == 303
    with srv.client() as api:
        limits = api.get(f"/api/v1/subscriptions/{srv.subscription_id}/locations/local/quotas").json()[
            "value"
        ]
    assert {q["name"]: q["limit"] for q in limits}["standardDSv2Family"] == raised
    bad = client.post(f"{ws}quota", data={**fields, "limit": "lots"})
    assert bad.status_code == 400 and "whole number" in bad.text


def test_opening_an_instance_app_gives_the_proxy_sign_in_for_the_owner_only(
    srv: RunningServer, admin: tuple[httpx.Client, str]
) -> None:
    client, ws = admin
    # A GET changes nothing: a page with the button that posts.
    shown = client.get(f"{ws}compute/yaml-inst/open/jupyterlab")
    assert shown.status_code == 200 and "set-cookie" not in shown.headers
    assert f'action="{ws}compute/yaml-inst/open/jupyterlab"' in shown.text and 'method="post"' in shown.text
    # The POST without the session's CSRF token is refused, and sets no cookie.
    forged = client.post(f"{ws}compute/yaml-inst/open/jupyterlab", data={})
    assert forged.status_code == 403 and "cloudlet_signin" not in forged.headers.get("set-cookie", "")
    opened = client.post(f"{ws}compute/yaml-inst/open/jupyterlab", data={"csrf_token": csrf_of(shown)})
    assert opened.status_code == 303 and opened.headers["location"] == "/instances/yaml-inst/jupyterlab/lab"
    cookie = opened.headers["set-cookie"]
    assert cookie.startswith("cloudlet_signin=") and "Path=/instances/" in cookie and "HttpOnly" in cookie
    assert client.get(f"{ws}compute/yaml-inst/open/nothing").status_code == 404
    nothing = client.post(f"{ws}compute/yaml-inst/open/nothing", data={"csrf_token": csrf_of(shown)})
    assert nothing.status_code == 404

    with srv.client() as api:
        key = new_user(api, srv, "compute-other", "Contributor")
    with studio_client(srv) as other:
        assert sign_in(other, key).status_code == 303
        form = other.get(f"{ws}compute/yaml-inst/open/jupyterlab")
        minted = other.post(f"{ws}compute/yaml-inst/open/jupyterlab", data={"csrf_token": csrf_of(form)})
        assert minted.status_code == 303
        refused = other.get("/instances/yaml-inst/jupyterlab/lab", headers={"Accept": "application/json"})
        assert refused.status_code == 403, refused.text  # the proxy: only the owner gets through
        assert "only the owner" in refused.text


def test_the_size_picker_disables_a_size_beyond_the_quota_left(
    srv: RunningServer, admin: tuple[httpx.Client, str]
) -> None:
    client, ws = admin
    with srv.client() as api:
        quota = f"/api/v1/subscriptions/{srv.subscription_id}/locations/local/quotas/standardDSv2Family"
        assert api.put(quota, json={"limit": 10}).status_code == 200  # yaml-inst holds 4: 6 left
    picker = client.get(f"{ws}compute/_sizes?type=computeinstance&location=local")
    assert picker.status_code == 200 and "<html" not in picker.text
    radios = dict(re.findall(r'<input type="radio" name="size" value="([^"]+)"([^>]*)>', picker.text))
    assert "disabled" not in radios["Standard_DS3_v2"]  # 4 cores
    assert "disabled" in radios["Standard_DS4_v2"]  # 8 cores
    assert "needs 8 cores; 6 left in standardDSv2Family" in picker.text
    low = client.get(f"{ws}compute/_sizes?type=amlcompute&location=local&tier=low_priority")
    assert (
        "disabled"
        not in dict(re.findall(r'name="size" value="([^"]+)"([^>]*)>', low.text))["Standard_DS4_v2"]
    )


def size_radios(text: str) -> dict[str, str]:
    return dict(re.findall(r'<input type="radio" name="size" value="([^"]+)"([^>]*)>', text))


def test_the_size_picker_counts_a_clusters_nodes_as_the_create_checks_them(
    srv: RunningServer, admin: tuple[httpx.Client, str]
) -> None:
    """6 cores left in the family (the test above): a 4-core size holds one node. A cluster of at
    most 3 may take it, noted "1 of 3"; one whose min_instances is 2 may not, and the create's own
    quota check refuses it too."""
    client, ws = admin
    sizes = f"{ws}compute/_sizes?type=amlcompute&location=local"
    grows = client.get(f"{sizes}&min_instances=0&max_instances=3")
    assert "disabled" not in size_radios(grows.text)["Standard_DS3_v2"]
    assert "1 of 3 nodes fit: 6 cores left in standardDSv2Family" in grows.text
    assert "disabled" in size_radios(grows.text)["Standard_DS4_v2"]
    assert "Nodes that fit" in grows.text
    floor = client.get(f"{sizes}&min_instances=2&max_instances=3")
    assert "disabled" in size_radios(floor.text)["Standard_DS3_v2"]
    assert "needs 8 cores for 2 nodes; 6 left in standardDSv2Family" in floor.text
    fields = {
        "csrf_token": page_csrf(client, f"{ws}compute/_new?type=amlcompute"),
        "type": "amlcompute",
        "name": "two-floor",
        "location": "local",
        "size": "Standard_DS3_v2",
        "min_instances": "2",
        "max_instances": "3",
    }
    refused = client.post(f"{ws}compute/_new", data=fields)
    assert refused.status_code == 400 and "standardDSv2Family" in refused.text
    # An instance is one node: no node column.
    assert "Nodes that fit" not in client.get(f"{ws}compute/_sizes?type=computeinstance").text


def test_the_type_fields_swap_in_place_and_keep_the_values(
    srv: RunningServer, admin: tuple[httpx.Client, str]
) -> None:
    client, ws = admin
    hostile = "<img src=x onerror=alert(1)>"
    query = urllib.parse.urlencode(
        {
            "type": "amlcompute",
            "location": "local",
            "max_instances": "5",
            "idle_time_before_scale_down": hostile,
            "idle_time_before_shutdown_minutes": "45",
            "size": "Standard_DS3_v2",
        }
    )
    cluster = client.get(f"{ws}compute/_fields?{query}")
    assert cluster.status_code == 200 and "<html" not in cluster.text and 'id="type-fields"' in cluster.text
    assert re.search(r'name="max_instances" value="5"', cluster.text)
    assert 'type="hidden" name="idle_time_before_shutdown_minutes" value="45"' in cluster.text
    assert "checked" in size_radios(cluster.text)["Standard_DS3_v2"]
    assert hostile not in cluster.text and html.escape(hostile) in cluster.text
    instance = client.get(f"{ws}compute/_fields?{query.replace('amlcompute', 'computeinstance')}")
    assert re.search(r'name="idle_time_before_shutdown_minutes" value="45"', instance.text)
    assert 'type="hidden" name="max_instances" value="5"' in instance.text
    assert 'id="f-max_instances"' not in instance.text
    # The form page names the swap: the type's radios ask for …/_fields.
    form = client.get(f"{ws}compute/_new?type=computeinstance").text
    assert f'hx-get="{ws}compute/_fields"' in form and "data-type-switch" not in form
