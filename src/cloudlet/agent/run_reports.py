"""What the agent tells the control plane of one run: "running", its log chunks and its exit.

The requests of ``RunManager``'s sender thread (``agent/runner.py``): each call raises
``Unreachable`` for a 5xx (the sender retries the whole with backoff) and logs any other refusal,
which is not retried (the server said no; sending it again would not change its mind)."""

from __future__ import annotations

import threading
import time
from typing import Any

from cloudlet.agent.client import AgentClient, HTTPStatusError, Unreachable
from cloudlet.agent.config import log
from cloudlet.agent.runstate import Run, utf8_cut

CHUNK = 64 * 1024
REPORT_RUNNING_AFTER_S = 0.05


def _post(client: AgentClient, path: str, body: dict[str, Any], refused: str) -> Any:
    try:
        return client.call("POST", path, body)
    except HTTPStatusError as exc:
        if exc.status >= 500:
            raise Unreachable(str(exc)) from exc
        log(f"{refused} ({exc})")
        return None


def report_running(client: AgentClient, run: Run) -> None:
    """Say RUN runs, once, when it has lived ``REPORT_RUNNING_AFTER_S`` (a shorter run is reported
    by its exit alone, which carries its start time)."""
    if run.running_reported or run.exited or time.time() - run.started_at < REPORT_RUNNING_AFTER_S:
        return
    body = {"pid": run.pid, "started_at": run.started_at}
    _post(client, f"/agent/v1/runs/{run.run_id}/running", body, f"run {run.run_id}: running report refused")
    run.running_reported = True


def send_logs(
    client: AgentClient, run: Run, cond: threading.Condition, exit_carries_log: bool
) -> tuple[bool, dict[str, Any] | None]:
    """Send RUN's spooled log from where the last call stopped: (whether the run had exited, and the
    log's last chunk when the exit report is to carry it — one request for both, a tiny job's
    whole log)."""
    while True:
        with cond:
            exited, written = run.exited, run.written
        if run.sent_raw >= written:
            return exited, None
        with open(run.spool, "rb") as f:
            f.seek(run.sent_raw)
            data = f.read(min(CHUNK, written - run.sent_raw))
        n = len(data) if exited else utf8_cut(data)
        if n == 0:
            return exited, None
        text = data[:n].decode("utf-8", "replace")
        chunk = {"offset": run.sent_text, "data": text}
        if exited and exit_carries_log and run.sent_raw + n >= written:
            return exited, chunk
        refused = f"run {run.run_id}: log chunk at {run.sent_text} refused; dropped"
        _post(client, f"/agent/v1/runs/{run.run_id}/logs", chunk, refused)
        run.sent_raw += n
        run.sent_text += len(text.encode())


def send_exit(client: AgentClient, run: Run, tail: dict[str, Any] | None) -> Any:
    """Report RUN's exit (with TAIL, its log's last chunk, if any): the server's answer, which may
    hold the node's next runs; None when the server refused it."""
    body = {
        "exit_code": run.exit_code,
        "started_at": run.started_at,
        "ended_at": run.ended_at,
        "reason": run.reason,
        **({"log": tail} if tail is not None else {}),
    }
    refused = f"run {run.run_id}: exit refused; forgetting the run"
    return _post(client, f"/agent/v1/runs/{run.run_id}/exit", body, refused)
