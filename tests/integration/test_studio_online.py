"""The studio's online endpoint pages over real HTTP (issue 28 item 1): an endpoint from the form and
one from YAML, a deployment from YAML with its code and model uploaded as archives, really served;
the Test tab through the gateway; keys on request and regenerated (the old key refused); traffic
refused unless it adds to 100 or 0 (the service's rule, not only the page's); logs and metrics; a
Reader sees no write control and each hand-posted write is a 403; hostile strings escaped."""

from __future__ import annotations

import html
import json
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import RunningServer
from tests.instance_helpers import new_user
from tests.jobs_helpers import served_for_inference, wait_until
from tests.online_helpers import HOSTILE, REQUEST, code_zip, deployment_yaml, model_zip
from tests.studio_http import csrf_of, events, sign_in, signed_in_admin, studio_client

pytestmark = pytest.mark.timeout(300)
EP = "studio-ep"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served_for_inference(tmp_path_factory, "studio-online")


@pytest.fixture(scope="module")
def admin(srv: RunningServer) -> Iterator[tuple[httpx.Client, str]]:
    yield from signed_in_admin(srv)


def upload(client: httpx.Client, ws: str, csrf: str, data: bytes) -> str:
    answer = client.post(
        f"{ws}jobs/_new/code",
        content=data,
        headers={"X-CSRF-Token": csrf, "Content-Type": "application/octet-stream"},
    )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["code"])


def rest(srv: RunningServer, path: str = "") -> dict[str, object]:
    with srv.client() as api:
        found: dict[str, object] = api.get(f"{srv.ws_path}/onlineEndpoints/{EP}{path}").json()
        return found


def settled(srv: RunningServer, deployment: str) -> dict[str, object]:
    """The deployment once its provisioning has ended (Succeeded or Failed)."""
    path = f"/deployments/{deployment}"
    wait_until(
        lambda: rest(srv, path)["provisioning_state"] in ("Succeeded", "Failed"),
        timeout=240,
        what=f"{deployment} to settle",
        interval=0.5,
    )
    return rest(srv, path)


@pytest.fixture(scope="module")
def deployed(srv: RunningServer, admin: tuple[httpx.Client, str]) -> str:
    """Endpoint EP (from the form, a hostile description) and its deployment blue from YAML, ready."""
    client, ws = admin
    csrf = csrf_of(client.get(f"{ws}endpoints/_new"))
    made = client.post(
        f"{ws}endpoints/_new",
        data={"csrf_token": csrf, "mode": "form", "name": EP, "auth_mode": "key", "description": HOSTILE},
    )
    assert made.status_code == 303, made.text[:2000]
    page = client.get(f"{ws}endpoints/{EP}/deployments/_new")
    assert page.status_code == 200
    code, model = upload(client, ws, csrf, code_zip()), upload(client, ws, csrf, model_zip())
    form = {"csrf_token": csrf, "yaml": deployment_yaml(EP, "blue", "blue"), "code": code, "model": model}
    made = client.post(f"{ws}endpoints/{EP}/deployments/_new", data=form)
    assert made.status_code == 303, made.text[:3000]
    shown = settled(srv, "blue")
    assert shown["provisioning_state"] == "Succeeded", shown
    return ws


def test_the_list_and_page_show_the_endpoint_escaped(admin: tuple[httpx.Client, str], deployed: str) -> None:
    client, ws = admin
    listed = client.get(f"{ws}endpoints")
    assert listed.status_code == 200
    assert f'href="{ws}endpoints/{EP}"' in listed.text and "blue" in listed.text
    assert HOSTILE not in listed.text and html.escape(HOSTILE, quote=False) in listed.text
    details = client.get(f"{ws}endpoints/{EP}")
    assert "Standard_DS3_v2" in details.text and "/score" in details.text
    assert HOSTILE not in details.text  # the description and the deployment's tags and description


def test_a_local_code_folder_without_its_archive_is_refused_at_its_field(
    admin: tuple[httpx.Client, str], deployed: str
) -> None:
    client, ws = admin
    csrf = csrf_of(client.get(f"{ws}endpoints/{EP}/deployments/_new"))
    answer = client.post(
        f"{ws}endpoints/{EP}/deployments/_new",
        data={"csrf_token": csrf, "yaml": deployment_yaml(EP, "green", "green")},
    )
    assert answer.status_code == 400
    assert "code_configuration.code" in answer.text and "upload it" in answer.text


def test_the_test_tab_goes_through_the_gateway(admin: tuple[httpx.Client, str], deployed: str) -> None:
    client, ws = admin
    csrf = csrf_of(client.get(f"{ws}endpoints/{EP}?tab=test"))
    answer = client.post(
        f"{ws}endpoints/{EP}/test",
        data={"csrf_token": csrf, "deployment": "blue", "body": '{"data": [[1, 2, 3]]}'},
    )
    assert answer.status_code == 200
    assert 'id="result-status">200<' in answer.text
    assert (
        "&#34;who&#34;: &#34;blue&#34;" in answer.text or "&quot;who&quot;: &quot;blue&quot;" in answer.text
    )
    hostile = client.post(
        f"{ws}endpoints/{EP}/test",
        data={"csrf_token": csrf, "deployment": "blue", "body": '{"data": "hostile"}'},
    )
    assert "<img src=x" not in hostile.text and "&lt;img src=x" in hostile.text
    # no traffic yet and none pinned: the gateway's own 404, shown as the answer
    unpinned = client.post(f"{ws}endpoints/{EP}/test", data={"csrf_token": csrf, "body": "{}"})
    assert 'id="result-status">404<' in unpinned.text


def test_a_deployment_from_the_small_form(
    srv: RunningServer, admin: tuple[httpx.Client, str], deployed: str
) -> None:
    client, ws = admin
    csrf = csrf_of(client.get(f"{ws}endpoints/{EP}/deployments/_new"))
    form = {"csrf_token": csrf, "mode": "form", "name": "green", "instance_type": "Standard_DS3_v2"}
    missing = client.post(f"{ws}endpoints/{EP}/deployments/_new", data=form)
    assert missing.status_code == 400 and "model folder" in missing.text
    code, model = upload(client, ws, csrf, code_zip()), upload(client, ws, csrf, model_zip())
    form |= {"code": code, "model": model, "scoring_script": "score.py", "instance_count": "1"}
    made = client.post(f"{ws}endpoints/{EP}/deployments/_new", data=form)
    assert made.status_code == 303, made.text[:3000]
    assert settled(srv, "green")["instance_count"] == 1
    answer = client.post(
        f"{ws}endpoints/{EP}/test",
        data={"csrf_token": csrf, "deployment": "green", "body": '{"data": [[1, 1]]}'},
    )
    assert 'id="result-status">200<' in answer.text and 'id="result-deployment">green<' in answer.text


def test_traffic_must_add_up_and_the_service_refuses_otherwise(
    srv: RunningServer, admin: tuple[httpx.Client, str], deployed: str
) -> None:
    client, ws = admin
    page = client.get(f"{ws}endpoints/{EP}?tab=traffic")
    csrf = csrf_of(page)
    assert 'name="traffic:blue"' in page.text
    bad = client.post(f"{ws}endpoints/{EP}/traffic", data={"csrf_token": csrf, "traffic:blue": "60"})
    assert bad.status_code == 400 and "sum to 60" in bad.text
    assert rest(srv)["traffic"] in ({}, {"blue": 0})
    good = client.post(f"{ws}endpoints/{EP}/traffic", data={"csrf_token": csrf, "traffic:blue": "100"})
    assert good.status_code == 303
    assert rest(srv)["traffic"] == {"blue": 100}
    mirror = client.post(
        f"{ws}endpoints/{EP}/traffic", data={"csrf_token": csrf, "traffic:blue": "100", "mirror:blue": "60"}
    )
    assert mirror.status_code == 400 and "mirror" in mirror.text


def test_keys_on_request_and_regenerate_refuses_the_old_key(
    srv: RunningServer, admin: tuple[httpx.Client, str], deployed: str
) -> None:
    client, ws = admin
    consume = client.get(f"{ws}endpoints/{EP}?tab=consume")
    assert "primary-key" not in consume.text and "&lt;your-key&gt;" in consume.text
    csrf = csrf_of(consume)
    shown = client.post(f"{ws}endpoints/{EP}/keys", data={"csrf_token": csrf})
    with srv.client() as api:
        keys = api.post(f"{srv.ws_path}/onlineEndpoints/{EP}/listKeys").json()
    assert keys["primaryKey"] in shown.text
    uri = str(rest(srv)["scoring_uri"])
    pinned = {"azureml-model-deployment": "blue"}
    old = {"Authorization": f"Bearer {keys['primaryKey']}", **pinned}
    assert httpx.post(uri, json=REQUEST, headers=old, timeout=30).status_code == 200
    regenerated = client.post(
        f"{ws}endpoints/{EP}/regenerate", data={"csrf_token": csrf, "key_type": "Primary"}
    )
    assert regenerated.status_code == 303
    wait_until(
        lambda: httpx.post(uri, json=REQUEST, headers=old, timeout=30).status_code == 401,
        timeout=10,
        what="the old key refused",
    )


def test_logs_and_metrics(admin: tuple[httpx.Client, str], deployed: str) -> None:
    client, ws = admin
    logs = client.get(f"{ws}endpoints/{EP}?tab=logs")
    assert "init done" in logs.text and "<img src=x" not in logs.text
    box = client.get(f"{ws}endpoints/{EP}/logs?deployment=blue")
    assert box.status_code == 200 and 'id="log-box"' in box.text
    metrics = client.get(f"{ws}endpoints/{EP}/metrics.json").json()
    blue = metrics["deployments"]["blue"]
    assert blue["requests"] >= 1 and blue["sampled"] >= 1 and blue["p95_ms"] >= blue["p50_ms"] > 0
    after = client.get(f"{ws}endpoints/{EP}/metrics.json", params={"since": metrics["t"]}).json()
    assert after["deployments"]["blue"]["sampled"] == 0 and after["deployments"]["blue"]["p50_ms"] is None
    assert client.get(f"{ws}endpoints/{EP}?tab=monitoring").status_code == 200


def test_the_monitoring_counters_and_the_log_tail_are_live(
    srv: RunningServer, admin: tuple[httpx.Client, str], deployed: str
) -> None:
    client, ws = admin
    csrf = csrf_of(client.get(f"{ws}endpoints/{EP}?tab=test"))

    def send(body: str) -> None:
        answer = client.post(
            f"{ws}endpoints/{EP}/test", data={"csrf_token": csrf, "deployment": "blue", "body": body}
        )
        assert answer.status_code == 200

    monitoring = client.get(f"{ws}endpoints/{EP}?tab=monitoring").text
    assert "metrics/live" in monitoring and "metrics.json" not in monitoring  # the page follows the stream
    with client.stream("GET", f"{ws}endpoints/{EP}/metrics/live") as response:
        assert response.status_code == 200
        stream = events(response)
        kind, _, data = next(stream)
        assert kind == "metrics", (kind, data)
        before = json.loads(data)["deployments"]["blue"]["requests"]
        send('{"data": [[1, 2, 3]]}')
        for kind, _, data in stream:  # an event every 2 s; the request is counted in one of them
            assert kind == "metrics", (kind, data)
            blue = json.loads(data)["deployments"]["blue"]
            if blue["requests"] > before:
                assert blue["sampled"] >= 1 and blue["p95_ms"] >= blue["p50_ms"] > 0, blue
                break
    logs = client.get(f"{ws}endpoints/{EP}?tab=logs").text
    assert "logs/live?deployment=blue" in logs and "Refresh" not in logs
    with client.stream("GET", f"{ws}endpoints/{EP}/logs/live", params={"deployment": "blue"}) as response:
        assert response.status_code == 200
        stream = events(response)
        kind, _, data = next(stream)
        assert kind == "logs" and 'id="log-box"' in data and "init done" in data and "<html" not in data, data
        assert "<img src=x" not in data and "&lt;img src=x" in data
        send('{"data": "boom"}')  # the scoring script raises: the server logs it
        kind, _, data = next(stream)
        assert kind == "logs" and "boom" in data and "<img src=x" not in data, data
    with srv.client() as api, studio_client(srv) as outsider:
        sign_in(outsider, new_user(api, srv, "online-outsider", None))
        for stream_url in (f"{ws}endpoints/{EP}/metrics/live", f"{ws}endpoints/{EP}/logs/live"):
            assert outsider.get(stream_url).status_code == 404, stream_url


def test_a_reader_sees_no_write_control_and_is_refused(srv: RunningServer, deployed: str) -> None:
    with srv.client() as api:
        reader_key = new_user(api, srv, "online-reader", "Reader")
    with studio_client(srv) as reader:
        assert sign_in(reader, reader_key).status_code == 303
        ws = deployed
        for tab in ("details", "consume", "traffic", "test"):
            page = reader.get(f"{ws}endpoints/{EP}?tab={tab}")
            assert page.status_code == 200, tab
            for control in (
                "regenerate-primary",
                'id="save-traffic"',
                ">Delete<",
                'id="show-keys"',
                'id="send-test"',
            ):
                assert control not in page.text, (tab, control)
        csrf = csrf_of(reader.get(f"{ws}endpoints/{EP}"))
        writes = {
            "regenerate": {"key_type": "Primary"},
            "traffic": {"traffic:blue": "0"},
            "keys": {},
            "test": {"body": "{}"},
            "delete": {},
            "deployments/blue/delete": {},
        }
        for path, form in writes.items():
            answer = reader.post(f"{ws}endpoints/{EP}/{path}", data={"csrf_token": csrf, **form})
            assert answer.status_code == 403, (path, answer.status_code)
        assert rest(srv)["traffic"] == {"blue": 100}


def test_writes_need_the_csrf_token(admin: tuple[httpx.Client, str], deployed: str) -> None:
    client, ws = admin
    answer = client.post(f"{ws}endpoints/{EP}/regenerate", data={"key_type": "Secondary"})
    assert answer.status_code == 403


def test_delete_the_endpoint(srv: RunningServer, admin: tuple[httpx.Client, str], deployed: str) -> None:
    client, ws = admin
    csrf = csrf_of(client.get(f"{ws}endpoints/{EP}"))
    refused = client.post(f"{ws}endpoints/{EP}/deployments/blue/delete", data={"csrf_token": csrf})
    assert refused.status_code == 409 and "traffic to 0 first" in refused.text  # the service's rule
    assert client.post(f"{ws}endpoints/{EP}/delete", data={"csrf_token": csrf}).status_code == 303
    with srv.client() as api:
        assert api.get(f"{srv.ws_path}/onlineEndpoints/{EP}").status_code == 404


def test_an_endpoint_from_yaml_with_hostile_tags_and_errors_at_the_field(
    srv: RunningServer, admin: tuple[httpx.Client, str]
) -> None:
    client, ws = admin
    csrf = csrf_of(client.get(f"{ws}endpoints/_new"))
    text = f"name: yaml-ep\nauth_mode: aml_token\ntags:\n  note: '{HOSTILE}'\n"
    made = client.post(f"{ws}endpoints/_new", data={"csrf_token": csrf, "mode": "yaml", "yaml": text})
    assert made.status_code == 303, made.text[:2000]
    page = client.get(f"{ws}endpoints/yaml-ep")
    assert HOSTILE not in page.text and html.escape(HOSTILE, quote=False) in page.text
    # an aml_token endpoint: the Consume tab mints a token on request
    token = client.post(f"{ws}endpoints/yaml-ep/keys", data={"csrf_token": csrf})
    assert 'id="access-token"' in token.text
    bad = client.post(
        f"{ws}endpoints/_new",
        data={"csrf_token": csrf, "mode": "yaml", "yaml": "name: bad-ep\nauth_mode: basic\n"},
    )
    assert bad.status_code == 400 and "auth_mode" in bad.text and "(line 2)" in bad.text
    taken = client.post(f"{ws}endpoints/_new", data={"csrf_token": csrf, "mode": "yaml", "yaml": text})
    assert taken.status_code == 409 and "exists already" in taken.text
    with srv.client() as api:
        assert api.get(f"{srv.ws_path}/onlineEndpoints/bad-ep").status_code == 404
