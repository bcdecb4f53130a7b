"""``cloudlet job …``: create (upload code and data, submit), show, list, stream, cancel, download."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from cloudlet.cli.az_flags import WebOpt
from cloudlet.cli.compute import build_body, load_yaml_file, state
from cloudlet.cli.output import COLUMNS, err_console
from cloudlet.cli.studio import open_page
from cloudlet.client._config import ConfigurationError
from cloudlet.client.artifacts import Upload
from cloudlet.client.jobs import JobOperations
from cloudlet.client.operations import _Scope
from cloudlet.domain.jobs.job_status import JobStatus

app = typer.Typer(help="Submit and follow command jobs (like `az ml job`).", no_args_is_help=True)

NameOpt = Annotated[str, typer.Option("-n", "--name", help="Job name.")]
FAILED_STATUSES = frozenset({JobStatus.FAILED, JobStatus.CANCELED})  # ended, not completed


def _created(job: dict[str, Any]) -> Any:
    context = job.get("creation_context")
    return context.get("created_at") if isinstance(context, dict) else job.get("created_on")


def _waiting(job: dict[str, Any], key: str) -> Any:
    waiting = job.get("waiting")
    return waiting.get(key) if isinstance(waiting, dict) else None


def _eta_cell(job: dict[str, Any]) -> str | None:
    """A queued job's estimated start: ``08:42 (in ~3 min)``, local time."""
    eta = _parse_time(_waiting(job, "eta"))
    if eta is None:
        return None
    from cloudlet.domain.jobs.queue_places import in_words  # it loads the pipelines' models: not at import

    return f"{eta.astimezone().strftime('%H:%M')} ({in_words(eta.timestamp() - time.time())})"


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


COLUMNS.setdefault(
    "job",
    [
        ("NAME", lambda d: d.get("name")),
        ("STATUS", lambda d: d.get("status")),
        ("COMPUTE", lambda d: d.get("compute")),
        ("ATTEMPT", lambda d: d.get("attempt")),
        ("PRIORITY", lambda d: (d.get("queue_settings") or {}).get("priority")),
        ("DISPLAY_NAME", lambda d: d.get("display_name")),
        ("CREATED", _created),
        # A queued job's place in its compute's queue, its estimated start and the reason's code.
        ("POSITION", lambda d: _waiting(d, "position_text")),
        ("ETA", _eta_cell),
        ("WAITING", lambda d: _waiting(d, "code")),
    ],
)


def waiting_block(waiting: dict[str, Any]) -> str:
    """``job show``'s "Waiting" block: the reason in words, the position and the estimated start."""
    lines = ["Waiting", f"  reason:    {waiting.get('message')} ({waiting.get('code')})"]
    if waiting.get("position_text"):
        lines.append(f"  position:  {waiting['position_text']} in the queue of {waiting.get('compute')}")
    eta = _parse_time(waiting.get("eta"))
    if eta is not None:
        from cloudlet.domain.jobs.queue_places import in_words

        when = eta.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
        lines.append(f"  estimated start: {when} ({in_words(eta.timestamp() - time.time())})")
        if waiting.get("eta_note"):
            lines.append(f"                   {waiting['eta_note']}")
    elif waiting.get("position_text") or waiting.get("position"):
        lines.append(
            "  estimated start: not known (deeper in the queue than estimated, or never under its limits)"
        )
    as_of = _parse_time(waiting.get("as_of"))
    if as_of is not None:
        lines.append(f"  as of:     {as_of.astimezone().strftime('%H:%M:%S')} (refreshed every few seconds)")
    return "\n".join(lines)


def operations(ctx: typer.Context) -> JobOperations:
    st = state(ctx)
    return JobOperations(st.rest, _Scope(st.config))


def load_job_file(path: str) -> tuple[dict[str, Any], Path]:
    """Load a job YAML file (``-`` reads stdin) → (mapping, folder relative paths resolve against)."""
    base = Path.cwd() if path == "-" else Path(path).resolve().parent
    return load_yaml_file(path, "job"), base


def _describe_upload(upload: Upload) -> str:
    size = f"{upload.size / 1024:.1f} KiB" if upload.size >= 1024 else f"{upload.size} B"
    what = "code" if upload.kind == "code" else "data"
    if upload.skipped:
        return f"{what} {upload.local_path}: unchanged, already on the server ({upload.uri})"
    return f"{what} {upload.local_path}: uploaded {size} → {upload.uri}"


def _stream(ctx: typer.Context, ops: JobOperations, name: str, attempt: int | None = None) -> None:
    try:
        job = ops.stream(name, attempt=attempt)
    except KeyboardInterrupt:
        err_console.print(f"interrupted; job {escape(name)} continues on the server", highlight=False)
        raise typer.Exit(code=130) from None
    if job._to_dict().get("status") in FAILED_STATUSES:
        raise typer.Exit(code=1)


@app.command("create")
def create(
    ctx: typer.Context,
    file: Annotated[str, typer.Option("-f", "--file", help="Command job YAML file (- for stdin).")],
    name: Annotated[str | None, typer.Option("-n", "--name", help="Job name (default: generated).")] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="KEY.PATH=VALUE (YAML-typed), repeatable, e.g. --set inputs.lr=0.1."),
    ] = None,
    stream: Annotated[
        bool, typer.Option("--stream", help="Follow the job's log until it ends (exit 1 if it fails).")
    ] = False,
    web: WebOpt = False,
    skip_validation: Annotated[
        bool, typer.Option("--skip-validation", help="Accepted (the server validates the job).")
    ] = False,
) -> None:
    """Upload local code and inputs, then submit a command job."""
    st = state(ctx)
    doc, base = load_job_file(file)
    try:
        body = build_body(doc, set_, None, name)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from exc
    ops = operations(ctx)
    job = ops.create_or_update(body, base_path=base)
    for upload in ops.last_uploads:
        err_console.print(escape(_describe_upload(upload)), highlight=False)
    data = job._to_dict()
    job_name = str(data.get("name") or body.get("name"))
    for warning in data.get("warnings") or []:  # accepted, but the user should know (e.g. CUDA on a CPU)
        err_console.print(f"warning: {escape(str(warning))}", highlight=False)
    if web:
        open_page(st, job.studio_url)
    if stream:
        err_console.print(f"job {escape(job_name)} submitted; streaming its log", highlight=False)
        if job.studio_url and not web:
            err_console.print(f"Studio: {escape(job.studio_url)}", highlight=False)
        _stream(ctx, ops, job_name)
        return
    st.emit(data, "job")


MonitorOpt = Annotated[
    bool, typer.Option("--monitor", help="Its CPU, memory, I/O and GPU over time, per node.")
]


@app.command("show")
def show(ctx: typer.Context, name: NameOpt, web: WebOpt = False, monitor: MonitorOpt = False) -> None:
    """Show one job with its status, attempts and outputs (a pipeline: its steps as a DAG);
    ``--web`` also prints its studio page on stderr and opens it."""
    st = state(ctx)
    ops = operations(ctx)
    if monitor:
        if web:
            open_page(st, ops.get(name).studio_url)
        data = ops.monitoring(name)
        if st.output == "table":
            typer.echo(monitor_table(data))
        else:
            st.emit(data, "job")
        return
    job = ops.get(name)
    if web:
        open_page(st, job.studio_url)
    data = job._to_dict()
    waiting = data.pop("waiting", None) if st.output == "table" and st.query is None else None
    if data.get("dag") and st.output == "table":  # each step, its status, upstream, reuse
        dag = data.pop("dag")
        st.emit(data, "job")
        typer.echo(f"\nsteps:\n{dag}")
    else:
        st.emit(data, "job")
    if isinstance(waiting, dict):  # a queued job: why, where in the queue, and when it may start
        typer.echo("\n" + waiting_block(waiting))


SPARKS = "▁▂▃▄▅▆▇█"
MONITOR_ROWS = (
    ("cpu_percent", "CPU %", 1.0, "{:.0f}"),
    ("memory_bytes", "memory MiB", 1 / 2**20, "{:.0f}"),
    ("read_bps", "read KiB/s", 1 / 2**10, "{:.0f}"),
    ("write_bps", "write KiB/s", 1 / 2**10, "{:.0f}"),
    ("disk_used_bytes", "node disk GiB", 1 / 2**30, "{:.1f}"),
    ("net_rx_bps", "node rx KiB/s", 1 / 2**10, "{:.0f}"),
    ("net_tx_bps", "node tx KiB/s", 1 / 2**10, "{:.0f}"),
    ("gpu_percent", "GPU %", 1.0, "{:.0f}"),
    ("gpu_memory_bytes", "GPU memory MiB", 1 / 2**20, "{:.0f}"),
)


def sparkline(values: list[float | None], width: int = 40) -> str:
    """The last `width` values as block characters scaled to their maximum (a gap: a space)."""
    tail = values[-width:]
    top = max((v for v in tail if v is not None), default=0.0)
    return "".join(
        " "
        if v is None
        else SPARKS[min(len(SPARKS) - 1, int(v / top * (len(SPARKS) - 1)))]
        if top
        else SPARKS[0]
        for v in tail
    )


def monitor_table(data: dict[str, Any]) -> str:
    """Per node: each metric's latest value, mean, maximum and sparkline; idle and no-GPU said."""
    lines = [f"job {data.get('job')} ({data.get('status')})" + ("  IDLE: CPU ~0" if data.get("idle") else "")]
    for warning in data.get("warnings") or []:
        lines.append(f"warning: {warning}")
    if not data.get("nodes"):
        lines.append("no samples yet")
    for node in data.get("nodes") or []:
        lines.append(f"\nnode {node['node']}" + ("" if node.get("gpu") else "  (no GPU)"))
        lines.append(f"  {'METRIC':<16}{'LATEST':>9}{'MEAN':>9}{'MAX':>9}  HISTORY")
        series = node.get("series") or {}
        for field, label, scale, fmt in MONITOR_ROWS:
            values = [None if v is None else v * scale for v in series.get(field) or []]
            seen = [v for v in values if v is not None]
            if not seen:
                continue
            latest, mean, top = (fmt.format(x) for x in (seen[-1], sum(seen) / len(seen), max(seen)))
            lines.append(f"  {label:<16}{latest:>9}{mean:>9}{top:>9}  {sparkline(values)}")
    return "\n".join(lines)


@app.command("deliveries")
def deliveries(ctx: typer.Context, name: NameOpt) -> None:
    """The job's notifications: each email and webhook, its state, tries and last error."""
    state(ctx).emit(operations(ctx).deliveries(name), "delivery")


@app.command("list")
def list_(
    ctx: typer.Context,
    compute: Annotated[str | None, typer.Option("--compute", help="Only jobs on this compute.")] = None,
    status: Annotated[
        str | None, typer.Option("--status", help="Only jobs in this status (e.g. Running, Completed).")
    ] = None,
    max_results: Annotated[
        int | None, typer.Option("--max-results", "-r", min=1, help="At most this many (newest first).")
    ] = None,
    parent: Annotated[
        str | None,
        typer.Option(
            "--parent", "--parent-job-name", "-p", help="Only the child jobs of this pipeline or sweep."
        ),
    ] = None,
) -> None:
    """List the workspace's jobs, newest first."""
    st = state(ctx)
    compute_name = compute.removeprefix("azureml:") if compute else None
    jobs = operations(ctx).list(
        compute=compute_name, status=status, max_results=max_results, parent_job_name=parent
    )
    st.emit([j._to_dict() for j in jobs], "job")


AttemptOpt = Annotated[
    int | None, typer.Option("--attempt", min=1, help="This attempt (1, 2, …; default: the latest).")
]


@app.command("stream")
def stream_(ctx: typer.Context, name: NameOpt, attempt: AttemptOpt = None) -> None:
    """Print the job's log as it runs, then a summary line (exit 1 if it failed or was canceled).
    With --attempt N: that attempt's log, until that attempt ended."""
    _stream(ctx, operations(ctx), name, attempt)


@app.command("cancel")
def cancel(ctx: typer.Context, name: NameOpt) -> None:
    """Cancel a queued or running job."""
    st = state(ctx)
    st.emit(operations(ctx).begin_cancel(name).result()._to_dict(), "job")


@app.command("download")
def download(
    ctx: typer.Context,
    name: NameOpt,
    output_name: Annotated[
        str | None, typer.Option("--output-name", help="Only this output (default: all, plus the log).")
    ] = None,
    download_path: Annotated[
        str, typer.Option("-p", "--download-path", help="Folder to download into.")
    ] = ".",
    all_: Annotated[
        bool,
        typer.Option(
            "--all", help="Every named output and the default artifacts (the default without --output-name)."
        ),
    ] = False,
    attempt: AttemptOpt = None,
) -> None:
    """Download outputs to DOWNLOAD_PATH/named-outputs/<output>, and the attempt's ./outputs,
    ./logs and log to DOWNLOAD_PATH/artifacts/ (like `az ml job download --all`)."""
    st = state(ctx)
    written = operations(ctx).download(name, download_path, output_name, all=all_, attempt=attempt)
    st.emit([{"name": path.name, "path": str(path)} for path in written])
