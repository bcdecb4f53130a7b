"""``python -m bench [--quick] [--only NAME]``: run benchmarks, write ``bench/results/``.

Benchmarks report numbers and ratios to a peer; they never fail on absolute times. The exit status
is non-zero only when a benchmark could not run at all (a server did not start, a request failed).
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench import (
    _results,
    agent_sampling,
    api_latency,
    arm_facade,
    arm_jobs,
    blob_listener,
    dispatch,
    fair_share,
    fair_share_pass,
    instances,
    job_wait,
    metrics_scrape,
    mixed_load,
    online_gateway,
    pipeline_handoff,
    reconcile_store,
    sandbox_start,
    simulator,
    slurm_node,
    ssh_join,
    studio_jobs,
    sweep_trials,
    trace_validation,
    tracking,
)


@dataclass(frozen=True)
class Benchmark:
    name: str
    run: Callable[[bool], dict[str, Any]]
    markdown: Callable[[dict[str, Any]], str]
    report: Callable[[dict[str, Any]], str]


BENCHMARKS: dict[str, Benchmark] = {
    api_latency.NAME: Benchmark(api_latency.NAME, api_latency.run, api_latency.markdown, api_latency.report),
    dispatch.NAME: Benchmark(dispatch.NAME, dispatch.run, dispatch.markdown, dispatch.report),
    simulator.NAME: Benchmark(simulator.NAME, simulator.run, simulator.markdown, simulator.report),
    reconcile_store.NAME: Benchmark(
        reconcile_store.NAME, reconcile_store.run, reconcile_store.markdown, reconcile_store.report
    ),
    trace_validation.NAME: Benchmark(
        trace_validation.NAME, trace_validation.run, trace_validation.markdown, trace_validation.report
    ),
    instances.NAME: Benchmark(instances.NAME, instances.run, instances.markdown, instances.report),
    mixed_load.NAME: Benchmark(mixed_load.NAME, mixed_load.run, mixed_load.markdown, mixed_load.report),
    blob_listener.NAME: Benchmark(
        blob_listener.NAME, blob_listener.run, blob_listener.markdown, blob_listener.report
    ),
    arm_facade.NAME: Benchmark(arm_facade.NAME, arm_facade.run, arm_facade.markdown, arm_facade.report),
    arm_jobs.NAME: Benchmark(arm_jobs.NAME, arm_jobs.run, arm_jobs.markdown, arm_jobs.report),
    pipeline_handoff.NAME: Benchmark(
        pipeline_handoff.NAME, pipeline_handoff.run, pipeline_handoff.markdown, pipeline_handoff.report
    ),
    sweep_trials.NAME: Benchmark(
        sweep_trials.NAME, sweep_trials.run, sweep_trials.markdown, sweep_trials.report
    ),
    tracking.NAME: Benchmark(tracking.NAME, tracking.run, tracking.markdown, tracking.report),
    ssh_join.NAME: Benchmark(ssh_join.NAME, ssh_join.run, ssh_join.markdown, ssh_join.report),
    online_gateway.NAME: Benchmark(
        online_gateway.NAME, online_gateway.run, online_gateway.markdown, online_gateway.report
    ),
    slurm_node.NAME: Benchmark(slurm_node.NAME, slurm_node.run, slurm_node.markdown, slurm_node.report),
    studio_jobs.NAME: Benchmark(studio_jobs.NAME, studio_jobs.run, studio_jobs.markdown, studio_jobs.report),
    agent_sampling.NAME: Benchmark(
        agent_sampling.NAME, agent_sampling.run, agent_sampling.markdown, agent_sampling.report
    ),
    fair_share.NAME: Benchmark(fair_share.NAME, fair_share.run, fair_share.markdown, fair_share.report),
    fair_share_pass.NAME: Benchmark(
        fair_share_pass.NAME, fair_share_pass.run, fair_share_pass.markdown, fair_share_pass.report
    ),
    metrics_scrape.NAME: Benchmark(
        metrics_scrape.NAME, metrics_scrape.run, metrics_scrape.markdown, metrics_scrape.report
    ),
    job_wait.NAME: Benchmark(job_wait.NAME, job_wait.run, job_wait.markdown, job_wait.report),
    sandbox_start.NAME: Benchmark(
        sandbox_start.NAME, sandbox_start.run, sandbox_start.markdown, sandbox_start.report
    ),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests: a smoke run, noisy numbers")
    parser.add_argument(
        "--only", choices=sorted(BENCHMARKS), action="append", help="run only NAME (repeatable)"
    )
    args = parser.parse_args(argv)
    names: list[str] = args.only or list(BENCHMARKS)
    failed = 0
    for name in names:
        bench = BENCHMARKS[name]
        print(f"== {name}{' (quick)' if args.quick else ''}", flush=True)
        try:
            data = bench.run(args.quick)
        except Exception:
            traceback.print_exc()
            failed += 1
            continue
        json_path = _results.write_json(name, data)
        md_path = _results.update_readme(name, bench.markdown(data))
        print(bench.report(data))
        print(f"wrote {json_path} and {md_path}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
