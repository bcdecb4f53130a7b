"""The studio's Jobs over real HTTP (issue 27): the list's filters, sorts and pages as query
parameters; submit from YAML (and a code archive), validation errors at their field; clone with an
edited command; cancel, bulk cancel, resubmit; a Reader's POSTs refused; CSRF required.

The module's cluster sits behind a resource-group lock (scaling blocked), so its jobs stay queued
and nothing runs: what is asserted is what the studio asked the services to do."""

from __future__ import annotations

import html
import io
import re
import zipfile
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.jobs_helpers import create_compute, job, served, submit
from tests.studio_http import csrf_of, sign_in, studio_client

CLUSTER = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 1}
HOSTILE = "<img src=x onerror=console.error(1)></script><script>console.error(2)</script>"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "studio-jobs")


@pytest.fixture(scope="module")
def held(srv: RunningServer, api: httpx.Client) -> Iterator[str]:
    """A cluster whose scaling a resource-group lock blocks: its jobs stay queued."""
    create_compute(api, srv, "held", CLUSTER)
    scope = f"/api/v1/subscriptions/{srv.subscription_id}/resourceGroups/default/locks/hold"
    assert api.put(scope, json={"level": "CanNotDelete", "notes": "studio tests"}).status_code == 201
    yield "held"
    api.delete(scope)


def ws_url(srv: RunningServer, *parts: str) -> str:
    return "/".join([f"/studio/ws/{srv.subscription_id}/default/default", *parts])


@pytest.fixture(scope="module")
def admin(srv: RunningServer) -> Iterator[httpx.Client]:
    with studio_client(srv) as client:
        assert sign_in(client, srv.api_key).status_code == 303
        yield client


def new_reader(api: httpx.Client, srv: RunningServer, name: str) -> str:
    assert api.post("/api/v1/principals", json={"name": name}).status_code == 201
    key = api.post(f"/api/v1/principals/{name}/keys").json()["api_key"]
    assert api.put(f"{srv.ws_path}/roleAssignments/{name}", json={"role": "Reader"}).status_code == 200
    return str(key)


def token(client: httpx.Client, srv: RunningServer) -> str:
    return csrf_of(client.get(ws_url(srv, "jobs", "_new")))


def post_yaml(client: httpx.Client, srv: RunningServer, text: str, **fields: str) -> httpx.Response:
    form = {"csrf_token": token(client, srv), "yaml": text, **fields}
    return client.post(ws_url(srv, "jobs", "_new"), data=form)


def queued_job(api: httpx.Client, srv: RunningServer, held: str, name: str, **extra: Any) -> None:
    submit(api, srv, name, {"command": "echo hi", "compute": f"azureml:{held}", **extra})


# -- submit -------------------------------------------------------------------------------------
def test_submit_pasted_yaml_makes_the_job(
    srv: RunningServer, api: httpx.Client, admin: httpx.Client, held: str
) -> None:
    text = f"command: echo from the studio\ncompute: azureml:{held}\nname: pasted-one\ndisplay_name: Pasted\n"
    sent = post_yaml(admin, srv, text)
    assert sent.status_code == 303, sent.text
    assert sent.headers["location"] == ws_url(srv, "jobs", "pasted-one")
    shown = job(api, srv, "pasted-one")
    assert shown["command"] == "echo from the studio" and shown["display_name"] == "Pasted"
    # The name field wins over the YAML's; an empty one with no YAML name gets a generated name.
    assert post_yaml(admin, srv, text, name="renamed-one").headers["location"].endswith("/jobs/renamed-one")
    made = post_yaml(admin, srv, f"command: echo x\ncompute: azureml:{held}\n")
    assert made.status_code == 303 and re.search(
        r"/jobs/[a-z]+_[a-z]+_[0-9a-f]{8}$", made.headers["location"]
    )


def test_a_job_named_new_opens_its_page_and_the_old_form_link_redirects(
    srv: RunningServer, api: httpx.Client, admin: httpx.Client, held: str
) -> None:
    """The submit form is at …/jobs/_new ("_" starts no job name): a job named "new" (or "cancel")
    is reached at …/jobs/{name}; …/jobs/new sends to the form only while no job is so named."""
    old = admin.get(ws_url(srv, "jobs", "new"))
    assert old.status_code == 303 and old.headers["location"] == ws_url(srv, "jobs", "_new")
    assert 'id="job-form"' in admin.get(ws_url(srv, "jobs", "_new")).text
    for name in ("new", "cancel"):
        queued_job(api, srv, held, name, display_name=f"named {name}")
        page = admin.get(ws_url(srv, "jobs", name))
        assert page.status_code == 200, page.text
        assert f"named {name}" in page.text and 'id="job-form"' not in page.text
    listed = admin.get(ws_url(srv, "jobs")).text
    assert f'href="{ws_url(srv, "jobs", "_new")}"' in listed


@pytest.mark.parametrize(
    ("text", "field", "line"),
    [
        ("command: echo hi\ncompute: azureml:nowhere\n", "compute", 2),
        (
            "command: echo hi\ncompute: azureml:held\nresources:\n  instance_count: 0\n",
            "resources.instance_count",
            4,
        ),
        (
            "command: echo hi\ncompute: azureml:held\n"
            "distribution:\n  type: pytorch\n  process_count_per_instance: -2\n",
            "distribution.process_count_per_instance",
            5,
        ),
        ("compute: azureml:held\n", "command", None),
        ("command: [unclosed\n", "yaml", None),
    ],
)
def test_an_invalid_document_is_shown_at_its_field(
    srv: RunningServer, admin: httpx.Client, held: str, text: str, field: str, line: int | None
) -> None:
    sent = post_yaml(admin, srv, text)
    assert 400 <= sent.status_code < 500, sent.text
    error = re.search(r'id="form-error">(.*?)</div>', sent.text, re.S)
    assert error is not None, sent.text[-2000:]
    assert f'<span class="mono">{field}</span>' in error.group(1)
    if line is not None:
        assert f"(line {line})" in error.group(1)
        assert f'data-error-line="{line}"' in sent.text
    assert html.escape(text, quote=False).split("\n")[0] in sent.text  # the text is kept to fix it


def test_a_job_with_a_hostile_name_in_the_yaml_is_escaped(
    srv: RunningServer, admin: httpx.Client, held: str
) -> None:
    text = f"command: echo hi\ncompute: azureml:{held}\ndisplay_name: '{HOSTILE}'\ntags: {{x: '{HOSTILE}'}}\n"
    sent = post_yaml(admin, srv, text + "bogus_key: 1\n")
    assert sent.status_code == 400 and HOSTILE not in sent.text and "&lt;img" in sent.text


def test_a_local_code_path_needs_its_archive(
    srv: RunningServer, api: httpx.Client, admin: httpx.Client, held: str
) -> None:
    text = f"command: python main.py\ncode: ./src\ncompute: azureml:{held}\nname: with-code\n"
    refused = post_yaml(admin, srv, text)
    assert refused.status_code == 400 and '<span class="mono">code</span> (line 2)' in refused.text
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w") as archive:
        archive.writestr("main.py", "print('hello')\n")
    csrf = token(admin, srv)
    uploaded = admin.post(
        ws_url(srv, "jobs", "_new", "code"), content=packed.getvalue(), headers={"X-CSRF-Token": csrf}
    )
    assert uploaded.status_code == 200, uploaded.text
    code = uploaded.json()["code"]
    assert re.fullmatch(r"codes/[0-9a-f]{64}", code)
    bad = admin.post(
        ws_url(srv, "jobs", "_new", "code"), content=b"not an archive", headers={"X-CSRF-Token": csrf}
    )
    assert bad.status_code == 400 and bad.json()["field"] == "code_archive"
    sent = post_yaml(admin, srv, text, code=code)
    assert sent.status_code == 303, sent.text
    assert job(api, srv, "with-code")["code"].endswith(code.removeprefix("codes/"))


# -- clone, resubmit, the YAML tab --------------------------------------------------------------------
def test_clone_with_an_edited_command_submits_a_new_job(
    srv: RunningServer, api: httpx.Client, admin: httpx.Client, held: str
) -> None:
    queued_job(api, srv, held, "clone-source", display_name="Source", tags={"team": "vision"})
    page = admin.get(ws_url(srv, "jobs", "clone-source", "clone"))
    assert page.status_code == 200
    text = html.unescape(re.search(r'name="yaml"[^>]*>(.*?)</textarea>', page.text, re.S).group(1))  # type: ignore[union-attr]
    assert "command: echo hi" in text and "name: clone-source" not in text
    new_name = re.search(r'id="job-name" name="name" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    form = {"csrf_token": csrf_of(page), "yaml": text.replace("echo hi", "echo edited"), "name": new_name}
    sent = admin.post(ws_url(srv, "jobs", "clone-source", "clone"), data=form)
    assert sent.status_code == 303, sent.text
    cloned = job(api, srv, new_name)
    assert cloned["command"] == "echo edited" and cloned["tags"] == {"team": "vision"}
    assert job(api, srv, "clone-source")["command"] == "echo hi"


def test_resubmit_and_the_yaml_tab(
    srv: RunningServer, api: httpx.Client, admin: httpx.Client, held: str
) -> None:
    queued_job(api, srv, held, "again", display_name=HOSTILE)
    tab = admin.get(ws_url(srv, "jobs", "again", "yaml"))
    assert tab.status_code == 200 and HOSTILE not in tab.text
    assert "commandJob.schema.json" in tab.text and "name: again" in tab.text
    sent = admin.post(ws_url(srv, "jobs", "again", "resubmit"), data={"csrf_token": csrf_of(tab)})
    assert sent.status_code == 303, sent.text
    new_name = sent.headers["location"].rsplit("/", 1)[1]
    assert new_name != "again" and job(api, srv, new_name)["command"] == "echo hi"


# -- cancel -------------------------------------------------------------------------------------
def test_cancel_one_and_bulk_cancel(
    srv: RunningServer, api: httpx.Client, admin: httpx.Client, held: str
) -> None:
    for name in ("cancel-me", "bulk-a", "bulk-b", "bulk-keep"):
        queued_job(api, srv, held, name)
    csrf = token(admin, srv)
    back = ws_url(srv, "jobs") + "?status=Queued"
    sent = admin.post(ws_url(srv, "jobs", "cancel-me", "cancel"), data={"csrf_token": csrf, "next": back})
    assert sent.status_code == 303 and sent.headers["location"] == back
    assert job(api, srv, "cancel-me")["status"] == "Canceled"
    # A "next" elsewhere is not followed.
    again = admin.post(
        ws_url(srv, "jobs", "bulk-keep", "cancel"), data={"csrf_token": csrf, "next": "https://evil.example/"}
    )
    assert again.headers["location"] == ws_url(srv, "jobs")
    queued_job(api, srv, held, "bulk-c")
    bulk = admin.post(
        ws_url(srv, "jobs", "cancel"),
        content="&".join([f"csrf_token={csrf}", "name=bulk-a", "name=bulk-b", "name=cancel-me"]),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert bulk.status_code == 303, bulk.text
    assert [job(api, srv, n)["status"] for n in ("bulk-a", "bulk-b", "bulk-c")] == [
        "Canceled",
        "Canceled",
        "Queued",
    ]


# -- roles and CSRF -----------------------------------------------------------------------------
def test_a_reader_sees_no_write_control_and_is_refused(
    srv: RunningServer, api: httpx.Client, held: str
) -> None:
    queued_job(api, srv, held, "readers-view")
    key = new_reader(api, srv, "jobs-reader")
    with studio_client(srv) as reader:
        assert sign_in(reader, key).status_code == 303
        listed = reader.get(ws_url(srv, "jobs"))
        assert listed.status_code == 200 and "readers-view" in listed.text
        for control in ("Submit job", "Cancel selected", ">Cancel<", 'name="name" value='):
            assert control not in listed.text, control
        yaml_tab = reader.get(ws_url(srv, "jobs", "readers-view", "yaml"))
        assert yaml_tab.status_code == 200
        assert (
            "Clone" not in yaml_tab.text
            and "Resubmit" not in yaml_tab.text
            and ">Cancel<" not in yaml_tab.text
        )
        csrf = csrf_of(listed)
        posts = {
            ws_url(srv, "jobs", "readers-view", "cancel"): {"csrf_token": csrf},
            ws_url(srv, "jobs", "cancel"): {"csrf_token": csrf, "name": "readers-view"},
            ws_url(srv, "jobs", "readers-view", "resubmit"): {"csrf_token": csrf},
            ws_url(srv, "jobs", "_new"): {
                "csrf_token": csrf,
                "yaml": "command: echo r\n",
                "name": "by-reader",
            },
            ws_url(srv, "jobs", "readers-view", "clone"): {
                "csrf_token": csrf,
                "yaml": "command: echo r\n",
                "name": "by-reader",
            },
        }
        for url, form in posts.items():
            refused = reader.post(url, data=form)
            assert refused.status_code == 403, (url, refused.text[:300])
            assert "Not allowed" in refused.text
        upload = reader.post(
            ws_url(srv, "jobs", "_new", "code"), content=b"PK\x03\x04", headers={"X-CSRF-Token": csrf}
        )
        assert upload.status_code == 403
    assert job(api, srv, "readers-view")["status"] == "Queued"
    assert api.get(f"{srv.ws_path}/jobs/by-reader").status_code == 404


def test_writes_without_the_csrf_token_are_refused(
    srv: RunningServer, api: httpx.Client, admin: httpx.Client, held: str
) -> None:
    queued_job(api, srv, held, "csrf-target")
    for url, form in (
        (ws_url(srv, "jobs", "csrf-target", "cancel"), {}),
        (ws_url(srv, "jobs", "cancel"), {"name": "csrf-target"}),
        (ws_url(srv, "jobs", "_new"), {"yaml": "command: echo c\n", "name": "csrf-new"}),
    ):
        assert admin.post(url, data=form).status_code == 403, url
    assert job(api, srv, "csrf-target")["status"] == "Queued"
    assert api.get(f"{srv.ws_path}/jobs/csrf-new").status_code == 404


# -- the list ------------------------------------------------------------------------------------
def rows_of(page: httpx.Response) -> list[str]:
    """The job names of a list page's rows, in order."""
    assert page.status_code == 200, page.text[:500]
    return re.findall(
        r'<tr>\s*(?:<td class="check">.*?</td>)?\s*'
        r'<td class="col-name"><a class="strong" href="[^"]*/jobs/([^"/]+)"',
        page.text,
        re.S,
    )


def test_the_list_filters_sorts_and_pages_by_query_parameters(
    srv: RunningServer, api: httpx.Client, admin: httpx.Client, held: str
) -> None:
    for i in range(30):
        extra: dict[str, Any] = {
            "experiment_name": "exp-a" if i % 2 else "exp-b",
            "tags": {"team": "vision" if i % 3 else "speech"},
        }
        queued_job(api, srv, held, f"list-{i:02d}", **extra)
    base = ws_url(srv, "jobs")
    newest = rows_of(admin.get(base, params={"q": "list-"}))
    assert newest[:3] == ["list-29", "list-28", "list-27"] and len(newest) == 30
    by_name = rows_of(admin.get(base, params={"q": "list-", "sort": "name", "order": "asc"}))
    assert by_name == sorted(newest)
    # Pages: 25, then the rest from the "Next page" link (a token).
    first = admin.get(base, params={"q": "list-", "size": "25"})
    assert rows_of(first) == newest[:25]
    next_link = html.unescape(
        re.search(r'<a class="button" href="([^"]+)"[^>]*>Next page', first.text).group(1)
    )  # type: ignore[union-attr]
    assert "after=" in next_link
    assert rows_of(admin.get(next_link)) == newest[25:]
    # Filters, alone and together; the count.
    assert len(rows_of(admin.get(base, params={"q": "list-", "experiment": "exp-a"}))) == 15
    assert len(rows_of(admin.get(base, params={"q": "list-", "tag": "team=speech"}))) == 10
    assert (
        len(rows_of(admin.get(base, params={"q": "list-", "tag": "team=speech", "experiment": "exp-a"}))) == 5
    )
    assert rows_of(
        admin.get(base, params={"q": "list-1", "compute": held, "by": "admin", "status": "Queued"})
    )[:1] == ["list-19"]
    assert rows_of(admin.get(base, params={"q": "list-", "status": "Completed"})) == []
    assert rows_of(admin.get(base, params={"q": "list-", "type": "sweep"})) == []
    assert len(rows_of(admin.get(base, params={"q": "list-", "type": "command", "since": "1h"}))) == 30
    assert rows_of(admin.get(base, params={"q": "list-", "to": "2001-01-01"})) == []
    counted = admin.get(base, params={"q": "list-", "tag": "team=speech"})
    assert '<h2 id="jobs-count">10 jobs</h2>' in counted.text  # one page: counts itself
    assert '<h2 id="jobs-count">30 jobs</h2>' in admin.get(base, params={"q": "list-", "size": "25"}).text
    more = admin.get(base, params={"q": "list-", "experiment": "exp-a", "size": "25"})
    assert '<h2 id="jobs-count">15 jobs</h2>' in more.text
    uncounted = admin.get(base, params={"compute": held, "size": "25"})  # a filter a count would scan for
    assert '<h2 id="jobs-count">25+ jobs</h2>' in uncounted.text
    # htmx asks for the results part only.
    part = admin.get(
        base, params={"q": "list-0"}, headers={"HX-Request": "true", "HX-Target": "jobs-results"}
    )
    assert part.text.lstrip().startswith(("<section", "{#")) or part.text.lstrip().startswith("<section")
    assert "<html" not in part.text and len(rows_of(part)) == 10
    # A bad parameter is a 400 page naming it, not a 500.
    bad = admin.get(base, params={"status": "Sleeping"})
    assert bad.status_code == 400 and "Sleeping" in bad.text
    assert admin.get(base, params={"size": "7"}).status_code == 400
