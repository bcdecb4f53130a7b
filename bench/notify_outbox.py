"""What the notifications' outbox adds to a job's end (issue 29 item 4): the transaction that
moves a Running job to Failed (``services.jobs.job_status.update_status``, a run's exit's write)
on a real SQLite store, one committed transaction per job. Three variants, alternated in one run,
each in a fresh interpreter: BASE's code (``--base-src``, e.g. a checkout of the commit before
this work), this code with a job that has no ``notification_setting`` (the setting comes back
with the UPDATE's RETURNING: no read of its own), and one whose setting names an email and a
webhook (two outbox rows written).

    PYTHONPATH=src:. .venv/bin/python -m bench.notify_outbox --base-src BASE/src [--jobs 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SETTING = {
    "emails": ["ops@example.com"],
    "email_on": ["job_failed"],
    "webhooks": {"chat": {"url": "https://hooks.example/chat"}},
}


def _child(jobs: int, with_setting: bool) -> float:
    """Median microseconds of one job's move to Failed, in its own committed transaction (run
    with the cloudlet that PYTHONPATH names)."""
    from cloudlet.domain.jobs.job_status import JobStatus
    from cloudlet.services.core.clock import utcnow
    from cloudlet.services.jobs import job_status
    from cloudlet.store import db
    from cloudlet.store.schema import Job, ResourceGroup, Subscription, Workspace

    with tempfile.TemporaryDirectory() as tmp:
        engine = db.make_engine(db.sqlite_url(Path(tmp)))
        db.migrate(engine)
        sessions = db.session_factory(engine)
        with sessions() as session, session.begin():
            for parent in (
                Subscription(id="s", display_name="s"),
                ResourceGroup(id=1, subscription_id="s", name="rg", location="l"),
                Workspace(id=1, resource_group_id=1, name="ws", location="l", tags={}, created_on=utcnow()),
            ):
                session.add(parent)
                session.flush()
            spec = {"type": "command", "command": "true"}
            if with_setting:
                spec["notification_setting"] = SETTING  # type: ignore[assignment]
            rows = [
                Job(
                    workspace_id=1,
                    name=f"j{i}",
                    spec=spec,
                    status="Running",
                    created_by="a",
                    submitted_at=1.0,
                )
                for i in range(jobs)
            ]
            session.add_all(rows)
            session.flush()
            ids = [row.id for row in rows]
        times = []
        for job_id in ids:
            began = time.perf_counter()
            with sessions() as session, session.begin():
                job_status.update_status(session, job_id, JobStatus.FAILED, 10.0, {"exit_code": 3})
            times.append(time.perf_counter() - began)
        engine.dispose()
    return statistics.median(times) * 1e6


def _run(src: str, jobs: int, with_setting: bool) -> float:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, str(Path(__file__).parents[1])])}
    args = [sys.executable, "-m", "bench.notify_outbox", "--child", "--jobs", str(jobs)]
    done = subprocess.run(
        args + (["--with-setting"] if with_setting else []), env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    return float(json.loads(done.stdout)["median_us"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base-src", help="the src/ of the code to compare with")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--with-setting", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps({"median_us": _child(args.jobs, args.with_setting)}))
        return
    here = str(Path(__file__).parents[1] / "src")
    variants = {"no notification_setting": (here, False), "email + webhook (2 rows)": (here, True)}
    if args.base_src:
        variants = {"base (before the outbox)": (args.base_src, False), **variants}
    results: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):  # alternated, so drift hits each alike
        for name, (src, with_setting) in variants.items():
            results[name].append(_run(src, args.jobs, with_setting))
    base = statistics.median(next(iter(results.values())))
    print(f"job -> Failed, one transaction each, {args.jobs} jobs x {args.rounds} rounds (SQLite):")
    for name, values in results.items():
        median = statistics.median(values)
        rounds = [round(v) for v in values]
        print(f"  {name:28s} median {median:7.1f} us  ({median / base:4.2f}x)  rounds {rounds}")


if __name__ == "__main__":
    main()
