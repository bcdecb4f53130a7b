"""The forward replay: queued jobs' starts under the pool's own policy, with the arrivals to come."""

from __future__ import annotations

import pytest

from cloudlet.domain.jobs import fair_share as fs
from cloudlet.domain.jobs.fair_pass import PassPolicy
from cloudlet.domain.jobs.forward_replay import Holding, Work, forward_starts
from cloudlet.domain.jobs.wait_estimate import Ahead, RunningEnd, estimate_start

NOW = 1_000_000.0
HOUR = 3600.0
TEAMS = fs.FairShareConfig((fs.TeamShare("a", 1.0), fs.TeamShare("b", 1.0)), half_life_s=24 * HOUR)


def _job(name: str, team: str, submitted: float, cores: int = 1, priority: int = 2) -> fs.FairJob:
    return fs.FairJob(name, team, team, cores, priority, submitted)


def test_usage_accrued_in_the_replay_reorders_the_teams() -> None:
    # One core, both teams with no usage: a's jobs rank first now (the tie falls to the name). Once
    # a1 has run, b has used less: b1 goes next, then a2 (a's usage has decayed a little more).
    queue = [
        Work(_job("a1", "a", NOW - 40), 100.0),
        Work(_job("a2", "a", NOW - 30), 100.0),
        Work(_job("b1", "b", NOW - 20), 100.0),
        Work(_job("b2", "b", NOW - 10), 100.0),
    ]
    starts = forward_starts(TEAMS, 1, 1, [], queue, fs.Usage(NOW), NOW, step_s=1.0)
    assert starts == {"a1": 0.0, "b1": 100.0, "a2": 200.0, "b2": 300.0}
    # Today's static replay keeps the order of now: b1 third.
    ahead = [Ahead(1, 100.0), Ahead(1, 100.0)]
    assert estimate_start(1, 1, 1, [], ahead) == 200.0


def test_recent_submissions_come_again_and_pass_a_team_that_used_more() -> None:
    # a has used far more than b. b submitted a job 150 s ago; with a 200 s window it comes again
    # 50 s from now, waits for the running job's end (100 s) and goes ahead of a1 (fair share):
    # a1 starts when it ends, at 200 s, not at 100 s as the queue of now says.
    usage = fs.Usage(NOW, {("a", "a"): 50_000.0, ("b", "b"): 10.0})
    queue = [Work(_job("a1", "a", NOW - 10), 100.0)]
    running = [Holding(_job("b9", "b", NOW - 500), 100.0)]
    recent = [Work(_job("b0", "b", NOW - 150), 100.0)]
    starts = forward_starts(TEAMS, 1, 0, running, queue, usage, NOW, recent, window_s=200.0, step_s=1.0)
    assert starts == {"a1": 200.0}
    assert estimate_start(1, 1, 0, [RunningEnd(1, 100.0)], []) == 100.0
    # Without the forecast, the forward replay is the queue of now.
    assert forward_starts(TEAMS, 1, 0, running, queue, usage, NOW, (), window_s=200.0, step_s=1.0) == {
        "a1": 100.0
    }


def test_passes_wait_for_the_step_and_caps_hold_without_borrowing() -> None:
    # Two cores, one each by share; b holds nothing and a may not borrow: a2 waits for a1's end,
    # though a core is idle. Ends are seen at the next pass (every 60 s), as in the scheduler.
    queue = [Work(_job("a1", "a", NOW - 20), 30.0), Work(_job("a2", "a", NOW - 10), 30.0)]
    starts = forward_starts(
        TEAMS, 2, 2, [], queue, fs.Usage(NOW), NOW, policy=PassPolicy(borrow=False, preempt=False)
    )
    assert starts == {"a1": 0.0, "a2": 60.0}
    assert forward_starts(TEAMS, 2, 2, [], queue, fs.Usage(NOW), NOW) == {"a1": 0.0, "a2": 0.0}


def test_without_fair_share_priority_then_fifo_and_targets() -> None:
    queue = [
        Work(_job("low", "a", NOW - 20, priority=1), 50.0),
        Work(_job("high", "b", NOW - 10, priority=3), 50.0),
    ]
    running = [Holding(_job("a9", "a", NOW - 500), 30.0)]
    starts = forward_starts(None, 1, 0, running, queue, fs.Usage(NOW), NOW, step_s=1.0)
    assert starts == {"high": 30.0, "low": 80.0}
    assert forward_starts(None, 1, 0, running, queue, fs.Usage(NOW), NOW, targets={"high"}, step_s=1.0) == {
        "high": 30.0
    }


@pytest.mark.parametrize("horizon", [10.0, 1000.0])
def test_a_job_that_never_fits_or_starts_past_the_horizon_is_left_out(horizon: float) -> None:
    queue = [Work(_job("big", "a", NOW - 10, cores=4), 50.0), Work(_job("late", "a", NOW - 5), 50.0)]
    running = [Holding(_job("b9", "b", NOW - 500, cores=2), 100.0)]
    starts = forward_starts(TEAMS, 2, 0, running, queue, fs.Usage(NOW), NOW, step_s=1.0, horizon_s=horizon)
    assert starts == ({} if horizon < 100 else {"late": 100.0})
