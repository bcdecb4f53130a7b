"""The lines ``job stream`` prints for a sweep's trials (client/sweep_stream.trial_events)."""

from __future__ import annotations

from cloudlet.client.sweep_stream import trial_events


def trial(status: str, metric: float | None = None, message: str | None = None) -> dict[str, object]:
    return {
        "key": "3",
        "name": "s-3",
        "status": status,
        "params": {"lr": 0.1},
        "metric": metric,
        "status_message": message,
    }


def test_a_trial_is_announced_once_when_it_starts_and_once_when_it_ends() -> None:
    seen: dict[str, str] = {}
    assert trial_events([trial("Queued")], seen, "loss") == []
    assert trial_events([trial("Running")], seen, "loss") == ["trial 3 (job s-3) started: lr=0.1"]
    assert trial_events([trial("Running", 0.5)], seen, "loss") == []
    assert trial_events([trial("Completed", 0.25)], seen, "loss") == [
        "trial 3 (job s-3) Completed: loss=0.25"
    ]
    assert trial_events([trial("Completed", 0.25)], seen, "loss") == []


def test_a_trial_seen_only_once_it_ended_gets_both_lines() -> None:
    assert trial_events([trial("Completed", 1.0)], {}, "loss") == [
        "trial 3 (job s-3) started: lr=0.1",
        "trial 3 (job s-3) Completed: loss=1.0",
    ]


def test_a_trial_canceled_before_it_started_says_only_why_it_ended() -> None:
    seen = {"s-3": "Queued"}
    assert trial_events([trial("Canceled", message="the sweep was canceled")], seen, "loss") == [
        "trial 3 (job s-3) Canceled (the sweep was canceled)"
    ]
