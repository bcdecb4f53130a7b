"""``type: parallel`` pipeline steps (domain.jobs.pipeline_parallel) and the batch driver that runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs.job_spec import parse_job
from cloudlet.domain.jobs.pipeline_dag import FAKE_PATH, child_doc, reuse_key
from cloudlet.domain.jobs.pipeline_jobs import PIPELINE
from cloudlet.nodekit import batch_driver

CODE = "codes/" + "c" * 64


def pipeline(**changes: Any) -> dict[str, Any]:
    """Azure's mnist parallel sample's shape (cli/jobs/parallel/3a_mnist_batch_identification)."""
    step: dict[str, Any] = {
        "type": "parallel",
        "inputs": {
            "job_data_path": {"type": "uri_folder", "path": "${{parent.jobs.prep.outputs.images}}"},
            "score_model": {"type": "uri_folder", "path": "azureml://datastores/d/paths/model/"},
        },
        "outputs": {
            "job_output_file": {
                "type": "uri_file",
                "path": "azureml://datastores/${{default_datastore}}/paths/${{name}}/aggregated.csv",
            }
        },
        "mini_batch_size": "5",
        "resources": {"instance_count": 2},
        "mini_batch_error_threshold": 5,
        "logging_level": "DEBUG",
        "input_data": "${{inputs.job_data_path}}",
        "max_concurrency_per_instance": 2,
        "retry_settings": {"max_retries": 2, "timeout": 60},
        "environment_variables": {"AZUREML_PARALLEL_EXAMPLE": "3a_yaml"},
        "task": {
            "type": "run_function",
            "code": CODE,
            "entry_script": "digits.py",
            "program_arguments": "--model ${{inputs.score_model}}\n--extra 1",
            "append_row_to": "${{outputs.job_output_file}}",
        },
    }
    step.update(changes)
    prep = {"command": "true", "outputs": {"images": None}}
    return {
        "type": "pipeline",
        "settings": {"default_compute": "cpu-cluster"},
        "jobs": {"prep": prep, "p": step},
    }


def test_the_sample_shape_runs_as_a_driver_command_job() -> None:
    doc = PIPELINE.parse(pipeline(), "run1")
    job = child_doc(doc, "p", {"prep": {"images": FAKE_PATH}})
    parse_job(job, "run1-p")  # a valid command job
    assert job["code"] == CODE and job["compute"] == "cpu-cluster"
    assert job["environment_variables"] == {"AZUREML_PARALLEL_EXAMPLE": "3a_yaml"}
    assert job["inputs"]["job_data_path"]["path"] == FAKE_PATH
    assert job["outputs"]["job_output_file"]["path"].endswith("/paths/run1-p/aggregated.csv")
    command = job["command"]
    assert command.startswith("python _cloudlet_batch_driver.py --input ${{inputs.job_data_path}} ")
    for part in (
        "--scoring-script digits.py",
        "--mini-batch-size 5",
        "--max-concurrency 2",
        "--max-retries 2 --timeout 60",
        "--mini-batch-error-threshold 5",
        "--logging-level debug",
        "--append-row-to ${{outputs.job_output_file}}",
    ):
        assert part in command, command
    assert command.endswith(" -- --model ${{inputs.score_model}} --extra 1"), command
    assert job["resources"] == {"instance_count": 1}
    assert PIPELINE.parse(doc, "run1") == doc  # the stored form parses to itself
    assert reuse_key(doc, "p", job) is not None


def test_without_append_row_to_the_driver_keeps_a_summary_only() -> None:
    task = {**pipeline()["jobs"]["p"]["task"]}
    del task["append_row_to"]
    doc = PIPELINE.parse(pipeline(task=task), "run1")
    assert "--output-action summary_only" in child_doc(doc, "p", {"prep": {"images": FAKE_PATH}})["command"]


@pytest.mark.parametrize(
    ("changes", "target", "words"),
    [
        ({"input_data": "${{inputs.nope}}"}, "jobs.p.input_data", "no input 'nope'"),
        ({"input_data": "./data"}, "jobs.p.input_data", "${{inputs.<name>}}"),
        ({"mini_batch_size": "10kb"}, "jobs.p.mini_batch_size", "mltable"),
        ({"mini_batch_size": 0}, "jobs.p.mini_batch_size", "at least 1"),
        ({"partition_keys": ["Store"]}, "jobs.p.partition_keys", "partitioned"),
        ({"retry_settings": {"tries": 1}}, "jobs.p.retry_settings.tries", "max_retries"),
        ({"logging_level": "loud"}, "jobs.p.logging_level", "debug"),
        ({"max_concurrency_per_instance": 0}, "jobs.p.max_concurrency_per_instance", "at least 1"),
        ({"task": {"type": "run_function", "entry_script": "a.py"}}, "jobs.p.task.code", "needs 'code'"),
        ({"task": {"code": CODE, "entry_script": "../a.py"}}, "jobs.p.task.entry_script", ".py file"),
        ({"task": {"code": CODE, "entry_script": "a.py", "x": 1}}, "jobs.p.task.x", "not a task field"),
        (
            {"task": {"code": CODE, "entry_script": "a.py", "append_row_to": "${{outputs.none}}"}},
            "jobs.p.task.append_row_to",
            "no output 'none'",
        ),
    ],
)
def test_bad_parallel_steps_are_refused_naming_the_field(
    changes: dict[str, Any], target: str, words: str
) -> None:
    with pytest.raises(CloudletError) as info:
        PIPELINE.parse(pipeline(**changes), "run1")
    assert info.value.target == target, info.value
    assert words in info.value.message, info.value.message


def test_an_mltable_input_data_is_refused_naming_its_type() -> None:
    inputs = {"rows": {"type": "mltable", "path": "azureml://datastores/d/paths/t/"}}
    with pytest.raises(CloudletError) as info:
        PIPELINE.parse(pipeline(inputs=inputs, input_data="${{inputs.rows}}"), "run1")
    assert info.value.target == "jobs.p.inputs.rows.type"


SCRIPT = """
import argparse, os
def init():
    global prefix
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--prefix")
    args, _ = parser.parse_known_args()
    prefix = args.prefix
def run(mini_batch):
    if any(os.path.basename(f) == "bad.txt" for f in mini_batch):
        raise ValueError("bad file")
    return [f"{prefix}:{os.path.basename(f)}" for f in mini_batch]
"""


def _drive(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "score.py").write_text(SCRIPT)
    command = [sys.executable, batch_driver.__file__, "--input", str(tmp_path / "in")]
    command += ["--scoring-script", str(tmp_path / "score.py"), "--mini-batch-size", "2"]
    command += ["--max-retries", "0", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tmp_path)


def test_the_driver_gives_program_arguments_to_init_and_appends_rows_to_a_file(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    for name in ("a.txt", "b.txt", "c.txt"):
        (tmp_path / "in" / name).write_text(name)
    target = tmp_path / "out" / "rows.csv"
    done = _drive(tmp_path, "--append-row-to", str(target), "--", "--prefix", "P")
    assert done.returncode == 0, done.stderr
    assert target.read_text().split() == ["P:a.txt", "P:b.txt", "P:c.txt"]
    folder = tmp_path / "folder"
    folder.mkdir()
    done = _drive(
        tmp_path, "--append-row-to", str(folder), "--output-file-name", "x.txt", "--", "--prefix", "Q"
    )
    assert done.returncode == 0, done.stderr
    assert (folder / "x.txt").read_text().split() == ["Q:a.txt", "Q:b.txt", "Q:c.txt"]


def test_the_driver_stops_past_the_mini_batch_error_threshold(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    for name in ("a.txt", "bad.txt", "c.txt", "d.txt"):
        (tmp_path / "in" / name).write_text(name)
    within = _drive(tmp_path, "--mini-batch-error-threshold", "1", "--output-action", "summary_only")
    assert within.returncode == 0, within.stderr
    past = _drive(tmp_path, "--mini-batch-error-threshold", "0", "--output-action", "summary_only")
    assert past.returncode == batch_driver.THRESHOLD_EXIT, past.stderr
    assert "mini_batch_error_threshold exceeded" in past.stderr
