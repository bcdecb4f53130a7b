"""Preemption: who is entitled, the cheapest victims first, and the anti-thrash guards."""

from __future__ import annotations

from cloudlet.domain.jobs.preemption import Claim, Guard, PreemptReason, Running, choose_victims

NOW = 10_000.0
GUARD = Guard(min_run_s=600.0, max_per_hour=10, max_per_job=3)


def run(
    name: str,
    team: str,
    *,
    priority: int = 2,
    spot: bool = False,
    started: float = 0.0,
    ckpt: float | None = None,
    borrowed: bool = False,
    cores: int = 1,
    preemptions: int = 0,
) -> Running:
    return Running(name, team, priority, spot, started, ckpt, borrowed, cores, preemptions)


def claim(
    name: str,
    team: str,
    *,
    priority: int = 2,
    cores: int = 1,
    held: float = 0.0,
    entitled: float = 4.0,
    spot: bool = False,
) -> Claim:
    return Claim(name, team, priority, spot, cores, held, entitled)


def victims(
    claims: list[Claim], running: list[Running], free: float = 0.0, **kw: object
) -> list[tuple[str, str, PreemptReason]]:
    out = choose_victims(claims, running, free, NOW, kw.pop("guard", GUARD), **kw)  # type: ignore[arg-type]
    return [(p.victim, p.for_job, p.reason) for p in out]


def test_team_below_share_reclaims_borrowed_capacity_only() -> None:
    running = [run("a-own", "a"), run("a-lent", "a", borrowed=True), run("c-own", "c")]
    assert victims([claim("b1", "b")], running) == [("a-lent", "b1", PreemptReason.RECLAIM)]
    # b at its share already: no reclaim
    assert victims([claim("b1", "b", held=4.0)], running) == []
    # nothing borrowed: nothing to take
    assert victims([claim("b1", "b")], [run("a-own", "a")]) == []


def test_cheapest_first_spot_borrowed_priority_then_least_work_lost() -> None:
    running = [
        run("lent-old-ckpt", "a", borrowed=True, started=0.0, ckpt=1000.0),
        run("lent-fresh-ckpt", "a", borrowed=True, started=0.0, ckpt=9900.0),
        run("spot", "a", spot=True, started=5000.0),
        run("lent-low", "a", borrowed=True, priority=1, started=0.0),
    ]
    order = [v for v, _, _ in victims([claim("b1", "b", cores=4)], running)]
    assert order == ["spot", "lent-low", "lent-fresh-ckpt", "lent-old-ckpt"]
    decisions = choose_victims([claim("b1", "b")], running, 0.0, NOW, GUARD)
    assert decisions[0].victim == "spot" and "spot tier" in decisions[0].message


def test_higher_priority_preempts_within_its_team_or_borrowed_not_another_teams_share() -> None:
    running = [run("b-low-own", "b", priority=1), run("a-low", "a", priority=1)]
    assert victims([claim("a-high", "a", priority=3, held=8.0)], running) == [
        ("a-low", "a-high", PreemptReason.PRIORITY)
    ]
    assert victims([claim("c-high", "c", priority=3, held=8.0)], [run("b-low-own", "b", priority=1)]) == []
    lent = [run("b-low-lent", "b", priority=1, borrowed=True)]
    assert victims([claim("c-high", "c", priority=3, held=8.0)], lent) == [
        ("b-low-lent", "c-high", PreemptReason.PRIORITY)
    ]


def test_a_spot_claim_never_preempts() -> None:
    running = [run("lent-low", "a", priority=1, borrowed=True), run("spot-low", "b", spot=True, priority=1)]
    assert victims([claim("s", "b", priority=3, spot=True)], running) == []


def test_no_preemption_that_does_not_start_the_job() -> None:
    running = [run("lent", "a", borrowed=True, cores=1)]
    assert victims([claim("b-big", "b", cores=3)], running) == []
    assert victims([claim("b-big", "b", cores=3)], running, free=2.0) == [
        ("lent", "b-big", PreemptReason.RECLAIM)
    ]


def test_claims_that_fit_take_free_cores_first() -> None:
    running = [run("lent", "a", borrowed=True)]
    assert victims([claim("b1", "b"), claim("b2", "b")], running, free=1.0) == [
        ("lent", "b2", PreemptReason.RECLAIM)
    ]


def test_guards_min_run_time_per_job_limit_and_hourly_budget() -> None:
    young = run("young", "a", borrowed=True, started=NOW - 60)
    tired = run("tired", "a", borrowed=True, preemptions=3)
    assert victims([claim("b1", "b")], [young, tired]) == []
    many = [run(f"lent{i}", "a", borrowed=True, started=float(i)) for i in range(5)]
    claims = [claim(f"b{i}", "b") for i in range(5)]
    recent = [NOW - 100.0] * 8 + [NOW - 4000.0]  # 8 in the last hour: 2 left of 10
    assert len(victims(claims, many, recent=recent)) == 2
    assert len(victims(claims, many, guard=Guard(0.0, None, None))) == 5


def test_lender_stops_once_back_at_its_share() -> None:
    running = [run(f"lent{i}", "a", borrowed=True) for i in range(3)]
    # a is 1 core over its share: only one of its jobs may go
    got = victims([claim("b1", "b"), claim("b2", "b")], running, team_over={"a": 1.0})
    assert got == [("lent0", "b1", PreemptReason.RECLAIM)]
