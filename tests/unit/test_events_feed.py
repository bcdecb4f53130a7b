"""The events feed's pure rules: the retention window's first kept seq, when a reader missed
pruned events, and the server-sent form of an event."""

from __future__ import annotations

import json

from cloudlet.domain.events import Event, Retention, missed, sse_message


def test_the_window_keeps_the_stricter_of_age_and_count() -> None:
    retention = Retention(max_age_s=100.0, max_events=10)
    assert retention.first_kept(now=1000.0, newest_seq=50, first_seq_at_cutoff=45) == 45  # age
    assert retention.first_kept(now=1000.0, newest_seq=50, first_seq_at_cutoff=20) == 41  # count
    assert retention.first_kept(now=1000.0, newest_seq=50, first_seq_at_cutoff=None) == 51  # all old
    assert retention.first_kept(now=1000.0, newest_seq=3, first_seq_at_cutoff=1) == 1


def test_a_reader_missed_events_only_below_the_pruning_mark() -> None:
    assert not missed(since=9, pruned_below=10)  # it saw 9; 10 on is kept
    assert missed(since=8, pruned_below=10)  # 9 is gone
    assert not missed(since=0, pruned_below=0)  # nothing was ever pruned


def test_retention_from_the_environment() -> None:
    env = {
        "CLOUDLET_EVENTS_MAX_AGE_S": "60",
        "CLOUDLET_EVENTS_MAX_COUNT": "5",
        "CLOUDLET_EVENTS_PRUNE_EVERY_S": "2",
    }
    assert Retention.from_env(env) == Retention(60.0, 5, 2.0)
    assert Retention.from_env({}) == Retention()


def test_the_server_sent_form_carries_the_seq_as_its_id() -> None:
    event = Event(7, 1.5, 3, "job", "j<1>", "cpu", "Queued", "Preparing", {"message": "a\nb"})
    text = sse_message(event)
    lines = text.split("\n")
    assert lines[:2] == ["id: 7", "event: job"] and text.endswith("\n\n")
    assert len(lines) == 5  # id, event, one data line (a newline in the data is escaped), blank, end
    data = json.loads(lines[2].removeprefix("data: "))
    assert data == {
        "seq": 7,
        "at": 1.5,
        "type": "job",
        "name": "j<1>",
        "compute": "cpu",
        "from_state": "Queued",
        "to_state": "Preparing",
        "detail": {"message": "a\nb"},
    }
