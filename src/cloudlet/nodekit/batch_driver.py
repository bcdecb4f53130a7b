"""cloudlet's batch scoring driver: the command of a batch endpoint invocation's ``score`` child.

Standard library only (it runs in the deployment's environment beside the scoring script, which
brings its own imports); the server copies it into the child's code snapshot as
``_cloudlet_batch_driver.py``. It lists the input's files (a folder, recursively, in name order,
or one file), splits them into mini-batches of ``--mini-batch-size`` files, and runs them on
``--max-concurrency`` worker processes, each of which imports the scoring script and calls its
``init()`` once, then ``run(mini_batch)`` (a list of file paths) per mini-batch; the model input
lies under ``AZUREML_MODEL_DIR`` by its folder's name, as on Azure. A mini-batch that
raises or runs past ``--timeout`` seconds is retried up to ``--max-retries`` times; one that still
fails counts its files against ``--error-threshold`` (-1: ignore failures), past which the driver
stops with exit code 3; likewise more than ``--mini-batch-error-threshold`` failed mini-batches.
With ``append_row`` the rows ``run()`` returned (a list, or a DataFrame: one line per row, values
joined by spaces) are written in mini-batch order to ``--output-file-name`` in ``--output``, or to
``--append-row-to`` (a file, or a folder that gets ``--output-file-name``); ``summary_only``
writes none.

What follows ``--`` is the entry script's own command line (a pipeline's ``parallel`` step's
``program_arguments``): ``sys.argv`` of every worker, which ``init()`` may parse.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import os
import sys
import tempfile
import time
import traceback
from multiprocessing.pool import AsyncResult
from typing import Any

THRESHOLD_EXIT = 3  # domain.endpoints.batch_endpoints.THRESHOLD_EXIT
_run: Any = None


def _init_worker(script: str) -> None:
    """Import the scoring script and call its ``init()``: once per worker process."""
    global _run
    folder = os.path.dirname(os.path.abspath(script))
    sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location("score_script", script)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot import the scoring script {script}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if hasattr(module, "init"):
        module.init()
    if not hasattr(module, "run"):
        raise SystemExit(f"the scoring script {script} defines no run(mini_batch)")
    _run = module.run


def _rows(result: Any) -> list[str]:
    if result is None:
        return []
    if hasattr(result, "itertuples"):  # a pandas DataFrame
        return [" ".join(str(v) for v in row) for row in result.itertuples(index=False)]
    lines = []
    for item in result:
        if isinstance(item, (list, tuple)):
            lines.append(" ".join(str(v) for v in item))
        else:
            lines.append(str(item))
    return lines


def _score(batch: list[str]) -> list[str]:
    return _rows(_run(list(batch)))


def input_files(path: str) -> list[str]:
    if os.path.isfile(path):
        return [path]
    found = []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [os.path.join(root, f) for f in files if not f.startswith(".")]
    return sorted(found)


def mini_batches(files: list[str], size: int) -> list[list[str]]:
    return [files[i : i + size] for i in range(0, len(files), size)]


def model_root(model: str) -> str:
    """AZUREML_MODEL_DIR as Azure lays it out: a folder holding the model's folder (or file) by
    its name (``glob(AZUREML_MODEL_DIR + "/*/")``), here a link to the model input."""
    path = os.path.abspath(model.rstrip("/"))
    root = tempfile.mkdtemp(prefix="azureml-models-")
    os.symlink(path, os.path.join(root, os.path.basename(path) or "model"))
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="batch_driver")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output")
    parser.add_argument("--append-row-to")
    parser.add_argument("--scoring-script", required=True)
    parser.add_argument("--mini-batch-size", type=int, default=10)
    parser.add_argument("--max-concurrency", type=int, default=1)
    parser.add_argument("--max-retries", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--error-threshold", type=int, default=-1)
    parser.add_argument("--mini-batch-error-threshold", type=int, default=-1)
    parser.add_argument("--output-action", choices=("append_row", "summary_only"), default="append_row")
    parser.add_argument("--output-file-name", default="predictions.csv")
    parser.add_argument("--logging-level", default="info")
    parser.add_argument("--model-dir")
    argv = sys.argv[1:] if argv is None else argv
    own, program = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    args = parser.parse_args(own)
    # The workers are spawned: each starts with this sys.argv, the entry script's command line.
    sys.argv = [os.path.abspath(args.scoring_script), *program]
    if args.model_dir:
        os.environ["AZUREML_MODEL_DIR"] = model_root(args.model_dir)
    batches = mini_batches(input_files(args.input), args.mini_batch_size)
    print(f"batch driver: {len(batches)} mini-batches on {args.max_concurrency} processes", flush=True)
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: init() in each worker
    pool = context.Pool(args.max_concurrency, initializer=_init_worker, initargs=(args.scoring_script,))
    results: dict[int, list[str]] = {}
    failed: dict[int, str] = {}
    try:
        attempts = dict.fromkeys(range(len(batches)), 0)
        pending: dict[int, tuple[AsyncResult[list[str]], float]] = {}
        for index, batch in enumerate(batches):
            pending[index] = (pool.apply_async(_score, (batch,)), time.monotonic())
        while pending:
            for index in list(pending):
                handle, started = pending[index]
                error: str | None = None
                if handle.ready():
                    try:
                        results[index] = handle.get()
                    except Exception as exc:  # the scoring script's own error
                        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
                elif time.monotonic() - started > args.timeout:
                    error = f"run() took longer than the retry timeout ({args.timeout:g} s)"
                else:
                    continue
                del pending[index]
                if error is None:
                    continue
                attempts[index] += 1
                tries = f"attempt {attempts[index]} of {args.max_retries + 1}"
                if attempts[index] <= args.max_retries:
                    print(f"mini-batch {index} failed ({tries}), retrying: {error}", flush=True)
                    pending[index] = (pool.apply_async(_score, (batches[index],)), time.monotonic())
                else:
                    print(f"mini-batch {index} failed ({tries}), giving up: {error}", flush=True)
                    failed[index] = error
            time.sleep(0.01)
    finally:
        pool.terminate()
    failed_files = sum(len(batches[i]) for i in failed)
    rows = [row for index in sorted(results) for row in results[index]]
    target = row_file(args)
    if target is not None:
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        with open(target, "w", encoding="utf-8") as out:
            out.writelines(f"{row}\n" for row in rows)
    print(
        f"batch driver: {len(results)} mini-batches scored, {len(failed)} failed ({failed_files} files), "
        f"{len(rows)} rows",
        flush=True,
    )
    if args.error_threshold != -1 and failed_files > args.error_threshold:
        print(
            f"error_threshold exceeded: {failed_files} files failed in mini-batches "
            f"{sorted(failed)}, error_threshold is {args.error_threshold}",
            file=sys.stderr,
            flush=True,
        )
        return THRESHOLD_EXIT
    if args.mini_batch_error_threshold != -1 and len(failed) > args.mini_batch_error_threshold:
        print(
            f"mini_batch_error_threshold exceeded: mini-batches {sorted(failed)} failed, "
            f"mini_batch_error_threshold is {args.mini_batch_error_threshold}",
            file=sys.stderr,
            flush=True,
        )
        return THRESHOLD_EXIT
    return 0


def row_file(args: argparse.Namespace) -> str | None:
    """Where the rows go: ``--append-row-to`` (a folder, existing or ending in '/', gets
    ``--output-file-name``), else ``--output-file-name`` in ``--output``; None for summary_only."""
    if args.output_action != "append_row":
        return None
    if args.append_row_to:
        path = str(args.append_row_to)
        if path.endswith("/") or os.path.isdir(path):
            return os.path.join(path, args.output_file_name)
        return path
    if not args.output:
        return None
    return os.path.join(args.output, args.output_file_name)


if __name__ == "__main__":
    sys.exit(main())
