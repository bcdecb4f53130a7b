"""blob_listener: the Blob service (``api/blob.py``) as a path-style prefix of cloudlet's own app
(``{endpoint}/blob/...``) beside the same router on a listener of its own (``bench/_blob_peer.py``:
a uvicorn process serving only it, over the same data root and secret).

Setup: a real cloudlet server (embedded SQLite, temp home); a pending code upload's SAS URL
(``startPendingUpload``). Series, interleaved per target on one keep-alive connection each:
  * put: Put Blob of 4 KiB (signature check, staging, MD5, rename into the datastore);
  * head: Get Blob Properties;
  * block upload: a 64 MiB blob as 4 MiB Put Blocks + Put Block List, MB/s.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import _results
from bench._server import HOST, REPO_ROOT, ServerProcess, _env, _free_port, _healthy, start_cloudlet
from bench._stats import ratio, summarize_ns

NAME = "blob_listener"
ARM = (
    "/subscriptions/{sub}/resourceGroups/default"
    "/providers/Microsoft.MachineLearningServices/workspaces/default"
)


def _start_blob_peer(home: Path) -> ServerProcess:
    port = _free_port()
    cmd = [sys.executable, str(Path(__file__).with_name("_blob_peer.py")), HOST, str(port), str(home)]
    log_path = home / "blob-peer.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            cmd, env=_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    peer = ServerProcess(process, f"http://{HOST}:{port}", log_path)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
        if _healthy(peer.endpoint + "/healthz"):
            return peer
        time.sleep(0.1)
    peer.stop()
    raise RuntimeError(f"blob peer did not start:\n{log_path.read_text()}")


def _series(client: httpx.Client, url: str, count: int) -> dict[str, list[int]]:
    body = os.urandom(4096)
    md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
    base, query = url.split("?", 1)
    puts, heads = [], []
    for i in range(count):
        target = f"{base}/small/{i % 50}.bin?{query}"
        start = time.perf_counter_ns()
        headers = {"x-ms-blob-type": "BlockBlob", "Content-MD5": md5}
        response = client.put(target, content=body, headers=headers)
        puts.append(time.perf_counter_ns() - start)
        response.raise_for_status()
        start = time.perf_counter_ns()
        client.head(target).raise_for_status()
        heads.append(time.perf_counter_ns() - start)
    return {"put": puts, "head": heads}


def _block_upload(client: httpx.Client, url: str, total_mib: int, name: str) -> float:
    base, query = url.split("?", 1)
    block = os.urandom(4 << 20)
    ids = []
    start = time.perf_counter()
    for i in range(total_mib // 4):
        block_id = base64.b64encode(f"{i:08d}".encode()).decode()
        ids.append(block_id)
        client.put(f"{base}/{name}?comp=block&blockid={block_id}&{query}", content=block).raise_for_status()
    listing = "<BlockList>" + "".join(f"<Latest>{b}</Latest>" for b in ids) + "</BlockList>"
    client.put(f"{base}/{name}?comp=blocklist&{query}", content=listing.encode()).raise_for_status()
    return total_mib / (time.perf_counter() - start)


def run(quick: bool = False) -> dict[str, Any]:
    count, total_mib, rounds = (150, 32, 2) if quick else (600, 64, 3)
    home = Path(tempfile.mkdtemp(prefix="bench-blob-"))
    server = start_cloudlet(home)
    peer = None
    try:
        peer = _start_blob_peer(home)
        with httpx.Client(headers=server.headers(), timeout=60) as api:
            path = ARM.format(sub=server.subscription_id) + "/codes/bench/versions/1/startPendingUpload"
            reference = api.post(server.endpoint + path, json={}).json()["blobReferenceForConsumption"]
        sas = reference["credential"]["sasUri"]
        own_path = sas.split("/blob/", 1)[1]
        targets = {"same app (/blob prefix)": server.endpoint, "own listener": peer.endpoint}
        latencies: dict[str, dict[str, list[int]]] = {t: {"put": [], "head": []} for t in targets}
        throughput: dict[str, list[float]] = {t: [] for t in targets}
        clients = {t: httpx.Client(timeout=120) for t in targets}
        try:
            for r in range(rounds):
                for target, endpoint in targets.items():
                    url = f"{endpoint}/blob/{own_path}"
                    for kind, values in _series(clients[target], url, count // rounds).items():
                        latencies[target][kind] += values
                    throughput[target].append(_block_upload(clients[target], url, total_mib, f"big-{r}.bin"))
        finally:
            for client in clients.values():
                client.close()
        series = {
            target: {
                "put_4k": summarize_ns(latencies[target]["put"]),
                "head": summarize_ns(latencies[target]["head"]),
                "block_upload_mb_s": sorted(throughput[target])[len(throughput[target]) // 2],
            }
            for target in targets
        }
        same, own = series["same app (/blob prefix)"], series["own listener"]
        return {
            **_results.envelope(NAME, REPO_ROOT),
            "params": {"count": count, "block_upload_mib": total_mib, "rounds": rounds},
            "series": series,
            "ratios": {
                "put_4k_p50_same_over_own": ratio(same["put_4k"]["p50_ms"], own["put_4k"]["p50_ms"]),
                "head_p50_same_over_own": ratio(same["head"]["p50_ms"], own["head"]["p50_ms"]),
                "block_upload_same_over_own": ratio(same["block_upload_mb_s"], own["block_upload_mb_s"]),
            },
        }
    finally:
        if peer is not None:
            peer.stop()
        server.stop()
        shutil.rmtree(home, ignore_errors=True)


def markdown(data: dict[str, Any]) -> str:
    fmt = _results.fmt
    lines = [
        "| target | Put Blob 4 KiB p50 / p99 ms | HEAD p50 / p99 ms | 64 MiB in 4 MiB blocks, MB/s |",
        "|---|---|---|---|",
    ]
    for target, s in data["series"].items():
        lines.append(
            f"| {target} | {fmt(s['put_4k']['p50_ms'])} / {fmt(s['put_4k']['p99_ms'])} | "
            f"{fmt(s['head']['p50_ms'])} / {fmt(s['head']['p99_ms'])} | {fmt(s['block_upload_mb_s'], 0)} |"
        )
    r = data["ratios"]
    lines.append(
        f"\nSame app over own listener: Put Blob p50 ×{fmt(r['put_4k_p50_same_over_own'])}, "
        f"HEAD p50 ×{fmt(r['head_p50_same_over_own'])}, block upload ×{fmt(r['block_upload_same_over_own'])}."
    )
    return "\n".join(lines)


def report(data: dict[str, Any]) -> str:
    return markdown(data)
