"""Fair share: entitlements, caps, decayed usage, Slurm's factor, the queue order and admission."""

from __future__ import annotations

import math
import random

import pytest

from cloudlet.domain.jobs import fair_share as fs

TEAMS = (fs.TeamShare("a", 1.0), fs.TeamShare("b", 1.0, borrow_limit=2), fs.TeamShare("c", 2.0))
CONFIG = fs.FairShareConfig(TEAMS, {"ann": "a", "bob": "b", "cy": "c"}, half_life_s=3600.0)


def job(
    name: str, team: str, t: float, *, cores: int = 1, priority: int = 2, spot: bool = False, user: str = ""
) -> fs.FairJob:
    return fs.FairJob(name, team, user or team, cores, priority, t, spot)


def test_config_checks_and_team_of() -> None:
    assert CONFIG.team_of("bob") == "b" and CONFIG.team_of("zed") == fs.DEFAULT_TEAM
    with pytest.raises(ValueError, match="listed twice"):
        fs.FairShareConfig((fs.TeamShare("a", 1), fs.TeamShare("a", 2)))
    with pytest.raises(ValueError, match="unknown team 'x'"):
        fs.FairShareConfig(TEAMS, {"ann": "x"})
    with pytest.raises(ValueError, match="share must be"):
        fs.TeamShare("a", 0)
    with pytest.raises(ValueError, match="borrow_limit"):
        fs.TeamShare("a", 1, borrow_limit=-1)


def test_entitlements_and_caps() -> None:
    assert fs.entitlements(CONFIG, 8) == {"a": 2.0, "b": 2.0, "c": 4.0}
    held = {"a": 2, "b": 3, "c": 0}
    assert fs.caps(CONFIG, 8, held, borrow=False) == {"a": 0.0, "b": -1.0, "c": 4.0}
    # borrowing: b may go 2 past its share; a and c may take any idle capacity (8 more)
    assert fs.caps(CONFIG, 8, held, borrow=True) == {"a": 8.0, "b": 1.0, "c": 12.0}


def test_usage_integrates_and_decays_by_half_life() -> None:
    u = fs.decay_usage(fs.Usage(0.0), 3600.0, {("a", "ann"): 2}, 3600.0)
    # ∫0^h 2·2^(-s/h) ds = 2·h/(2 ln 2) = h/ln 2
    assert u.users[("a", "ann")] == pytest.approx(3600.0 / math.log(2))
    later = fs.decay_usage(u, 7200.0, {}, 3600.0)
    assert later.users[("a", "ann")] == pytest.approx(u.users[("a", "ann")] / 2)
    assert later.teams() == {"a": pytest.approx(u.users[("a", "ann")] / 2)}
    # no history (Kueue-like): usage is what is held now
    assert fs.decay_usage(u, 9000.0, {("b", "bob"): 3}, 0.0).users == {("b", "bob"): 3.0}


def test_factor_is_slurms_two_to_minus_usage_over_share() -> None:
    usage = fs.Usage(0.0, {("a", "ann"): 50.0, ("c", "cy"): 50.0})
    f = fs.factors(CONFIG, usage)
    assert f.team["b"] == 1.0  # no usage
    assert f.team["a"] == pytest.approx(2 ** (-0.5 / 0.25))  # half the usage on a quarter share
    assert f.team["c"] == pytest.approx(0.5)  # exactly its share
    assert fs.factors(CONFIG, fs.Usage(0.0)).team == {"a": 1.0, "b": 1.0, "c": 1.0}


def test_user_factor_within_team() -> None:
    usage = fs.Usage(0.0, {("a", "ann"): 30.0, ("a", "al"): 10.0})
    f = fs.factors(CONFIG, usage, [("a", "new")])
    assert f.user[("a", "new")] == 1.0
    assert f.user[("a", "al")] > f.user[("a", "ann")]
    assert f.user[("a", "ann")] == pytest.approx(2 ** (-(30 / 40) * 3))


def test_order_priority_then_team_factor_then_user_then_fifo_spot_last() -> None:
    usage = fs.Usage(0.0, {("a", "ann"): 100.0, ("b", "bob"): 1.0})
    f = fs.factors(CONFIG, usage)
    jobs = [
        job("a-old", "a", 1.0),
        job("b-new", "b", 5.0),
        job("c-newest", "c", 9.0),
        job("a-high", "a", 8.0, priority=3),
        job("c-spot-high", "c", 0.0, priority=3, spot=True),
        job("b-old", "b", 2.0),
    ]
    assert [j.name for j in fs.fair_order(jobs, f)] == [
        "a-high",
        "c-newest",
        "b-old",
        "b-new",
        "a-old",
        "c-spot-high",
    ]
    # a team with no share waits behind those with one, whatever its usage
    stray = job("stray", "nobody", -1.0)
    assert [j.name for j in fs.fair_order([stray, job("a-old", "a", 1.0)], f)] == ["a-old", "stray"]
    # without fair share: spot last, priority, then FIFO across teams
    assert [j.name for j in fs.fair_order(jobs, None)] == [
        "a-high",
        "a-old",
        "b-old",
        "b-new",
        "c-newest",
        "c-spot-high",
    ]


def test_admit_backfills_and_respects_caps() -> None:
    ordered = [
        job("big", "a", 0, cores=4),
        job("a1", "a", 1, cores=2),
        job("b1", "b", 2, cores=2),
        job("a2", "a", 3),
    ]
    # 3 free: the 4-core head waits, smaller ones backfill
    assert [j.name for j in fs.admit(ordered, 3)] == ["a1", "a2"]
    # a may take 1 more core: a1 (2) does not fit its room, a2 does; b has no cap
    assert [j.name for j in fs.admit(ordered, 8, {"a": 1})] == ["b1", "a2"]
    # a job bigger than its team's whole room starts while its team holds nothing
    assert [j.name for j in fs.admit(ordered[:1], 8, {"a": 2}, {"a": 0})] == ["big"]
    assert fs.admit(ordered[:1], 8, {"a": 2}, {"a": 1}) == []
    # spot ignores the cap
    assert fs.admit([job("s", "a", 0, spot=True)], 1, {"a": 0}) == [job("s", "a", 0, spot=True)]


def test_borrowed_are_the_newest_beyond_the_entitlement() -> None:
    running = [
        fs.Holding("a1", "a", 2, 0.0),
        fs.Holding("a2", "a", 2, 5.0),
        fs.Holding("a3", "a", 1, 9.0),
        fs.Holding("b1", "b", 1, 1.0),
        fs.Holding("s", "b", 1, 0.0, spot=True),
    ]
    assert fs.borrowed(running, {"a": 2.0, "b": 2.0}) == {"a2", "a3", "s"}


def test_the_decision_pass_orders_and_admits_a_large_queue() -> None:
    """100,000 queued jobs over 20 teams: every job ordered, the highest priority first."""
    import random

    rng = random.Random(1)
    teams = tuple(fs.TeamShare(f"t{i}", 1.0 + i % 3) for i in range(20))
    config = fs.FairShareConfig(teams)
    jobs = [
        fs.FairJob(
            f"j{i}", f"t{rng.randrange(20)}", f"u{rng.randrange(200)}", 1, rng.choice((1, 2, 3)), rng.random()
        )
        for i in range(100_000)
    ]
    usage = fs.Usage(0.0, {(f"t{i}", f"u{i}"): float(i) for i in range(20)})
    # How long it takes is bench/fair_share_pass.py's to measure, not a test's.
    f = fs.factors(config, usage)
    ordered = fs.fair_order(jobs, f)
    fs.admit(ordered, 10_000, fs.caps(config, 10_000, {}, borrow=True))
    assert len(ordered) == 100_000 and ordered[0].priority == 3


def test_order_is_one_sort_on_the_full_key_for_any_queue() -> None:
    """The bucketed order equals the plain definition: a sort on (spot, −priority, −team factor,
    −user factor, team, user, submitted_at, name), ties in submission time included."""
    rng = random.Random(3)
    teams = ("a", "b", "c", "nobody")  # "nobody" has no share: after the teams that have one
    config = fs.FairShareConfig(tuple(fs.TeamShare(t, 1.0 + i) for i, t in enumerate(teams[:3])))
    users = [(t, f"{t}{i}") for t in teams for i in range(3)]
    usage = fs.Usage(0.0, {key: rng.uniform(0, 100) for key in users[:7]})
    jobs = [
        fs.FairJob(
            f"j{i:04d}",
            *rng.choice(users),
            1,
            rng.choice((1, 2, 3)),
            float(rng.randrange(50)),
            rng.random() < 0.2,
        )
        for i in range(600)
    ]
    rng.shuffle(jobs)
    fair = fs.factors(config, usage, [(j.team, j.user) for j in jobs])
    want = sorted(
        jobs,
        key=lambda j: (
            j.spot,
            -j.priority,
            -fair.team.get(j.team, 0.0),
            -fair.user.get((j.team, j.user), 1.0),
            j.team,
            j.user,
            j.submitted_at,
            j.name,
        ),
    )
    assert fs.fair_order(jobs, fair) == want
    assert fs.fair_order(jobs, None) == sorted(
        jobs, key=lambda j: (j.spot, -j.priority, j.submitted_at, j.name)
    )


def test_borrowed_reads_any_running_job_shape() -> None:
    from cloudlet.domain.jobs.fair_pass import RunningJob

    running = [RunningJob(f"r{i}", "a", 1, 2, i == 0, float(i)) for i in range(4)]
    assert fs.borrowed(running, {"a": 2.0}) == {"r0", "r3"}  # spot always; r1, r2 fill the share


def test_held_usage_is_decay_usage_integrated_pass_by_pass() -> None:
    """The closed form a run's usage is computed with (fair_usage) equals decaying minute by minute."""
    half = 3600.0
    got = {
        "u": fs.held_usage(4, 0.0, 1800.0, 3600.0, half),
        "v": fs.held_usage(2, 600.0, 3600.0, 3600.0, half),  # still running at 3600
    }
    usage = fs.Usage(0.0)
    for t in range(60, 3601, 60):  # cores held over each minute, decayed exactly
        held = {("a", "u"): 4.0 if t <= 1800 else 0.0, ("b", "v"): 2.0 if t > 600 else 0.0}
        usage = fs.decay_usage(usage, float(t), held, half)
    assert got["u"] == pytest.approx(usage.users[("a", "u")], rel=1e-9)
    assert got["v"] == pytest.approx(usage.users[("b", "v")], rel=1e-9)
