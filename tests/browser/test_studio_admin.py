"""Issue 28's administration walk in Chromium: an administrator signs in → creates a user → creates
a key for them and reads its secret, once → assigns them Reader on the workspace → signs out; the
new user signs in with that key → sees the jobs and no write control anywhere (Jobs, Compute, Quota;
Admin is not in the navigation) → the administrator signs in again → the audit log filtered by
actor and action shows the user, the key and the role assignment, each with channel "studio" →
revokes the key → the Reader's session ends (their next page is the sign-in form).

Hostile strings (a lock's notes, a refused user name echoed in the error, the audit filters) show
as text: a script or handler would log to the console or trip the CSP, either of which fails the
page fixture. axe-core runs on every tab."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser import studio_helpers
from tests.browser.studio_helpers import (
    REPORT_CSP,
    VIEWPORT,
    axe_check,
    confirm,
    expect_failed_load,
    screenshot,
    sign_in,
    ws_url,
)
from tests.conftest import RunningServer
from tests.jobs_helpers import create_compute, submit

studio_srv, browser, page = studio_helpers.studio_srv, studio_helpers.browser, studio_helpers.page
HOSTILE = "<img src=x onerror=console.error('xss')></script><script>console.error('xss')</script>"
SESSION_END_MS = 10_000  # the caller cache is 2 s; revocation reaches this server at once


@pytest.fixture
def second_page(browser: Any) -> Iterator[Any]:
    """Another user's browser (its own cookies), held to the same rule: no console error."""
    context = browser.new_context(viewport=VIEWPORT)
    context.add_init_script(REPORT_CSP)
    opened = context.new_page()
    problems: list[str] = []
    opened.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    opened.on("pageerror", lambda exc: problems.append(str(exc)))
    try:
        yield opened
    finally:
        context.close()
    assert problems == [], problems


def _tab(page: Any, name: str) -> None:
    page.get_by_role("navigation", name="Administration").get_by_role("link", name=name).click()
    expect(
        page.get_by_role("navigation", name="Administration").get_by_role("link", name=name)
    ).to_have_attribute("aria-current", "page")


def test_admin_creates_a_reader_who_sees_no_write_control_and_the_audit_log_shows_it(
    studio_srv: RunningServer, page: Any, second_page: Any
) -> None:
    srv = studio_srv
    with srv.client() as api:
        admin_name = api.get("/api/v1/whoami").json()["principal"]
        create_compute(
            api,
            srv,
            "adm-cpu",
            {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 1},
        )
        submit(
            api,
            srv,
            "adm-job",
            {"command": "echo hi", "compute": "azureml:adm-cpu", "display_name": "adm job"},
        )

    # -- the administrator: a user, a key, a role -------------------------------------------
    sign_in(page, srv)
    page.get_by_role("navigation", name="Studio").get_by_role("link", name="Admin").click()
    page.wait_for_url("**/admin/users")
    page.get_by_label("Name", exact=True).fill("newbie")
    page.get_by_role("button", name="Create user").click()
    page.wait_for_url("**/admin/users")
    row = page.locator("#users tr[data-user='newbie']")
    expect(row).to_contain_text("Enabled")
    screenshot(page, "admin-users")
    axe_check(page)
    # Disable asks first; "Go back" leaves the user enabled.
    row.get_by_role("button", name="Disable newbie").click()
    asked = page.get_by_role("dialog", name=re.compile("^Disable newbie\\?"))
    asked.get_by_role("button", name="Go back").click()
    asked.wait_for(state="hidden")
    expect(row).to_contain_text("Enabled")
    # A refused name comes back at the form as text.
    expect_failed_load(page, ws_url(srv, "admin", "users"))
    page.get_by_label("Name", exact=True).fill(HOSTILE[:120])
    page.get_by_role("button", name="Create user").click()
    expect(page.get_by_role("alert")).to_contain_text("a user name is 1 to 128")
    expect(page.get_by_label("Name", exact=True)).to_have_value(HOSTILE[:120])

    page.goto(ws_url(srv, "admin", "users"))
    row.get_by_role("link", name="API keys").click()
    page.wait_for_url("**/admin/keys?user=newbie")
    page.get_by_role("button", name="Create key").click()
    secret = page.get_by_label("API key", exact=True).input_value()
    assert secret.startswith("clk_")
    expect(page.locator("#keys tbody tr")).to_have_count(1)
    screenshot(page, "admin-key-secret")
    axe_check(page)
    page.goto(ws_url(srv, "admin", "keys") + "?user=newbie")  # the list again: the secret is gone
    expect(page.locator("#keys")).to_contain_text(secret[:8])
    assert secret not in page.content()

    _tab(page, "Role assignments")
    page.get_by_label("User", exact=True).fill("newbie")
    page.get_by_label("Role", exact=True).select_option("Reader")
    page.get_by_role("button", name="Assign").click()
    page.wait_for_url("**/admin/roles")
    expect(page.locator("#assignments tr[data-user='newbie'] .role")).to_have_text("Reader")
    screenshot(page, "admin-roles")
    axe_check(page)

    _tab(page, "Locks")
    page.get_by_label("Name", exact=True).fill("hold")
    page.get_by_label("Notes").fill(HOSTILE)
    page.get_by_role("button", name="Add lock").click()
    expect(page.locator("#locks tr[data-lock='hold'] .lock-notes")).to_have_text(HOSTILE)
    axe_check(page)
    page.locator("#locks tr[data-lock='hold']").get_by_role("button", name="Remove").click()
    question = "Remove lock hold? What it protects can be changed or deleted again."
    page.get_by_role("dialog", name=question).wait_for()
    axe_check(page)
    screenshot(page, "admin-confirm")
    confirm(page, "Remove", question)
    expect(page.locator("#locks tr[data-lock='hold']")).to_have_count(0)

    _tab(page, "Locations and sizes")
    expect(page.locator("#locations")).to_contain_text("local")
    axe_check(page)
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/studio/signin")

    # -- the Reader: the jobs, and no write control ------------------------------------------
    reader = second_page
    sign_in(reader, srv, secret)
    nav = reader.get_by_role("navigation", name="Studio")
    expect(nav.get_by_role("link", name="Jobs")).to_be_visible()
    assert nav.get_by_role("link", name="Admin").count() == 0
    reader.goto(ws_url(srv, "jobs"))
    expect(reader.locator("#jobs-results")).to_contain_text("adm job")
    for part in ("jobs", "jobs/adm-job", "compute", "compute?tab=clusters", "compute/adm-cpu", "quota"):
        reader.goto(ws_url(srv, *part.split("/")))
        expect(reader.locator("main")).to_be_visible()
        # Sign out is the one control that writes; no button of a posting form in the page's content.
        writes = reader.locator(
            "main form[method='post'] button, main form[method='post'] input[type='submit']"
        )
        assert writes.count() == 0, part
        assert (
            reader.get_by_role("button", name=re.compile(r"^(Cancel|Start|Stop|Delete|Set)")).count() == 0
        ), part
        assert reader.get_by_role("link", name=re.compile(r"^\+ ")).count() == 0, part
    axe_check(reader)

    # -- the administrator again: the audit log --------------------------------------------
    sign_in(page, srv)
    page.goto(ws_url(srv, "admin", "audit"))
    page.get_by_label("Actor").fill(admin_name)
    page.get_by_label("Channel").select_option("studio")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r".*/admin/audit\?actor="))
    rows = page.locator("#audit tbody tr")
    for action, target in (
        ("principal.create", "/principals/newbie"),
        ("apiKey.create", "/principals/newbie/keys/"),
        ("roleAssignment.write", "/roleAssignments/newbie"),
        ("lock.write", "/locks/hold"),
    ):
        found = rows.filter(has=page.locator(".audit-action", has_text=action)).filter(
            has=page.locator(".audit-target", has_text=target)
        )
        expect(found).to_have_count(1)
        expect(found.locator(".audit-channel")).to_have_text("studio")
    # The hostile lock notes in the entry's details: text.
    expect(
        rows.filter(has=page.locator(".audit-action", has_text="lock.write")).locator(".audit-details")
    ).to_contain_text("<img src=x")
    screenshot(page, "admin-audit")
    axe_check(page)
    page.get_by_label("Action or kind").fill("apiKey")
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(1)
    expect(rows.locator(".audit-action")).to_have_text("apiKey.create")
    # Hostile filter values are echoed back into the form as values, not markup.
    page.goto(ws_url(srv, "admin", "audit") + "?target=" + HOSTILE.replace("<", "%3C").replace(">", "%3E"))
    expect(page.get_by_label("Target (and all under it)")).to_have_value(HOSTILE)

    # -- revoke the key: the Reader's session ends ---------------------------------------------
    page.goto(ws_url(srv, "admin", "keys") + "?user=newbie")
    page.locator("#keys tbody tr").first.get_by_role("button", name=re.compile("^Revoke")).click()
    confirm(page, "Revoke")
    expect(page.locator("#keys tbody tr").first).to_contain_text("Revoked")
    reader.goto(ws_url(srv, "jobs"))
    expect(reader).to_have_url(re.compile(r".*/studio/signin\?next="), timeout=SESSION_END_MS)
    page.goto(ws_url(srv, "admin", "audit") + "?action=apiKey.revoke&channel=studio")
    expect(page.locator("#audit tbody tr .audit-target")).to_contain_text("/principals/newbie/keys/")
