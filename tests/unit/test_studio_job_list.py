"""The job list's URL ↔ query (studio/job_list.py): what a link keeps, what a filter asks of
``job_search``, and bad parameters refused at their name."""

from __future__ import annotations

import urllib.parse

import pytest

from cloudlet.domain.errors import CloudletError
from cloudlet.studio import job_list

DAY = 86_400


def view(query: str) -> job_list.ListView:
    return job_list.view_of(urllib.parse.parse_qsl(query, keep_blank_values=True))


def test_a_view_round_trips_through_its_url() -> None:
    shown = view(
        "q=train&status=Queued&status=Running&type=command&compute=gpu&by=ana&experiment=mnist"
        "&tag=team%3Dvision,prod&since=7d&sort=name&order=asc&size=25"
    )
    again = view(shown.url("/jobs").split("?", 1)[1])
    assert again == shown
    assert shown.filtered


def test_the_default_view_has_a_bare_url_and_sort_links_turn_around() -> None:
    plain = view("")
    assert plain.url("/jobs") == "/jobs" and not plain.filtered
    assert plain.sort_url("/jobs", "submitted") == "/jobs?order=asc"  # already by it: the other way
    assert plain.sort_url("/jobs", "name") == "/jobs?sort=name&order=asc"  # names read A→Z first
    assert plain.aria_sort("submitted") == "descending" and plain.aria_sort("name") == "none"
    paged = view("after=abc&status=Failed")
    assert "after" not in paged.sort_url("/jobs", "name")  # a new sort starts at its first page


def test_the_query_asks_for_what_the_view_shows() -> None:
    query = job_list.query_of(view("q=x&status=Failed&compute=c1&by=u&experiment=e&tag=a=1, b&size=100"))
    assert (query.text, query.statuses, query.computes, query.created_by) == (
        "x",
        ("Failed",),
        ("c1",),
        ("u",),
    )
    assert (query.experiment, query.tags, query.top, query.count) == (
        "e",
        ("a=1", "b"),
        100,
        False,
    )  # a count would scan
    assert job_list.query_of(view("q=x&status=Failed")).count  # counted through an index
    dated = job_list.query_of(view("from=2026-01-02&to=2026-01-02"))
    assert dated.submitted_to is not None and dated.submitted_from is not None
    assert dated.submitted_to - dated.submitted_from == DAY  # "to" is the whole day
    recent = job_list.query_of(view("since=24h&from=1970-01-02"), now=10 * DAY)
    assert recent.submitted_from == 9 * DAY  # the later start wins


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("order=up", "order"),
        ("since=2y", "since"),
        ("size=7", "size"),
        ("from=yesterday", "from"),
        ("q=" + "x" * 300, "q"),
    ],
)
def test_bad_parameters_are_refused_at_their_name(query: str, field: str) -> None:
    with pytest.raises(CloudletError) as refused:
        job_list.query_of(view(query))
    assert refused.value.target == field and refused.value.status == 400
