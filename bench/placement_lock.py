"""How long placing one large attempt holds the store's write lock (issue 24, defect 1): the cluster
pass placing a 256-task TensorFlow job and a 1,024-process PyTorch job on 4 idle nodes, with the
run specs built before the lock (now) and inside it (as before: ``--inline``). Real SQLite store.

    .venv/bin/python -m bench.placement_lock [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import update
from tests.unit.control_fakes import new_store
from tests.unit.test_prepared_specs import (
    TF_256,
    Store,
    idle_cluster,
    queue_job,
    reconciler_of,
    time_the_write_lock,
    watch_builds,
)

from cloudlet.domain.compute.nodes import NodeState
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.jobs import run_specs
from cloudlet.store.schema import Node

SHAPES = {
    "tf-256-tasks": TF_256,
    "pytorch-1024-processes": {"type": "pytorch", "process_count_per_instance": 256},
}


def _one(tmp: Path, distribution: dict[str, Any], inline: bool) -> tuple[float, float]:
    """The longest write hold of the pass that places the job, after a warm-up pass that placed
    a one-process job (its queries compiled)."""
    sessions, installation_id = new_store(tmp / "home")
    store = Store(sessions, installation_id, DataRoot(tmp / "data"))
    time_the_write_lock(store)
    real = run_specs.run_specs
    run_specs.run_specs = watch_builds(store, real)  # type: ignore[assignment]
    idle_cluster(store)
    reconciler = reconciler_of(store)
    if inline:  # nothing prepared: the pass builds inside its transaction, as before
        reconciler._prepare = lambda compute_id: {}  # type: ignore[method-assign]
    try:
        queue_job(store, {"type": "pytorch", "process_count_per_instance": 1}, "warm-up")
        reconciler.run_once(time.time())
        with store.sessions.begin() as session:  # the warm-up's nodes are idle again
            session.execute(update(Node).values(state=NodeState.IDLE.value, current_run=None))
        queue_job(store, distribution)
        store.holds_s.clear()
        reconciler.run_once(time.time())
    finally:
        reconciler.stop()
        run_specs.run_specs = real  # type: ignore[assignment]
    return max(store.holds_s), sum(seconds for _, seconds in store.builds[1:])  # [0]: the warm-up's


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for shape, distribution in SHAPES.items():
        for inline in (True, False):
            holds, builds = [], []
            for _ in range(args.repeat):
                with tempfile.TemporaryDirectory() as tmp:
                    hold, build = _one(Path(tmp), distribution, inline)
                    holds.append(hold)
                    builds.append(build)
            label = "built inside the lock (before)" if inline else "built before the lock (after)"
            print(
                f"{shape}: {label}: longest write hold median {statistics.median(holds) * 1000:.0f} ms, "
                f"build {statistics.median(builds) * 1000:.0f} ms"
            )


if __name__ == "__main__":
    main()
