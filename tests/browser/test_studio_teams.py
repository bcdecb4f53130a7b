"""Issue 31 in Chromium: an administrator opens Administration → Teams, creates a team of two users
with a 50 % share of a cluster from the form, sees it listed, adds a second team from YAML, and the
cluster's Fair share tab lists both, with the running job's team holding its cores; an edit keeps
the team's rows; a delete asks first. Every write is audited with the studio as its channel.

Hostile strings (a team's description, a refused team name echoed at the form) stay text: a script
or handler would log to the console or trip the CSP, either of which fails the page fixture. A user
who is not an administrator sees the list and no button. axe-core runs on every new page.
Run alone (-n 1): one server, one browser."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from tests.browser import studio_helpers
from tests.browser.studio_helpers import axe_check, confirm, screenshot, sign_in, ws_url
from tests.conftest import RunningServer
from tests.instance_helpers import new_user
from tests.jobs_helpers import create_compute, submit, wait_job

studio_srv, browser, page = studio_helpers.studio_srv, studio_helpers.browser, studio_helpers.page
HOSTILE = "<img src=x onerror=console.error('xss')></script><script>console.error('xss')</script>"
CLUSTER = "tm-cpu"
NLP_YAML = f"""name: nlp
description: the language team
members: [tm-cid]
shares:
- workspace: default
  compute: {CLUSTER}
  share: 50
  borrow_limit: 0
"""


def test_admin_makes_teams_and_the_cluster_shows_its_fair_share(studio_srv: RunningServer, page: Any) -> None:
    srv = studio_srv
    with srv.client() as api:
        body = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 1}
        create_compute(api, srv, CLUSTER, body)
        keys = {name: new_user(api, srv, name, "Contributor") for name in ("tm-ann", "tm-ben", "tm-cid")}

    # -- the form: two members, half the cluster --------------------------------------------
    sign_in(page, srv)
    page.goto(ws_url(srv, "admin", "users"))
    page.get_by_role("navigation", name="Administration").get_by_role("link", name="Teams").click()
    page.wait_for_url("**/admin/teams")
    expect(page.locator("#teams")).to_contain_text("No teams")
    page.get_by_role("link", name="New team").click()
    page.wait_for_url("**/admin/teams/_new")
    axe_check(page)
    # A refused name comes back at the form (a 400), as text.
    studio_helpers.expect_failed_load(page, ws_url(srv, "admin", "teams"))
    page.get_by_label("Name", exact=True).fill(HOSTILE[:64])
    page.get_by_role("button", name="Create team").click()
    expect(page.get_by_role("alert")).to_contain_text("team name")
    expect(page.get_by_role("alert")).to_contain_text("<img src=x")
    page.get_by_label("Name", exact=True).fill("vision")
    page.get_by_label("Description").fill(HOSTILE)
    for user in ("tm-ann", "tm-ben"):
        page.get_by_label(user, exact=True).check()
    page.get_by_label("Pool of share 1").select_option(label=f"Cluster {CLUSTER} (default)")
    page.get_by_label("Share 1", exact=True).fill("50")
    page.get_by_role("button", name="Create team").click()
    page.wait_for_url("**/admin/teams")
    row = page.locator("#teams tr[data-team='vision']")
    expect(row.locator(".team-description")).to_have_text(HOSTILE)
    expect(row.locator(".team-members")).to_contain_text("tm-ann")
    expect(row.locator(".team-members")).to_contain_text("tm-ben")
    expect(row.locator(".team-shares")).to_contain_text(f"cluster {CLUSTER}")
    expect(row.locator(".team-shares")).to_contain_text("share 50, borrows any idle")

    # -- YAML: a second team, half the cluster, never borrowing ------------------------------
    page.get_by_role("link", name="New team").click()
    page.get_by_label("Team YAML").fill(NLP_YAML)
    page.get_by_role("button", name="Save from YAML").click()
    page.wait_for_url("**/admin/teams")
    expect(page.locator("#teams tr[data-team='nlp'] .team-shares")).to_contain_text("borrows never")
    screenshot(page, "admin-teams")
    axe_check(page)

    # -- an edit keeps the team's rows ---------------------------------------------------------
    row.get_by_role("link", name="Edit vision").click()
    page.wait_for_url("**/admin/teams/vision")
    expect(page.get_by_label("Share 1", exact=True)).to_have_value("50")
    expect(page.get_by_label("tm-ann", exact=True)).to_be_checked()
    expect(page.get_by_label("Description")).to_have_value(HOSTILE)
    screenshot(page, "admin-team-edit")
    axe_check(page)

    # -- the cluster's Fair share tab: ann's job runs on vision's share ------------------------
    with srv.client(keys["tm-ann"]) as ann:
        submit(ann, srv, "tm-job", {"command": "sleep 600", "compute": f"azureml:{CLUSTER}"})
    with srv.client() as api:
        wait_job(api, srv, "tm-job", ("Running",), timeout=120)
    page.goto(ws_url(srv, "compute", CLUSTER))
    page.get_by_role("navigation", name="Cluster").get_by_role("link", name="Fair share").click()
    page.wait_for_url("**?tab=fairshare")
    table = page.locator("#fair-share")
    expect(table.locator("tr[data-team='vision']")).to_contain_text("50 %")
    expect(table.locator("tr[data-team='nlp']")).to_contain_text("never borrows")
    expect(table.locator("tr[data-team='vision'] td").nth(3)).not_to_have_text("0")  # cores held
    screenshot(page, "compute-fair-share")
    axe_check(page)

    # -- a user who is not an administrator: the list, no button -------------------------------
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/studio/signin")
    sign_in(page, srv, keys["tm-ben"])
    page.goto(ws_url(srv, "admin", "teams"))
    expect(page.locator("#teams tr[data-team='vision']")).to_be_visible()
    assert page.locator("main form[method='post'] button").count() == 0
    assert page.get_by_role("link", name="New team").count() == 0
    axe_check(page)
    page.get_by_role("button", name="Sign out").click()

    # -- delete asks first -------------------------------------------------------------------------
    sign_in(page, srv)
    page.goto(ws_url(srv, "admin", "teams"))
    page.locator("#teams tr[data-team='nlp']").get_by_role("button", name="Delete nlp").click()
    question = "Delete team nlp? Its members fall to the default team of each pool."
    page.get_by_role("dialog", name=question).wait_for()
    axe_check(page)
    confirm(page, "Delete", question)
    expect(page.locator("#teams tr[data-team='nlp']")).to_have_count(0)

    with srv.client() as api:
        entries = api.get("/api/v1/audit", params={"action": "team"}).json()["value"]
        made = {(e["action"], e["target"]): e["channel"] for e in entries}
        for action, target in (
            ("team.create", "/teams/vision"),
            ("team.create", "/teams/nlp"),
            ("team.delete", "/teams/nlp"),
        ):
            assert made.get((action, target)) == "studio", entries
        api.post(f"{srv.ws_path}/jobs/tm-job/cancel")
