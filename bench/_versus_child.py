"""One side of ``bench/versus.py``: ``python -m bench._versus_child NAME OUT.json [--quick]``.

Run by ``versus`` in a fresh interpreter whose ``PYTHONPATH`` starts with the side's ``src`` (and
with ``CLOUDLET_BENCH_SRC`` naming it): the benchmark code is this checkout's, the cloudlet it
imports in-process (the reconciler and store of ``reconcile_store``, the client of
``online_gateway``) and the servers it starts are the side's. Writes the benchmark's JSON to OUT.

Only what is compared is run: ``dispatch`` measures cloudlet alone (its subprocess, Ray and Slurm
peers are the same programs on both sides), ``online_gateway`` skips Ray Serve; ``mixed_load``
keeps its in-run peer (a fixed app, a gauge of the machine's load during each side's windows).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import cloudlet
from bench import _results
from bench._server import REPO_ROOT, source_tree

# Each benchmark is imported only when it runs: one that imports cloudlet's modules in-process
# (reconcile_store) must not stop a base from before a module moved from running the others.

NAMES = ("dispatch", "mixed_load", "online_gateway", "reconcile_store")


def _dispatch_cloudlet_only(quick: bool) -> dict[str, Any]:
    from bench import dispatch

    plan = dispatch.Plan.make(quick)
    data = _results.envelope(dispatch.NAME, REPO_ROOT)
    data["plan"] = plan.__dict__ | {"quick": quick}
    data["peers"] = "not run: versus compares cloudlet with itself at two commits"
    tmp = Path(tempfile.mkdtemp(prefix="cloudlet-bench-dispatch-"))
    try:
        data["cloudlet"] = dispatch._cloudlet(plan, tmp)
        data["loadavg_end"] = _results.loadavg()
        return data
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(name: str, quick: bool) -> dict[str, Any]:
    if name == "dispatch":
        return _dispatch_cloudlet_only(quick)
    if name == "mixed_load":
        from bench import mixed_load

        return mixed_load.run(quick)
    if name == "online_gateway":
        # A named interpreter that does not exist: ray_serve_python() answers "not measured" at once.
        os.environ["BENCH_RAY_SERVE_PYTHON"] = "/nonexistent/versus-skips-ray-serve/python"
        from bench import online_gateway

        return online_gateway.run(quick)
    if name == "reconcile_store":
        from bench import reconcile_store

        return reconcile_store.run(quick)
    raise SystemExit(f"unknown benchmark {name!r}; one of {', '.join(NAMES)}")


def main(argv: list[str]) -> int:
    name, out = argv[0], Path(argv[1])
    quick = "--quick" in argv[2:]
    began = time.monotonic()
    data = run(name, quick)
    data["versus"] = {
        "src": str(source_tree()),
        "cloudlet_imported_from": str(Path(cloudlet.__file__).resolve().parent),
        "wall_s": round(time.monotonic() - began, 1),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(_results._clean(data), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
