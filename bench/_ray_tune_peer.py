"""Ray Tune peer for the ``sweep_trials`` benchmark; runs under a separate interpreter with
``ray[tune]`` (and ``mlflow-skinny``) installed.

``PYTHON bench/_ray_tune_peer.py OUT.json --trials N --concurrent C --python PY --trial-code CODE``

Runs the same sweep twice on a local Ray (``ray.init(num_cpus=C)``: C one-CPU slots, as cloudlet's
C nodes run one trial each), each ``tune.Tuner(...).fit()`` timed from the call to its return:

* ``function``: Tune's own way, the trial a function trainable in a Ray worker that reports its
  metric with ``tune.report`` (no process per trial: the fastest a Tune trial can be);
* ``subprocess``: the trial runs the very command cloudlet's trials run (``PY -c CODE x``: a new
  Python that imports MLflow and logs its metric to a local file store), then reports it.

Random search over ``x ~ uniform(0, 1)``, ``num_samples=N``, ``max_concurrent_trials=C``, the
default result loggers. Writes a JSON document to OUT.json; never imports cloudlet.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any


def _sweep(tune: Any, trainable: Any, trials: int, concurrent: int, storage: str) -> dict[str, Any]:
    run_config = getattr(tune, "RunConfig", None)
    if run_config is None:  # older Ray
        from ray.train import RunConfig as run_config
    tuner = tune.Tuner(
        trainable,
        param_space={"x": tune.uniform(0.0, 1.0)},
        tune_config=tune.TuneConfig(
            num_samples=trials, max_concurrent_trials=concurrent, metric="loss", mode="min"
        ),
        run_config=run_config(storage_path=storage, verbose=0),
    )
    began = time.perf_counter()
    results = tuner.fit()
    elapsed = time.perf_counter() - began
    best = results.get_best_result()
    errors = sum(1 for result in results if result.error is not None)
    return {
        "trials": len(results),
        "errors": errors,
        "seconds": elapsed,
        "trials_per_s": len(results) / elapsed,
        "best_loss": float(best.metrics["loss"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--concurrent", type=int, default=2)
    parser.add_argument("--python", required=True, help="the interpreter cloudlet's trials run")
    parser.add_argument("--trial-code", required=True, help="the -c program cloudlet's trials run")
    args = parser.parse_args()
    out: dict[str, Any] = {"trials": args.trials, "concurrent": args.concurrent}
    try:
        import ray
        from ray import tune

        out["ray_version"] = ray.__version__
        report = getattr(tune, "report", None) or ray.train.report
        tmp = tempfile.mkdtemp(prefix="cloudlet-bench-tune-")
        # The subprocess trials log to a local MLflow file store (cheaper than cloudlet's HTTP endpoint).
        os.environ["MLFLOW_TRACKING_URI"] = f"file://{tmp}/mlruns"
        os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"

        def function_trial(config: dict[str, Any]) -> None:
            report({"loss": (config["x"] - 0.3) ** 2})

        def subprocess_trial(config: dict[str, Any]) -> None:
            subprocess.run([args.python, "-c", args.trial_code, repr(config["x"])], check=True)
            report({"loss": (config["x"] - 0.3) ** 2})

        began = time.perf_counter()
        ray.init(num_cpus=args.concurrent, include_dashboard=False, log_to_driver=False)
        out["ray_init_s"] = time.perf_counter() - began
        try:
            for name, trainable in (("function", function_trial), ("subprocess", subprocess_trial)):
                print(f"   ray tune: {name} trials ...", flush=True)
                out[name] = _sweep(tune, trainable, args.trials, args.concurrent, f"{tmp}/{name}")
        finally:
            ray.shutdown()
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["traceback"] = traceback.format_exc()[-4000:]
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=2)
    return 1 if "error" in out else 0


if __name__ == "__main__":
    sys.exit(main())
