"""The events feed's streams, woken by commits (``services/core/feed_wake.py``) vs polling only:
how long an event takes from its commit to a watching stream, and how often an idle stream reads
the store. Both sides run here, one after the other, on the same machine: BEFORE is the source of
a git revision (``--before``, default the commit before the wake-ups; its streams poll every
0.5 s), AFTER this checkout's (woken, with its 2 s fallback poll); each with its own defaults.

For each side: a fresh ``cloudlet server`` (``--workers`` 1 by default), ``--streams`` streams
watching its workspace; ``--events`` computes made one by one through the API at random gaps
(0.2-0.6 s, so commits fall at every phase of a poll); each event's latency is its arrival on a
stream minus its ``at`` (stamped in the committing transaction, same clock); then ``--idle``
seconds with nothing happening, during which the server's reads of the feed are counted (a
``sitecustomize`` on the server's path counts the ``SELECT … FROM event_horizon`` that each page
read makes, and writes the count to a file), less a window with no stream open. The reads while
the events came are counted too (``active_reads_per_stream``: a woken stream reads once per
wake-up at most, a burst coalesced, so this follows the commits, where the poll's followed the
clock).

    python -m bench.events_wake [--before REV] [--streams 4] [--events 30] [--idle 30] [--workers 1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench._server import REPO_ROOT, ServerProcess, start_cloudlet
from bench._stats import percentile

BEFORE = "ac2039c"  # main just before the streams were woken by commits
COMPUTE = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 1}
COUNTER = """
import os
_out = os.environ.get("CLOUDLET_BENCH_READS_OUT")
if _out:
    import threading, time
    from sqlalchemy import event
    from sqlalchemy.engine import Engine
    _count = [0]

    def _seen(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("SELECT") and "FROM event_horizon" in statement:
            _count[0] += 1

    event.listen(Engine, "before_cursor_execute", _seen)

    def _dump():
        path = f"{_out}.{os.getpid()}"
        while True:
            time.sleep(0.2)
            with open(path + ".tmp", "w") as f:
                f.write(str(_count[0]))
            os.replace(path + ".tmp", path)

    threading.Thread(target=_dump, daemon=True).start()
"""


class Stream(threading.Thread):
    def __init__(self, server: ServerProcess, since: int) -> None:
        super().__init__(daemon=True)
        self.server, self.since = server, since
        self.arrivals: list[tuple[float, dict[str, Any]]] = []
        self.open = threading.Event()
        self.client = httpx.Client(
            base_url=server.endpoint, headers=server.headers(), timeout=httpx.Timeout(10, read=120)
        )

    def run(self) -> None:
        url = f"{self.server.ws_path}/events"
        try:
            with self.client.stream(
                "GET", url, params={"watch": "true"}, headers={"Last-Event-ID": str(self.since)}
            ) as r:
                self.open.set()
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        self.arrivals.append((time.time(), json.loads(line[6:])))
        except httpx.HTTPError:
            return  # closed by the bench


def _reads(out: str) -> int:
    total = 0
    for path in Path(out).parent.glob(Path(out).name + ".*"):
        if not path.name.endswith(".tmp"):
            total += int(path.read_text() or 0)
    return total


def _last_seq(api: httpx.Client, server: ServerProcess) -> int:
    since: int | None = None
    while True:
        params = {"limit": 1000} | ({} if since is None else {"since": since})
        body = api.get(f"{server.ws_path}/events", params=params).json()
        since = int(body["lastSeq"])
        if "nextLink" not in body:
            return since


def run_side(label: str, src: Path, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    counter_dir = work / "counter"
    counter_dir.mkdir(exist_ok=True)
    (counter_dir / "sitecustomize.py").write_text(COUNTER)
    out = str(work / f"reads-{label}")
    saved = dict(os.environ)
    os.environ.update(
        CLOUDLET_BENCH_SRC=str(src),
        CLOUDLET_BENCH_READS_OUT=out,
        CLOUDLET_WORKERS=str(args.workers),
        PYTHONPATH=str(counter_dir) + (os.pathsep + saved["PYTHONPATH"] if saved.get("PYTHONPATH") else ""),
    )
    for name in ("CLOUDLET_EVENTS_POLL_S", "CLOUDLET_EVENTS_HEARTBEAT_S"):
        os.environ.pop(name, None)  # each side's own defaults
    try:
        server = start_cloudlet(work / f"home-{label}", timeout=240)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        api = httpx.Client(base_url=server.endpoint, headers=server.headers(), timeout=30)
        time.sleep(3)  # the start's own reads settle
        base0 = _reads(out)
        time.sleep(args.idle / 2)
        baseline = (_reads(out) - base0) / (args.idle / 2) * 60  # reads a minute with no stream open
        streams = [Stream(server, _last_seq(api, server)) for _ in range(args.streams)]
        for stream in streams:
            stream.start()
            stream.open.wait(30)
        time.sleep(2)
        rng = random.Random(7)
        active0, began = _reads(out), time.monotonic()
        for i in range(args.events):
            made = api.put(f"{server.ws_path}/computes/wake-{i}", json=COMPUTE)
            assert made.status_code in (200, 201), made.text
            time.sleep(rng.uniform(0.2, 0.6))
        time.sleep(5)  # the last events (and the reconciler's moves) arrive
        active_s = time.monotonic() - began
        active = (_reads(out) - active0 - baseline * active_s / 60) / args.streams
        latencies = [
            arrived - e["at"] for s in streams for arrived, e in s.arrivals if e["name"].startswith("wake-")
        ]
        idle0 = _reads(out)
        time.sleep(args.idle)
        per_stream = ((_reads(out) - idle0) / args.idle * 60 - baseline) / args.streams
        for stream in streams:
            stream.client.close()
        api.close()
    finally:
        server.stop()
    lat = sorted(latencies)
    result = {
        "side": label,
        "events_seen": len(lat),
        "p50_ms": percentile(lat, 50) * 1000,
        "p99_ms": percentile(lat, 99) * 1000,
        "max_ms": lat[-1] * 1000,
        "idle_reads_per_stream_min": per_stream,
        "active_reads_per_stream": active,  # while the events came, and 5 s after
        "active_s": active_s,
        "baseline_reads_min": baseline,
    }
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", default=BEFORE, help="git revision of the polling-only side")
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--events", type=int, default=30)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        before_src = work / "before"
        before_src.mkdir()
        archive = subprocess.run(
            ["git", "archive", args.before, "src"], cwd=REPO_ROOT, capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(before_src)], input=archive.stdout, check=True)
        before = run_side("before", before_src / "src", args, work)
        after = run_side("after", REPO_ROOT / "src", args, work)
    print(
        f"load {os.getloadavg()[0]:.1f}; {args.streams} streams, {args.events} computes,"
        f" --workers {args.workers}"
    )
    for key in ("p50_ms", "p99_ms", "max_ms", "idle_reads_per_stream_min", "active_reads_per_stream"):
        ratio = after[key] / before[key] if before[key] else float("nan")
        print(f"{key:>28}: before {before[key]:8.1f}  after {after[key]:8.1f}  after/before {ratio:.3f}")


if __name__ == "__main__":
    main()
