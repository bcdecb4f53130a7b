"""The policy comparison on a small synthetic trace: two teams with equal shares of a 4-GPU pool;
team a fills it with long jobs, team b arrives an hour later."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cloudlet.cli.main import app
from cloudlet.domain.jobs.fair_share import TeamShare
from cloudlet.sim.policies import POLICIES, PoolJob, PoolSettings, simulate
from cloudlet.sim.policy_compare import WorkloadShape, compare, pool_jobs, team_names
from cloudlet.sim.policy_outcome import jain
from cloudlet.sim.trace import load_trace

ROWS = ["submit_time,duration,num_gpus,team"]
ROWS += [f"0,{4 * 3600},1,a" for _ in range(8)]  # a: 8 jobs of 4 h on a 4-GPU pool
ROWS += ["3700,3600,1,b", "3700,3600,1,b"]  # b: 2 jobs of 1 h, 1 h 1 min 40 s later


@pytest.fixture
def trace_path(tmp_path: Path) -> Path:
    path = tmp_path / "teams.csv"
    path.write_text("\n".join(ROWS) + "\n")
    return path


def outcomes(trace_path: Path, policies: list[str]) -> dict[str, object]:
    trace = load_trace(trace_path)
    jobs, teams = pool_jobs(trace, WorkloadShape(teams=2, high_share=0, low_share=0))
    settings = PoolSettings(4, teams, checkpoint_s=900.0, pass_s=10.0)
    return {o.policy: o for o in compare(jobs, settings, policies)}


def test_trace_groups_become_teams(trace_path: Path) -> None:
    trace = load_trace(trace_path)
    assert trace.group_column == "team" and trace.columns == {
        "submit": "submit_time",
        "duration": "duration",
        "gpus": "num_gpus",
    }
    assert team_names(trace.jobs, 2) == ["a", "b"]
    assert team_names(trace.jobs, 1) == ["other"]
    jobs, teams = pool_jobs(trace, WorkloadShape(teams=2), 3000.0, 1.0)
    assert [t.name for t in teams] == ["b"] and [j.submit_at for j in jobs] == [700.0, 700.0]


def test_fifo_makes_b_wait_fair_share_does_not(trace_path: Path) -> None:
    got = outcomes(trace_path, list(POLICIES))
    fifo, fair, borrow, kueue = got["fifo"], got["fair"], got["fair-borrow"], got["kueue"]
    # FIFO: b waits behind a's second round of four, which starts at 4 h and ends at 8 h
    assert fifo.team("b").wait_p95_s == pytest.approx(8 * 3600 - 3700, abs=11)  # type: ignore[attr-defined]
    # without borrowing a never held b's half: b starts at once; a runs two at a time (the last
    # two start at 12 h) while b's half idles
    assert fair.team("b").wait_p95_s <= 10  # type: ignore[attr-defined]
    assert fair.team("a").wait_p95_s == pytest.approx(12 * 3600, abs=11)  # type: ignore[attr-defined]
    # with borrowing a ran on all 4 GPUs; b reclaims 2 at once (a's jobs ran past the min run time)
    assert borrow.team("b").wait_p95_s <= 10 and borrow.preemptions == 2  # type: ignore[attr-defined]
    assert borrow.max_preemptions == 1  # type: ignore[attr-defined]
    # two preempted runs lose the 100-110 s since their last checkpoint (at 1 h)
    assert 2 * 100 / 3600 <= borrow.lost_core_hours <= 2 * 111 / 3600  # type: ignore[attr-defined]
    assert borrow.utilisation > fair.utilisation  # type: ignore[attr-defined]
    assert kueue.preemptions == 2  # type: ignore[attr-defined]
    for outcome in got.values():
        assert outcome.jobs == 10  # type: ignore[attr-defined]


def test_kueue_like_has_no_guard_and_fair_borrow_waits_for_the_min_run() -> None:
    shares = (TeamShare("a", 1.0), TeamShare("b", 1.0))
    jobs = [PoolJob(f"a{i}", "a", "a", 0.0, 7200.0, 1) for i in range(4)] + [
        PoolJob("b0", "b", "b", 60.0, 600.0, 1)
    ]
    settings = PoolSettings(4, shares, pass_s=10.0)
    borrow = simulate(jobs, settings, POLICIES["fair-borrow"])
    kueue = simulate(jobs, settings, POLICIES["kueue"])
    assert kueue.team("b").wait_p95_s <= 10  # reclaims at once
    assert borrow.team("b").wait_p95_s == pytest.approx(540, abs=11)  # a's jobs run 10 min first


def test_eta_at_submission_is_measured(trace_path: Path) -> None:
    fifo = outcomes(trace_path, ["fifo"])["fifo"]
    # a's second four and b's two waited. With no history a job is expected to run an hour: a's
    # second four were told 1 h (waited 4 h: 75 % off), b's 2 h 1 min 40 s (waited 6 h 58 min 20 s)
    assert fifo.eta_jobs == 6  # type: ignore[attr-defined]
    assert fifo.eta_median_error == pytest.approx(0.75)  # type: ignore[attr-defined]


def test_due_jain_counts_each_teams_part_of_its_due() -> None:
    from cloudlet.sim.policy_outcome import _due_jain

    shares = {"a": 2.0, "b": 2.0}
    assert _due_jain({"a": 4, "b": 0}, {"a": 4, "b": 0}, shares) == 1.0  # b wants nothing: a borrows
    assert _due_jain({"a": 2, "b": 2}, {"a": 4, "b": 3}, shares) == 1.0
    assert _due_jain({"a": 4, "b": 0}, {"a": 4, "b": 2}, shares) == 0.5  # b got none of its due


def test_jain() -> None:
    assert jain([1, 1, 1]) == 1.0
    assert jain([1, 0, 0, 0]) == 0.25


def test_whatif_cli_compares_policies(trace_path: Path) -> None:
    args = [
        "-o",
        "json",
        "compute",
        "what-if",
        "--trace",
        str(trace_path),
        "--policy",
        "fifo,fair-borrow",
        "--capacity",
        "4",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [p["policy"] for p in doc["policies"]] == ["fifo", "fair-borrow"]
    assert doc["policies"][1]["preemptions"] == 2 and doc["group_column"] == "team"
    assert doc["policies"][0]["preemptions"] == 0
    # with priorities drawn, a's high-priority jobs also preempt its own low-priority ones
    mixed = CliRunner().invoke(app, [*args, "--priority-mix", "0.4,0.4"])
    assert mixed.exit_code == 0, mixed.output
    assert json.loads(mixed.stdout)["policies"][1]["preemptions"] > 2
    table = CliRunner().invoke(app, args[2:])
    assert table.exit_code == 0 and "team b: wait p95" in table.stdout and "fair-borrow" in table.stdout


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--policy", "fifo,lottery", "--capacity", "4"], "unknown policy 'lottery'"),
        (["--policy", "fifo"], "--policy needs --capacity"),
        (["--policy", "fifo", "--capacity", "4", "--days", "0"], "--days 0"),
        (["--policy", "fifo", "--capacity", "4", "--priority-mix", "0.8,0.8"], "--priority-mix"),
    ],
)
def test_whatif_policy_errors(trace_path: Path, extra: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["compute", "what-if", "--trace", str(trace_path), *extra])
    assert result.exit_code == 2 and message in result.output


def test_jain_counts_the_hours_every_team_wanted_its_share() -> None:
    from cloudlet.sim.policy_outcome import Tally

    tally = Tally(["a", "b"], {"a": 2.0, "b": 2.0}, 4)
    # hour 0: both want their share, a holds 3 (borrowed from b): x = 1.5, 0.5 -> Jain 0.8
    tally.add_interval(0.0, 3600.0, {"a": 3, "b": 1}, {"a": 5, "b": 2})
    # hour 1: b wants 1 < its share: not an all-busy hour, however uneven
    tally.add_interval(3600.0, 7200.0, {"a": 3, "b": 1}, {"a": 5, "b": 1})
    # hour 2: both busy, each holds its share: Jain 1; summed with hour 0: x = 1.25, 0.75
    tally.add_interval(7200.0, 10800.0, {"a": 2, "b": 2}, {"a": 2, "b": 4})
    tally.finished(PoolJob("b1", "b", "b", 0.0, 60.0, 1), 100.0, 0, None, under_share=True)
    tally.finished(PoolJob("a1", "a", "a", 0.0, 60.0, 1), 900.0, 0, None, under_share=False)
    got = tally.outcome("x", 86400.0)
    assert got.busy_hours == 2 and got.jain_days == 1
    assert got.jain_by_day == ((0, 2, pytest.approx(jain([1.25, 0.75]))),)
    assert got.under_share_jobs == 1 and got.under_share_wait_p95_s == 100.0
    assert got.team("b").under_share_jobs == 1 and got.team("a").under_share_jobs == 0
