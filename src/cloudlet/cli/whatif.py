"""``cloudlet compute what-if``: replay a job trace through the scale simulator for one or more
cluster settings and compare cost, queue wait, idle waste and preemption losses. Runs offline: no
server is needed (prices come from the built-in size catalogue)."""

from __future__ import annotations

import importlib.util
import io
import math
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from cloudlet.cli.output import OutputFormat, dump_json, dump_yaml, err_console, print_error
from cloudlet.cli.whatif_policies import (
    PolicyInputError,
    PolicyRun,
    check_run,
    compare_policies,
    duration_text,
    parse_policies,
    parse_priority_mix,
    policies_doc,
    render_policies,
)
from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.compute.quota import Tier
from cloudlet.domain.errors import CloudletError

if TYPE_CHECKING:
    from cloudlet.sim.trace import Trace
    from cloudlet.sim.whatif import Outcome, Setting

HELP = """Replay a job trace (CSV) through cloudlet's scheduler and autoscaler on a simulated clock
and compare cluster settings side by side: cost (node-hours × the size's price), queue wait
p50/p95, idle waste and, for low priority, preemption losses. Offline: no server needed.

\b
The trace needs a submit time column (timestamp, submit_time: seconds or a date-time), a duration
column in seconds (duration, runtime) and optionally nodes (nodes, instance_count) or GPUs
(num_gpus, gpus: a job takes ceil(GPUs / GPUs per node of --size) nodes). Cloudlet runs one job
per node, so pick a size whose GPU count fits the typical job.

\b
Several settings, two ways (a column each):
  repeat flags: the k-th setting takes the k-th value of each flag; a flag given once applies to
    all:  --max 8 --max 16 --idle 120        (two settings: max 8 and max 16, both idle 120 s)
  --setting KEY=VALUE,... (repeatable): keys size, min, max, idle, tier, boot, rate; unset keys
    take the plain flags' (first) values:
    --setting "max=8" --setting "max=8,tier=low_priority"

\b
Queue policies instead of cluster settings (--policy): one pool of --capacity GPUs shared by the
trace's groups as teams (Philly's virtual clusters; equal shares), replayed under each policy:
fifo, priority, fair (fair share, no borrowing), fair-borrow (fair share, borrowing, preemption
from checkpoints) and kueue (borrowing and reclaim without usage decay or anti-thrash guard):
  cloudlet compute what-if --trace philly.csv --policy fifo,fair,fair-borrow,kueue --capacity 400 \\
      --start-day 35 --days 7

\b
Example:
  cloudlet compute what-if --trace philly.csv --size Standard_NC6s_v3 --min 0 --idle 600 \\
      --max 400 --max 800 --plot what-if.png
"""

_SETTING_KEYS = ("size", "min", "max", "idle", "tier", "boot", "rate")


class WhatIfInputError(Exception):
    """Bad input: the message names the flag and the fix."""


@dataclass(frozen=True)
class RawSetting:
    """A setting as typed, before its size is looked up: values stay strings until checked."""

    size: str
    min_nodes: str
    max_nodes: str | None
    idle_s: str
    tier: str
    boot_s: str
    rate: str
    origin: str  # how to name it in an error: "--max" flags or "--setting 'max=8'"


def _pick(values: list[str], index: int, flag: str, count: int) -> str | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    if len(values) != count:
        raise WhatIfInputError(
            f"{flag} is given {len(values)} times but there are {count} settings; give it once "
            f"(for all) or once per setting."
        )
    return values[index]


def raw_settings(flags: dict[str, list[str]], setting_args: list[str]) -> list[RawSetting]:
    """The settings to compare, from repeated flags or ``--setting`` strings (see the help)."""
    first = {key: (values[0] if values else None) for key, values in flags.items()}
    if setting_args:
        return [_from_setting_arg(arg, first) for arg in setting_args]
    count = max((len(v) for v in flags.values()), default=1) or 1
    out = []
    for i in range(count):
        picked = {key: _pick(values, i, f"--{key}", count) for key, values in flags.items()}
        out.append(_raw(picked, "the flags" if count == 1 else f"setting {i + 1} of the repeated flags"))
    return out


def _from_setting_arg(arg: str, defaults: dict[str, str | None]) -> RawSetting:
    values = dict(defaults)
    for part in filter(None, (p.strip() for p in arg.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in _SETTING_KEYS or not value.strip():
            raise WhatIfInputError(
                f"--setting {arg!r}: {part!r} is not KEY=VALUE with KEY one of {', '.join(_SETTING_KEYS)} "
                f'(e.g. --setting "min=0,max=8,idle=120,tier=low_priority").'
            )
        values[key] = value.strip()
    return _raw(values, f"--setting {arg!r}")


def _raw(values: dict[str, str | None], origin: str) -> RawSetting:
    if not values.get("size"):
        raise WhatIfInputError(f"{origin}: no VM size; give --size (e.g. --size Standard_NC6s_v3).")
    return RawSetting(
        size=str(values["size"]),
        min_nodes=values.get("min") or "0",
        max_nodes=values.get("max"),
        idle_s=values.get("idle") or "120",
        tier=values.get("tier") or Tier.DEDICATED.value,
        boot_s=values.get("boot") or "120",
        rate=values.get("rate") or "0.05",
        origin=origin,
    )


def _number(text: str, flag: str, origin: str, *, integer: bool, minimum: float = 0) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < minimum or (integer and value != int(value)):
        kind = "a whole number" if integer else "a number"
        raise WhatIfInputError(f"{flag} {text!r} ({origin}): give {kind} >= {minimum:g}.")
    return value


def check_setting(raw: RawSetting) -> Setting:
    """Look the size up and check every value; ``WhatIfInputError`` names the flag and the fix."""
    from cloudlet.domain.compute.sizes import load_catalogue
    from cloudlet.sim.whatif import Setting

    try:
        size = load_catalogue().require_size(raw.size, ComputeType.AMLCOMPUTE, target="--size")
    except CloudletError as exc:
        raise WhatIfInputError(f"--size {raw.size} ({raw.origin}): {exc.message}") from None
    if raw.max_nodes is None:
        raise WhatIfInputError(f"{raw.origin}: no maximum node count; give --max N (e.g. --max 8).")
    min_nodes = int(_number(raw.min_nodes, "--min", raw.origin, integer=True))
    max_nodes = int(_number(raw.max_nodes, "--max", raw.origin, integer=True, minimum=1))
    if min_nodes > max_nodes:
        raise WhatIfInputError(
            f"--min {min_nodes} is above --max {max_nodes} ({raw.origin}); give --min <= --max."
        )
    try:
        tier = Tier(raw.tier.strip().lower().replace("-", "_"))
    except ValueError:
        raise WhatIfInputError(
            f"--tier {raw.tier!r} ({raw.origin}): use dedicated or low_priority."
        ) from None
    if tier is Tier.LOW_PRIORITY and size.price_low_priority is None:
        raise WhatIfInputError(
            f"--tier low_priority ({raw.origin}): {size.name} cannot run low-priority nodes (no "
            f"low-priority price in the catalogue); use --tier dedicated or another size."
        )
    return Setting(
        size=size,
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        idle_s=_number(raw.idle_s, "--idle", raw.origin, integer=False),
        tier=tier,
        boot_s=_number(raw.boot_s, "--boot", raw.origin, integer=False),
        preemptions_per_node_hour=_number(raw.rate, "--preemption-rate", raw.origin, integer=False),
    )


def load_checked_trace(path: str, limit: int | None, settings: list[Setting]) -> Trace:
    from cloudlet.sim.trace import TraceError, load_trace

    try:
        trace = load_trace(path)
    except TraceError as exc:
        raise WhatIfInputError(str(exc)) from None
    if limit is not None:
        trace.jobs = trace.jobs[:limit]
    if trace.gives_gpus:
        for setting in settings:
            if setting.size.gpus < 1:
                raise WhatIfInputError(
                    f"--size {setting.size.name} has no GPUs but the trace gives GPU counts "
                    f"({trace.columns['gpus']}); choose a GPU size such as Standard_NC6s_v3 (1 GPU "
                    f"per node), or give the trace a nodes column."
                )
    return trace


def _replay_one(args: tuple[Trace, Setting, float, int, bool]) -> Outcome:
    from cloudlet.sim.whatif import replay

    trace, setting, time_scale, seed, series = args
    return replay(trace, setting, time_scale=time_scale, seed=seed, record_series=series)


def replay_all(
    trace: Trace, settings: list[Setting], time_scale: float, seed: int, series: bool
) -> list[Outcome]:
    """One simulation per setting; in parallel processes when there are several and CPUs to spare."""
    work = [(trace, s, time_scale, seed, series) for s in settings]
    workers = min(len(work), os.cpu_count() or 1)
    if workers <= 1:
        return [_replay_one(w) for w in work]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_replay_one, work))


def _losses(o: Outcome) -> str:
    dollars = o.lost_node_hours * o.setting.price_per_node_hour
    return f"{o.lost_node_hours:,.1f} node-h (${dollars:,.2f})"


def _given_up(o: Outcome) -> str:
    return f"{o.jobs_given_up:,} (evicted {o.setting.give_up_after_evictions}×)" if o.jobs_given_up else "0"


_ROWS: list[tuple[str, Callable[[Outcome], str]]] = [
    ("price / node-hour", lambda o: f"${o.setting.price_per_node_hour:,.4g} ({o.setting.tier.value})"),
    ("cost", lambda o: f"${o.cost:,.2f}"),
    ("node-hours", lambda o: f"{o.node_hours:,.1f}"),
    ("queue wait p50", lambda o: duration_text(o.wait_p50_s)),
    ("queue wait p95", lambda o: duration_text(o.wait_p95_s)),
    ("idle waste", lambda o: f"{o.idle_node_hours:,.1f} node-h ({o.idle_share:.1%})"),
    ("preemptions", lambda o: f"{o.preemptions:,}"),
    ("preemption losses", _losses),
    ("jobs completed", lambda o: f"{o.jobs_completed:,} of {o.jobs:,}"),
    ("jobs given up", _given_up),
    ("jobs too big for max", lambda o: f"{o.jobs_too_big:,}"),
    ("nodes launched", lambda o: f"{o.nodes_launched:,}"),
]


def render_table(outcomes: list[Outcome]) -> str:
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("METRIC", no_wrap=True)
    for outcome in outcomes:
        s = outcome.setting
        tier = ", low-pri" if s.tier is Tier.LOW_PRIORITY else ""
        table.add_column(f"{s.size.name}\nmin {s.min_nodes} max {s.max_nodes} idle {s.idle_s:g}s{tier}")
    for label, cell in _ROWS:
        table.add_row(label, *(cell(o) for o in outcomes))
    console = Console(file=io.StringIO(), width=250, force_terminal=False)
    console.print(table)
    text: str = console.file.getvalue()  # type: ignore[attr-defined]
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def what_if(
    ctx: typer.Context,
    trace: Annotated[str, typer.Option("--trace", help="Job trace CSV (see above for the columns).")],
    size: Annotated[list[str] | None, typer.Option("--size", help="VM size (repeatable).")] = None,
    min_: Annotated[list[str] | None, typer.Option("--min", help="min_instances (default 0).")] = None,
    max_: Annotated[list[str] | None, typer.Option("--max", help="max_instances.")] = None,
    idle: Annotated[
        list[str] | None, typer.Option("--idle", help="idle_time_before_scale_down, s (default 120).")
    ] = None,
    tier: Annotated[list[str] | None, typer.Option("--tier", help="dedicated | low_priority.")] = None,
    setting: Annotated[
        list[str] | None,
        typer.Option("--setting", help='One setting: "min=0,max=8,idle=120,tier=low_priority".'),
    ] = None,
    boot: Annotated[str, typer.Option("--boot", help="Node boot time, s (request -> ready).")] = "120",
    rate: Annotated[
        str, typer.Option("--preemption-rate", help="Low priority: evictions per node-hour.")
    ] = "0.05",
    limit: Annotated[
        int | None, typer.Option("--limit", help="Replay only the N earliest-submitted jobs.", min=1)
    ] = None,
    time_scale: Annotated[
        float, typer.Option("--time-scale", help="Multiply submit times and durations (0.5: 2× faster).")
    ] = 1.0,
    seed: Annotated[int, typer.Option("--seed", help="Seed for the evictions.")] = 0,
    plot: Annotated[
        str | None, typer.Option("--plot", help="Write a PNG: nodes and queue over time per setting.")
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option(
            "--policy",
            help="Compare queue policies on one shared pool instead of cluster settings: a comma-separated "
            "list of fifo, priority, fair, fair-borrow, kueue (needs --capacity).",
        ),
    ] = None,
    capacity: Annotated[
        int | None,
        typer.Option("--capacity", help="--policy: the pool's GPUs (or nodes, for a nodes trace)."),
    ] = None,
    teams: Annotated[
        int,
        typer.Option("--teams", help="--policy: the trace's largest groups become teams (the rest: other)."),
    ] = 5,
    start_day: Annotated[
        float, typer.Option("--start-day", help="--policy: replay from this day of the trace.")
    ] = 0.0,
    days: Annotated[float | None, typer.Option("--days", help="--policy: replay this many days.")] = None,
    checkpoint: Annotated[
        float,
        typer.Option("--checkpoint", help="--policy: minutes between checkpoints (work kept on preemption)."),
    ] = 15.0,
    half_life: Annotated[
        float, typer.Option("--half-life", help="--policy: fair-share usage half-life, hours.")
    ] = 24.0,
    min_run: Annotated[
        float, typer.Option("--min-run", help="--policy: minutes a job runs before it may be preempted.")
    ] = 10.0,
    eta_sample: Annotated[
        int, typer.Option("--eta-sample", help="--policy: estimate the ETA of every n-th job.", min=1)
    ] = 1,
    priority_mix: Annotated[
        str | None,
        typer.Option(
            "--priority-mix", help="--policy: HIGH,LOW shares of jobs given high/low priority (0.1,0.2)."
        ),
    ] = None,
) -> None:
    started = time.perf_counter()
    if policy is not None:
        _what_if_policies(
            ctx,
            trace,
            limit,
            PolicyRun([], capacity or 0, teams, start_day, days, checkpoint, half_life, min_run, eta_sample),
            policy,
            priority_mix,
        )
        return
    try:
        if not (time_scale > 0 and math.isfinite(time_scale)):
            raise WhatIfInputError(f"--time-scale {time_scale:g}: give a number > 0 (0.5: twice as fast).")
        flags = {
            **{"size": size or [], "min": min_ or [], "max": max_ or [], "idle": idle or []},
            **{"tier": tier or [], "boot": [boot], "rate": [rate]},
        }
        if plot is not None and importlib.util.find_spec("matplotlib") is None:
            raise WhatIfInputError("--plot needs matplotlib: pip install 'cloudlet[plot]'")
        settings = [check_setting(raw) for raw in raw_settings(flags, setting or [])]
        loaded = load_checked_trace(trace, limit, settings)
    except WhatIfInputError as exc:
        print_error(str(exc))
        raise typer.Exit(code=2) from None
    err_console.print(
        f"replaying {len(loaded.jobs):,} jobs from {trace} for {len(settings)} setting(s)...",
        highlight=False,
        soft_wrap=True,
    )
    outcomes = replay_all(loaded, settings, time_scale, seed, series=plot is not None)
    if plot is not None:
        _write_plot(outcomes, plot, f"What-if: {os.path.basename(trace)}, {len(loaded.jobs):,} jobs")
    _emit(ctx, loaded, outcomes, time.perf_counter() - started)


def _what_if_policies(
    ctx: typer.Context, path: str, limit: int | None, run: PolicyRun, policy: str, mix: str | None
) -> None:
    started = time.perf_counter()
    try:
        high, low = parse_priority_mix(mix)
        run = replace(run, policies=parse_policies(policy), high_share=high, low_share=low)
        if run.capacity < 1:
            raise PolicyInputError(
                "--policy needs --capacity N: the pool's GPUs (or nodes), e.g. --capacity 400."
            )
        check_run(run)
        loaded = load_checked_trace(path, limit, [])
        err_console.print(
            f"replaying {len(loaded.jobs):,} jobs from {path} under {len(run.policies)} policies...",
            highlight=False,
            soft_wrap=True,
        )
        outcomes = compare_policies(loaded, run)
    except (WhatIfInputError, PolicyInputError) as exc:
        print_error(str(exc))
        raise typer.Exit(code=2) from None
    elapsed = time.perf_counter() - started
    fmt = OutputFormat(getattr(ctx.find_root().obj, "output", OutputFormat.table))
    if fmt is OutputFormat.table:
        sys.stdout.write(render_policies(outcomes))
        err_console.print(f"simulated in {elapsed:.1f} s", highlight=False, soft_wrap=True)
        return
    doc = policies_doc(loaded, run, outcomes, elapsed)
    sys.stdout.write(dump_json(doc) + "\n" if fmt is OutputFormat.json else dump_yaml(doc))


def _write_plot(outcomes: list[Outcome], path: str, title: str) -> None:
    from cloudlet.sim.plot import write_plot

    try:
        write_plot(outcomes, path, title)
    except OSError as exc:
        print_error(f"--plot {path}: cannot write it ({exc.strerror or exc}); give a writable path.")
        raise typer.Exit(code=2) from None
    err_console.print(f"wrote {path}", highlight=False, soft_wrap=True)


def _emit(ctx: typer.Context, trace: Trace, outcomes: list[Outcome], elapsed_s: float) -> None:
    fmt = OutputFormat(getattr(ctx.find_root().obj, "output", OutputFormat.table))
    if fmt is OutputFormat.table:
        sys.stdout.write(render_table(outcomes))
        skipped = sum(trace.skipped.values())
        note = f"; {skipped:,} rows skipped ({', '.join(trace.skipped)})" if skipped else ""
        err_console.print(
            f"{len(trace.jobs):,} jobs, simulated in {elapsed_s:.1f} s{note}", highlight=False, soft_wrap=True
        )
        return
    doc = {
        "trace": str(trace.path),
        "columns": trace.columns,
        "jobs": len(trace.jobs),
        "rows_skipped": trace.skipped,
        "elapsed_s": round(elapsed_s, 3),
        "settings": [o.to_dict() for o in outcomes],
    }
    sys.stdout.write(dump_json(doc) + "\n" if fmt is OutputFormat.json else dump_yaml(doc))


__all__ = ["HELP", "what_if"]
