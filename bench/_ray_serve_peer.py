"""Ray Serve peer for the ``online_gateway`` benchmark; runs under a separate interpreter that has
``ray[serve]`` and scikit-learn installed (see ``online_gateway.ray_serve_python``).

``PYTHON bench/_ray_serve_peer.py READY.json --deadline S``

Starts Ray locally (``ray.init``, its own temp dir) and Ray Serve's HTTP proxy on 127.0.0.1 on a
free port, deploys one replica that loads the same sklearn model the cloudlet replicas serve
(``LogisticRegression`` on the same rows, trained here with this interpreter's scikit-learn so no
pickle crosses versions) and answers ``POST /score`` with ``model.predict(data)``, and one replica
of the trivial model (``POST /echo``: the request and a version, as the bench's ``score.py``).
Each deployment's ``serve.run`` → first 200 answer is timed (deploy → first answer), and the echo
one is updated to version 2 and timed until 20 answers in a row are version 2's (update → all
traffic on the new version). Writes ``{"url": ..., "echo_url": ..., "deploy_s": ...}`` (or
``{"error": ...}``) to READY.json, then serves until stdin closes or the deadline passes, and
shuts Ray down. The caller measures with its own client, the one it uses for
cloudlet's gateway. Never imports cloudlet.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _answer(url: str, body: bytes) -> Any:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())
    except OSError:
        return None


def _until(url: str, body: bytes, accept: Any, in_a_row: int = 1, deadline_s: float = 300) -> None:
    seen, deadline = 0, time.monotonic() + deadline_s
    while seen < in_a_row:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} did not answer as expected within {deadline_s} s")
        answer = _answer(url, body)
        seen = seen + 1 if answer is not None and accept(answer) else 0
        if not seen:
            time.sleep(0.02)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("ready")
    parser.add_argument("--deadline", type=float, default=600.0)
    args = parser.parse_args()
    ready = Path(args.ready)
    try:
        import joblib
        import ray
        from ray import serve
        from sklearn.linear_model import LogisticRegression
        from starlette.requests import Request

        tmp = Path(tempfile.mkdtemp(prefix="ray-serve-bench-"))
        model_path = tmp / "model.pkl"
        joblib.dump(LogisticRegression().fit([[0, 0], [1, 1], [5, 5], [6, 6]], [0, 0, 1, 1]), model_path)
        port = _free_port()
        ray.init(num_cpus=2, include_dashboard=False, _temp_dir=str(tmp / "ray"))
        serve.start(http_options={"host": HOST, "port": port})

        @serve.deployment(num_replicas=1, max_ongoing_requests=64)
        class Scorer:
            def __init__(self, path: str) -> None:
                self.model = joblib.load(path)

            async def __call__(self, request: Request) -> Any:
                body = await request.json()
                return self.model.predict(body["data"]).tolist()

        @serve.deployment(num_replicas=1, max_ongoing_requests=64)
        class Echo:
            def __init__(self, version: str) -> None:
                self.version = version

            async def __call__(self, request: Request) -> Any:
                return {"version": self.version, "data": await request.json()}

        url, echo_url = f"http://{HOST}:{port}/score", f"http://{HOST}:{port}/echo"
        body = json.dumps({"data": [[0, 0], [6, 6]]}).encode()
        timings: dict[str, float] = {}
        started = time.perf_counter()
        serve.run(Scorer.bind(str(model_path)), name="sklearn", route_prefix="/score")  # type: ignore[attr-defined]
        _until(url, body, lambda a: a == [0, 1])
        timings["deploy_to_first_answer_s_sklearn"] = time.perf_counter() - started
        started = time.perf_counter()
        serve.run(Echo.bind("1"), name="echo", route_prefix="/echo")  # type: ignore[attr-defined]
        _until(echo_url, body, lambda a: a.get("version") == "1")
        timings["deploy_to_first_answer_s_echo"] = time.perf_counter() - started
        started = time.perf_counter()
        serve.run(Echo.bind("2"), name="echo", route_prefix="/echo")  # type: ignore[attr-defined]
        _until(echo_url, body, lambda a: a.get("version") == "2", in_a_row=20)
        timings["update_to_all_traffic_s"] = time.perf_counter() - started
        ready.write_text(
            json.dumps(
                {
                    "url": url,
                    "echo_url": echo_url,
                    "ray": ray.__version__,
                    **{k: round(v, 3) for k, v in timings.items()},
                }
            )
        )
    except Exception:
        ready.write_text(json.dumps({"error": traceback.format_exc()[-2000:]}))
        return 1
    done = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()
        done.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    done.wait(args.deadline)
    try:
        serve.shutdown()
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
