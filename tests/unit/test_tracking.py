"""Tracking's pure rules (domain/tracking/tracking.py): a job's run status, what may be logged, the latest
of a metric's values, MLflow's search filter and order_by, page tokens."""

from __future__ import annotations

import math

import pytest

from cloudlet.domain.errors import CloudletError
from cloudlet.domain.tracking import tracking as t


@pytest.mark.parametrize(
    ("job", "run"),
    [
        ("Queued", "SCHEDULED"),
        ("Preparing", "SCHEDULED"),
        ("Running", "RUNNING"),
        ("Finalizing", "RUNNING"),
        ("Completed", "FINISHED"),
        ("Failed", "FAILED"),
        ("Canceled", "KILLED"),
    ],
)
def test_a_jobs_run_status_follows_the_job(job: str, run: str) -> None:
    assert t.run_status(job) == run


def test_what_may_be_logged() -> None:
    assert t.check_key("train/loss.v2 x:y", "metric")
    for bad in ("", "a" * 251, "semi;colon", "a/../b"):
        with pytest.raises(CloudletError, match="invalid metric name") as caught:
            t.check_key(bad, "metric")
        assert caught.value.code == "INVALID_PARAMETER_VALUE" and caught.value.status == 400
    with pytest.raises(CloudletError, match="6001 characters"):
        t.check_param("p", "x" * 6001)
    with pytest.raises(CloudletError, match="at most 1000 metrics"):
        t.check_batch(1001, 0, 0)
    with pytest.raises(CloudletError, match="at most 100 params"):
        t.check_batch(0, 101, 0)
    with pytest.raises(CloudletError, match="together"):
        t.check_batch(950, 30, 30)
    with pytest.raises(CloudletError, match="status 'DONE'"):
        t.check_status("DONE")
    with pytest.raises(CloudletError, match="max_results"):
        t.check_max_results(0, 10)


def test_metric_values_and_their_wire_form() -> None:
    assert t.metric_value(3) == 3.0 and t.metric_value("0.5") == 0.5
    assert math.isnan(t.metric_value("NaN")) and t.metric_value("-Infinity") == -math.inf
    with pytest.raises(CloudletError, match="must be a number"):
        t.metric_value("abc")
    with pytest.raises(CloudletError, match="boolean"):
        t.metric_value(True)
    assert [t.wire_value(v) for v in (math.nan, math.inf, -math.inf, 1.5)] == [
        "NaN",
        "Infinity",
        "-Infinity",
        1.5,
    ]


def test_the_latest_value_is_the_highest_step_then_time_then_value() -> None:
    values = [(2, 5, 0.1), (1, 9, 0.9), (2, 5, 0.3), (2, 4, 9.0), (2, 5, math.nan)]
    assert max(values, key=lambda v: t.latest_key(*v)) == (2, 5, 0.3)


def _run(**attributes: object) -> t.Searchable:
    return t.Searchable(
        {"run_id": "r", "status": "FINISHED", "run_name": "Train-Big", "start_time": 10, **attributes},
        metrics={"loss": 0.4, "acc": math.nan},
        params={"lr": "0.1"},
        tags={"my tag": "yes"},
    )


@pytest.mark.parametrize(
    ("text", "hit"),
    [
        ("metrics.loss < 0.5", True),
        ("metrics.loss >= 0.5", False),
        ("metric.loss = 0.4 and params.lr = '0.1'", True),
        ("params.lr != '0.1'", False),
        ("tags.`my tag` = 'yes'", True),
        ('tags."my tag" LIKE "y%"', True),
        ("attributes.status = 'FINISHED' AND attributes.run_name ILIKE 'train-%'", True),
        ("attributes.run_name LIKE 'train-%'", False),
        ("status IN ('FAILED', 'KILLED')", False),
        ("attributes.status NOT IN ('FAILED', 'KILLED')", True),
        ("metrics.acc > 0", False),  # NaN compares false
        ("metrics.missing < 1", False),
        ("attributes.start_time > 5", True),
        ("", True),
    ],
)
def test_search_filters(text: str, hit: bool) -> None:
    assert t.matches(_run(), t.parse_filter(text)) is hit


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("metrics.loss < 'a'", "compares with a number"),
        ("params.lr < '1'", "is a string"),
        ("foo.bar = 'x'", "start with metrics."),
        ("attributes.color = 'x'", "invalid attribute 'color'"),
        ("metrics.loss < 1 or metrics.loss > 2", "join clauses with AND"),
        ("metrics.loss < 1 and", "ends with AND"),
        ("metrics.loss ~ 1", "invalid"),
        ("status IN ('a'", "not closed"),
    ],
)
def test_bad_search_filters_say_why(text: str, says: str) -> None:
    with pytest.raises(CloudletError, match=says) as caught:
        t.parse_filter(text)
    assert caught.value.code == "INVALID_PARAMETER_VALUE"


def test_order_by_with_missing_values_last() -> None:
    runs = [
        t.Searchable({"run_id": "a", "start_time": 1}, metrics={"loss": 0.3}),
        t.Searchable({"run_id": "b", "start_time": 2}, metrics={}),
        t.Searchable({"run_id": "c", "start_time": 3}, metrics={"loss": 0.1}),
    ]
    default = [t.Order("attribute", "start_time", False)]
    ids = lambda rs: [r.attributes["run_id"] for r in rs]  # noqa: E731
    assert ids(t.sort(runs, t.parse_order_by(["metrics.loss ASC"]), default)) == ["c", "a", "b"]
    assert ids(t.sort(runs, t.parse_order_by(["metrics.loss DESC"]), default)) == ["a", "c", "b"]
    assert ids(t.sort(runs, [], default)) == ["c", "b", "a"]
    with pytest.raises(CloudletError, match="order_by"):
        t.parse_order_by(["metrics.loss sideways"])


def test_page_tokens_round_trip() -> None:
    assert t.page_offset(t.page_token(40)) == 40 and t.page_offset(None) == 0
    with pytest.raises(CloudletError, match="page_token"):
        t.page_offset("not-a-token")
