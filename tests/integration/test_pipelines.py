"""Acceptance: pipeline jobs (issue 13, item 1) on a real server, real agents and real processes.

Azure ML's example shapes (tests/data/pipelines) run to Completed as written; one step's output
arrives as the next step's input; a four-step pipeline runs on a cluster, an instance, serverless
and local; a rerun reuses every unchanged step (job show says so); a failing step fails the
pipeline with its error; cancelling the pipeline cancels its running step within 2 s. One server,
one warm cluster and one instance for the module; commands are one-liners.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import RunningServer
from tests.instance_helpers import create_instance
from tests.jobs_helpers import create_compute, job, log_text, served, submit, wait_job, wait_until

DATA = Path(__file__).resolve().parents[1] / "data" / "pipelines"
CLUSTER = "cpu-cluster"
INSTANCE = "ci-pipes"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "pipelines", extra_env={"CLOUDLET_INSTANCE_APPS": ""})


@pytest.fixture(scope="module")
def api(srv: RunningServer) -> Iterator[httpx.Client]:
    with srv.client() as client:
        body = {
            "type": "amlcompute",
            "size": "Standard_DS3_v2",
            "min_instances": 0,
            "max_instances": 2,
            "idle_time_before_scale_down": 120,  # stays warm for the module
        }
        create_compute(client, srv, CLUSTER, body)
        yield client


def cli(srv: RunningServer, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cloudlet", *args],
        env={**srv.cli_env(), "CLOUDLET_OUTPUT": "table"},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def children(api: httpx.Client, srv: RunningServer, parent: str) -> dict[str, dict[str, Any]]:
    return {c["key"]: c for c in job(api, srv, parent)["children"]}


def datastore(srv: RunningServer, relative: str) -> Path:
    return srv.home / "data" / "workspaces" / "1" / "datastores" / "workspaceblobstore" / relative


def run_pipeline(
    api: httpx.Client, srv: RunningServer, name: str, doc: dict[str, Any], timeout: float = 120
) -> dict[str, Any]:
    submit(api, srv, name, doc)
    return wait_job(api, srv, name, timeout=timeout)


# ----------------------------------------------------------------------------------------------


def test_every_azure_example_shape_runs_to_completed(api: httpx.Client, srv: RunningServer) -> None:
    examples = sorted(DATA.glob("*.yml"))
    names = {p.stem.replace("hello-pipeline", "ex"): yaml.safe_load(p.read_text()) for p in examples}
    with ThreadPoolExecutor(4) as pool:
        done = dict(
            zip(names, pool.map(lambda n: run_pipeline(api, srv, n, names[n], 180), names), strict=True)
        )
    failed = {
        n: (d["status"], d.get("status_message")) for n, d in done.items() if d["status"] != "Completed"
    }
    assert not failed, failed
    for name, doc in names.items():
        steps = children(api, srv, name)
        assert set(steps) == set(doc["jobs"]), steps
        assert all(s["status"] == "Completed" for s in steps.values()), steps

    # Each twin pair differs only in compute, which reuse ignores (as on Azure ML): of two run at
    # once, the one finished second may reuse the other's step, whose outputs (and ${{name}}, and
    # log) are then the step's. ran() names the job that ran a step.
    def ran(pipeline: str, step: str) -> str:
        return children(api, srv, pipeline)[step]["reused_from"] or f"{pipeline}-{step}"

    # -io: the file hello_job wrote is what world_job read.
    assert "world" in log_text(api, srv, ran("ex-io", "world_job"))
    assert "world" in log_text(api, srv, ran("ex-io-serverless", "world_job"))
    # -abc: a got the pipeline's input; c got b's output folder.
    assert "hello hello world" in log_text(api, srv, ran("ex-abc", "a"))
    c_read = log_text(api, srv, ran("ex-abc", "c")).strip()
    assert re.search(r"azureml/ex-abc(-serverless)?-b/world_output/world\.txt$", c_read), c_read
    if ran("ex-abc", "c") == "ex-abc-c":
        assert c_read.endswith(f"azureml/{ran('ex-abc', 'b')}/world_output/world.txt"), c_read
    # -customize-output-file/-folder: written where ${{name}} says (the name of the step's job).
    for name in ("ex-customize-output-file", "ex-customize-output-file-serverless"):
        step = children(api, srv, name)["hello_world"]
        made = ran(name, "hello_world")
        assert datastore(srv, f"{made}/hello_world.txt").read_text().strip() == "world"
        shown = job(api, srv, name)
        reused = " (1 reused)" if step["reused_from"] else ""
        assert shown["status_message"] == f"1 of 1 steps completed{reused}"
        uri = f"azureml://datastores/workspaceblobstore/paths/{made}/hello_world.txt"
        assert shown["outputs"]["output"]["uri"] == uri  # the pipeline's output: its step's
    made = ran("ex-customize-output-file", "hello_world")
    packed = api.get(f"{srv.ws_path}/jobs/{made}/outputs/output")
    assert packed.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(packed.content)) as archive:  # the file its path names
        assert archive.getnames() == ["hello_world.txt"]
    made = ran("ex-customize-output-folder", "hello_world")
    assert datastore(srv, f"{made}/hello_world-folder.txt").read_text().strip() == "world"

    # The serverless twins ran without a compute (serverless), the others on the cluster.
    def ran_on(name: str) -> set[str]:
        return {s["compute"] for s in children(api, srv, name).values() if not s["reused_from"]}

    assert ran_on("ex-serverless") <= {"serverless"} and ran_on("ex") <= {CLUSTER}
    assert ran_on("ex-serverless") | ran_on("ex"), "neither twin ran its step"


def _abc_with_components(folder: Path) -> Path:
    """The -abc shape with components from files (``component: ./a.yml``) and local code."""
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "make.py").write_text(
        "import sys, pathlib\npathlib.Path(sys.argv[2], 'msg.txt').write_text(sys.argv[1] + ' from b')\n"
    )
    component = {"type": "command", "code": "./src", "environment": {"image": "python"}}
    (folder / "b.yml").write_text(
        yaml.safe_dump(
            {
                **component,
                "name": "make_message",
                "version": "1",
                "inputs": {"text": {"type": "string"}},
                "outputs": {"out": {"type": "uri_folder"}},
                "command": "python make.py '${{inputs.text}}' ${{outputs.out}}",
            }
        )
    )
    (folder / "c.yml").write_text(
        yaml.safe_dump(
            {
                "type": "command",
                "name": "show_message",
                "inputs": {"msg": {"type": "uri_folder"}},
                "command": "cat ${{inputs.msg}}/msg.txt",
            }
        )
    )
    pipeline = {
        "$schema": "https://azuremlschemas.azureedge.net/latest/pipelineJob.schema.json",
        "type": "pipeline",
        "display_name": "hello_pipeline_abc_components",
        "settings": {"default_compute": f"azureml:{CLUSTER}"},
        "inputs": {"hello_string_top_level_input": "hello world"},
        "jobs": {
            "a": {
                "command": "echo hello ${{inputs.hello_string}}",
                "inputs": {"hello_string": "${{parent.inputs.hello_string_top_level_input}}"},
            },
            "b": {
                "component": "./b.yml",
                "inputs": {"text": "${{parent.inputs.hello_string_top_level_input}}"},
            },
            "c": {"component": "file:./c.yml", "inputs": {"msg": "${{parent.jobs.b.outputs.out}}"}},
        },
    }
    path = folder / "pipeline.yml"
    path.write_text(yaml.safe_dump(pipeline))
    return path


def test_cli_runs_components_from_files_and_a_rerun_reuses_every_step(
    api: httpx.Client, srv: RunningServer, tmp_path: Path
) -> None:
    path = _abc_with_components(tmp_path / "abc")
    made = cli(srv, "-o", "json", "job", "create", "--file", str(path), "--name", "abc1", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "uploaded" in made.stderr  # b's code folder
    first = wait_job(api, srv, "abc1", timeout=120)
    assert first["status"] == "Completed", first
    assert log_text(api, srv, "abc1-c").strip() == "hello world from b"
    streamed = cli(srv, "job", "stream", "-n", "abc1")  # the steps' logs, one after another
    assert streamed.returncode == 0, streamed.stderr
    assert "--- step c (job abc1-c) ---\nhello world from b" in streamed.stdout, streamed.stdout
    assert streamed.stdout.rstrip().splitlines()[-1].startswith("Job abc1 Completed")
    again = cli(srv, "-o", "json", "job", "create", "--file", str(path), "--name", "abc2", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    second = wait_job(api, srv, "abc2", timeout=60)
    assert second["status"] == "Completed", second
    steps = children(api, srv, "abc2")
    # a is -abc's own step: abc1 may already have reused it (from whichever ran it first)
    assert {k: s["reused_from"] for k, s in steps.items() if k != "a"} == {"b": "abc1-b", "c": "abc1-c"}
    assert steps["a"]["reused_from"] in ("abc1-a", "ex-abc-a", "ex-abc-serverless-a"), steps["a"]
    assert second["status_message"] == "3 of 3 steps completed (3 reused)"
    got = cli(srv, "job", "download", "-n", "abc2-b", "--output-name", "out", "-p", str(tmp_path / "dl"))
    assert got.returncode == 0, got.stderr  # a reused step's output: the earlier job's files
    assert (tmp_path / "dl" / "named-outputs" / "out" / "msg.txt").read_text() == "hello world from b"
    shown = cli(srv, "job", "show", "-n", "abc2")
    assert shown.returncode == 0, shown.stderr
    dag = shown.stdout.split("steps:", 1)[1]
    assert "c  Completed   ← b" in dag and "(reused abc1-c)" in dag, dag
    listed = cli(srv, "-o", "json", "job", "list", "--parent", "abc2")
    assert sorted(j["name"] for j in yaml.safe_load(listed.stdout)) == ["abc2-a", "abc2-b", "abc2-c"]
    forced = cli(
        srv,
        "-o",
        "json",
        "job",
        "create",
        "--file",
        str(path),
        "--name",
        "abc3",
        "--set",
        "settings.force_rerun=true",
        cwd=tmp_path,
    )
    assert forced.returncode == 0, forced.stderr
    assert wait_job(api, srv, "abc3", timeout=120)["status"] == "Completed"
    assert all(s["reused_from"] is None for s in children(api, srv, "abc3").values())


def test_an_unknown_setting_is_a_warning_and_the_basic_pipeline_runs(
    api: httpx.Client, srv: RunningServer
) -> None:
    # cli/jobs/pipelines-with-components/basics/3a_basic_pipeline: 'default_datestore' (sic).
    path = DATA / "3a_basic_pipeline" / "pipeline.yml"
    made = cli(srv, "job", "create", "--file", str(path), "--name", "basic3a", cwd=path.parent)
    assert made.returncode == 0, made.stderr
    said = made.stdout + made.stderr
    assert "settings.default_datestore: unknown pipeline setting, ignored" in said, said
    assert "did you mean 'default_datastore'?" in said, said
    done = wait_job(api, srv, "basic3a", timeout=120)
    assert done["status"] == "Completed", done
    assert [w.split(":")[0] for w in done["warnings"]] == ["settings.default_datestore"], done
    assert log_text(api, srv, "basic3a-component_c").strip() == "Hello from component C"


def test_a_step_reads_the_previous_steps_default_artifacts(api: httpx.Client, srv: RunningServer) -> None:
    # cli/jobs/basics/hello-pipeline-default-artifacts.yml: hello_job writes ./outputs/world.txt,
    # world_job reads ${{inputs.world_input}}/outputs/world.txt of its 'artifacts' output.
    path = DATA / "hello-pipeline-default-artifacts.yml"
    made = cli(srv, "job", "create", "--file", str(path), "--name", "dart1")
    assert made.returncode == 0, made.stderr
    first = wait_job(api, srv, "dart1", timeout=120)
    assert first["status"] == "Completed", first
    steps = children(api, srv, "dart1")
    hello = steps["hello_job"]["reused_from"] or "dart1-hello_job"  # -default-artifacts may have run it
    assert job(api, srv, hello)["outputs"] == {}  # its artifacts are no output folder of its own
    read = steps["world_job"]["reused_from"] or "dart1-world_job"
    assert log_text(api, srv, read).strip() == "world"
    # Again with another second step: the first is reused, and its artifacts are the earlier run's.
    command = "jobs.world_job.command=cat ${{inputs.world_input}}/outputs/world.txt && echo again"
    again = cli(srv, "job", "create", "--file", str(path), "--name", "dart2", "--set", command)
    assert again.returncode == 0, again.stderr
    assert wait_job(api, srv, "dart2", timeout=120)["status"] == "Completed"
    steps = children(api, srv, "dart2")
    assert steps["hello_job"]["reused_from"] is not None and steps["world_job"]["reused_from"] is None
    assert log_text(api, srv, "dart2-world_job").split() == ["world", "again"]


def test_a_pipeline_component_runs_as_a_step_and_feeds_the_next(
    api: httpx.Client, srv: RunningServer
) -> None:
    # pipeline_with_pipeline_component's shape: data_pipeline (type: pipeline, from its YAML file,
    # two steps of its own) → train_job reads its output; the pipeline's output is train_job's.
    path = DATA / "pipeline_component" / "pipeline.yml"
    made = cli(srv, "job", "create", "--file", str(path), "--name", "pcomp1", cwd=path.parent)
    assert made.returncode == 0, made.stderr
    done = wait_job(api, srv, "pcomp1", timeout=180)
    assert done["status"] == "Completed", done
    steps = children(api, srv, "pcomp1")
    assert set(steps) == {"data_pipeline", "train_job"}, steps
    inner = job(api, srv, steps["data_pipeline"]["name"])  # a pipeline of its own, with its steps
    assert inner["type"] == "pipeline" and inner["status"] == "Completed", inner
    assert {c["key"] for c in inner["children"]} == {"prep_job", "transform_job"}, inner
    train = steps["train_job"]["reused_from"] or steps["train_job"]["name"]
    assert log_text(api, srv, train).split() == ["row", "a,b", "row", "1,2", "row", "3,4", "row", "ratio=0.2"]
    report = job(api, srv, "pcomp1")["outputs"]["pipeline_job_score_report"]["uri"]
    assert report.endswith("/")
    relative = report.split("/paths/", 1)[1]
    assert datastore(srv, relative + "report.txt").read_text().strip() == "4"


def test_a_registered_pipeline_component_runs_as_a_step_by_reference(
    api: httpx.Client, srv: RunningServer, tmp_path: Path
) -> None:
    # `cloudlet component create --file data_pipeline.yml` (type: pipeline) registers it with its
    # steps' component files inlined and code uploaded; a pipeline names it azureml:…@latest.
    folder = DATA / "pipeline_component"
    made = cli(
        srv,
        "-o",
        "json",
        "component",
        "create",
        "--file",
        str(folder / "data_pipeline" / "data_pipeline.yml"),
    )
    assert made.returncode == 0, made.stderr
    shown = cli(srv, "-o", "json", "component", "show", "-n", "data_pipeline", "-v", "1")
    assert shown.returncode == 0 and '"pipeline"' in shown.stdout, shown.stdout + shown.stderr
    doc = yaml.safe_load((folder / "pipeline.yml").read_text())
    doc["jobs"]["data_pipeline"]["component"] = "azureml:data_pipeline@latest"
    doc["settings"]["force_rerun"] = True
    path = tmp_path / "registered.yml"
    path.write_text(yaml.safe_dump(doc))
    for part in ("data", "train_src"):  # the pipeline's own local files, beside it
        subprocess.run(["cp", "-r", str(folder / part), str(tmp_path / part)], check=True)
    made = cli(srv, "job", "create", "--file", str(path), "--name", "pcomp-reg", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    done = wait_job(api, srv, "pcomp-reg", timeout=180)
    assert done["status"] == "Completed", (done.get("status_message"), done.get("error"), done.get("dag"))
    inner = job(api, srv, children(api, srv, "pcomp-reg")["data_pipeline"]["name"])
    assert {c["key"] for c in inner["children"]} == {"prep_job", "transform_job"}, inner
    report = job(api, srv, "pcomp-reg")["outputs"]["pipeline_job_score_report"]["uri"]
    assert datastore(srv, report.split("/paths/", 1)[1] + "report.txt").read_text().strip() == "4"
    bad = dict(doc, jobs={**doc["jobs"], "data_pipeline": {**doc["jobs"]["data_pipeline"]}})
    bad["jobs"]["data_pipeline"]["inputs"] = {**bad["jobs"]["data_pipeline"]["inputs"], "nope": 1}
    bad["jobs"]["train_job"] = {
        "command": "true",
        "inputs": {"d": "${{parent.jobs.data_pipeline.outputs.train_data}}"},
    }
    refused = api.put(f"{srv.ws_path}/jobs/pcomp-refused", json=bad)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["target"] == "jobs.data_pipeline.inputs.nope", refused.text
    bad["jobs"]["data_pipeline"]["component"] = "azureml:make_nothing@latest"
    refused = api.put(f"{srv.ws_path}/jobs/pcomp-refused", json=bad)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["target"] == "jobs.data_pipeline.component", refused.text


def test_a_parallel_step_scores_mini_batches_and_feeds_the_next_step(
    api: httpx.Client, srv: RunningServer
) -> None:
    # cli/jobs/parallel/3a_mnist_batch_identification's shape: prepare_data writes 7 files, the
    # parallel step scores them 3 to a mini-batch with the batch driver (init() reads --model from
    # program_arguments), its rows appended to a uri_file output, which summarize reads.
    path = DATA / "parallel" / "pipeline.yml"
    made = cli(srv, "job", "create", "--file", str(path), "--name", "par1", cwd=path.parent)
    assert made.returncode == 0, made.stderr
    done = wait_job(api, srv, "par1", timeout=180)
    assert done["status"] == "Completed", done
    steps = children(api, srv, "par1")
    assert set(steps) == {"prepare_data", "identify_letters", "summarize"}, steps
    scored = log_text(api, srv, steps["identify_letters"]["reused_from"] or steps["identify_letters"]["name"])
    assert "batch driver: 3 mini-batches on 2 processes" in scored, scored
    assert "AZUREML_PARALLEL_EXAMPLE=3a_yaml" in scored, scored
    rows = [f"{i}.txt: {c}" for i, c in enumerate("ABCDEFG")]
    summary = log_text(api, srv, steps["summarize"]["reused_from"] or steps["summarize"]["name"])
    assert summary.strip().split("\n") == [*rows, "rows=7"], summary
    written = datastore(srv, "par1-identify_letters/aggregated_returns.csv")
    assert written.read_text().splitlines() == rows


def test_a_parallel_step_is_refused_at_submission_naming_the_field(
    api: httpx.Client, srv: RunningServer
) -> None:
    doc = yaml.safe_load((DATA / "parallel" / "pipeline.yml").read_text())
    step = doc["jobs"]["identify_letters"]
    step["task"]["code"] = "codes/" + "0" * 64  # never uploaded
    step["inputs"]["score_model"]["path"] = "azureml://datastores/workspaceblobstore/paths/m/"
    doc["jobs"]["prepare_data"] = {"command": "true", "outputs": {"letters": None}, "compute": CLUSTER}
    refused = api.put(f"{srv.ws_path}/jobs/par-refused", json=doc)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["target"] == "jobs.identify_letters.task.code", refused.text
    step["mini_batch_size"] = "10kb"
    refused = api.put(f"{srv.ws_path}/jobs/par-refused", json=doc)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["target"] == "jobs.identify_letters.mini_batch_size", refused.text
    assert api.get(f"{srv.ws_path}/jobs/par-refused").status_code == 404


def test_four_steps_on_a_cluster_an_instance_serverless_and_local(
    api: httpx.Client, srv: RunningServer
) -> None:
    create_instance(api, srv, INSTANCE, size="Standard_DS2_v2")

    def step(where: str | None, reads: str | None) -> dict[str, Any]:
        copy = "cat ${{inputs.before}}/trail > ${{outputs.trail}}/trail; " if reads else ""
        body: dict[str, Any] = {
            "command": f"{copy}echo {where or 'serverless'} >> ${{{{outputs.trail}}}}/trail",
            "outputs": {"trail": None},
        }
        if where:
            body["compute"] = where
        if reads:
            body["inputs"] = {"before": f"${{{{parent.jobs.{reads}.outputs.trail}}}}"}
        return body

    doc = {
        "type": "pipeline",
        "jobs": {
            "on_cluster": step(f"azureml:{CLUSTER}", None),
            "on_instance": step(f"azureml:{INSTANCE}", "on_cluster"),
            "on_serverless": step(None, "on_instance"),
            "on_local": step("local", "on_serverless"),
        },
    }
    done = run_pipeline(api, srv, "four", doc, timeout=180)
    assert done["status"] == "Completed", done
    steps = children(api, srv, "four")
    assert {k: s["compute"] for k, s in steps.items()} == {
        "on_cluster": CLUSTER,
        "on_instance": INSTANCE,
        "on_serverless": "serverless",
        "on_local": "local",
    }
    trail = datastore(srv, "azureml/four-on_local/trail/trail").read_text().split()
    assert trail == [f"azureml:{CLUSTER}", f"azureml:{INSTANCE}", "serverless", "local"]


def test_a_failing_step_fails_the_pipeline_with_its_error(
    api: httpx.Client, srv: RunningServer, tmp_path: Path
) -> None:
    doc = {
        "type": "pipeline",
        "settings": {"default_compute": CLUSTER},
        "jobs": {
            "bad": {"command": "echo broken >&2; exit 3", "outputs": {"o": None}},
            "after": {"command": "ls ${{inputs.i}}", "inputs": {"i": "${{parent.jobs.bad.outputs.o}}"}},
        },
    }
    (tmp_path / "failing.yml").write_text(yaml.safe_dump(doc))
    streamed = cli(
        srv, "job", "create", "--file", str(tmp_path / "failing.yml"), "--name", "failing", "--stream"
    )
    assert streamed.returncode == 1, streamed.stderr  # followed live, to its end
    assert "--- step bad (job failing-bad) ---\nbroken" in streamed.stdout, streamed.stdout
    done = job(api, srv, "failing")
    assert done["status"] == "Failed"
    assert done["status_message"].startswith("step bad failed: "), done["status_message"]
    assert "3" in done["status_message"]
    assert set(children(api, srv, "failing")) == {"bad"}  # what depends on it never started


def test_cancelling_the_pipeline_cancels_its_running_step_within_2_s(
    api: httpx.Client, srv: RunningServer
) -> None:
    doc = {
        "type": "pipeline",
        "settings": {"default_compute": CLUSTER},
        "jobs": {"slow": {"command": "sleep 120"}, "later": {"command": "sleep 120"}},
    }
    submit(api, srv, "cancelled", doc)
    wait_until(
        lambda: children(api, srv, "cancelled").get("slow", {}).get("status") == "Running",
        60,
        "the slow step to run",
    )
    asked = time.monotonic()
    assert api.post(f"{srv.ws_path}/jobs/cancelled/cancel").status_code in (200, 202)
    wait_until(
        lambda: all(s["status"] == "Canceled" for s in children(api, srv, "cancelled").values()),
        2.0,
        "every step to be Canceled",
        interval=0.05,
    )
    took = time.monotonic() - asked
    assert took <= 2.0, took
    assert wait_job(api, srv, "cancelled", timeout=10)["status"] == "Canceled"


def test_a_named_pipeline_output_is_registered_at_the_path_its_step_wrote(
    api: httpx.Client, srv: RunningServer
) -> None:
    doc = {
        "type": "pipeline",
        "outputs": {
            "report": {
                "type": "uri_folder",
                "name": "pipe_report",
                "version": "1",
                "path": "azureml://datastores/workspaceblobstore/paths/reports/${{name}}/",
            }
        },
        "jobs": {
            "write": {
                "command": "echo done > ${{outputs.out}}/r.txt",
                "compute": f"azureml:{CLUSTER}",
                "outputs": {"out": "${{parent.outputs.report}}"},
            }
        },
    }
    assert run_pipeline(api, srv, "named", doc)["status"] == "Completed"
    asset = api.get(f"{srv.ws_path}/data/pipe_report/versions/1")
    assert asset.status_code == 200, asset.text
    assert asset.json()["path"] == "azureml://datastores/workspaceblobstore/paths/reports/named-write/"
    assert datastore(srv, "reports/named-write/r.txt").read_text().strip() == "done"


def test_registered_components_run_as_steps_by_reference(
    api: httpx.Client, srv: RunningServer, tmp_path: Path
) -> None:
    path = _abc_with_components(tmp_path / "reg")
    for component in ("b.yml", "c.yml"):
        made = cli(srv, "-o", "json", "component", "create", "--file", str(path.parent / component))
        assert made.returncode == 0, made.stderr
    doc = yaml.safe_load(path.read_text())
    doc["jobs"]["b"]["component"] = "azureml:make_message:1"
    doc["jobs"]["c"]["component"] = "show_message@latest"  # the bare name@label form
    doc["settings"]["force_rerun"] = True  # the same content as the files' steps: run, not reused
    done = run_pipeline(api, srv, "registered", doc)
    assert done["status"] == "Completed", done
    assert log_text(api, srv, "registered-c").strip() == "hello world from b"
    bad = dict(doc, jobs={**doc["jobs"], "c": {**doc["jobs"]["c"], "component": "azureml:nope:1"}})
    refused = api.put(f"{srv.ws_path}/jobs/refused", json=bad)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["target"] == "jobs.c.component", refused.text


def test_local_data_of_the_pipeline_and_of_a_step_is_uploaded_by_the_cli(
    api: httpx.Client, srv: RunningServer, tmp_path: Path
) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "hello.txt").write_text("hello from a local folder\n")
    pipeline = {
        "type": "pipeline",
        "settings": {"default_compute": "azureml:serverless"},
        "inputs": {"folder": {"type": "uri_folder", "path": "./data"}},
        "jobs": {
            "read": {
                "command": "cat ${{inputs.folder}}/hello.txt ${{inputs.file}}",
                "inputs": {
                    "folder": "${{parent.inputs.folder}}",
                    "file": {"type": "uri_file", "path": "./data/hello.txt"},
                },
            }
        },
    }
    (tmp_path / "pipeline.yml").write_text(yaml.safe_dump(pipeline))
    made = cli(
        srv, "-o", "json", "job", "create", "--file", str(tmp_path / "pipeline.yml"), "--name", "local-data"
    )
    assert made.returncode == 0, made.stderr
    assert wait_job(api, srv, "local-data", timeout=60)["status"] == "Completed"
    assert log_text(api, srv, "local-data-read").split("\n")[:2] == ["hello from a local folder"] * 2
