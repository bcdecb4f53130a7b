"""Pipeline jobs (domain.jobs.pipeline_jobs, domain.jobs.pipeline_bindings): parsing, the DAG, advancing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs.job_spec import parse_job
from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.domain.jobs.parent_jobs import ChildView, ParentContext
from cloudlet.domain.jobs.pipeline_bindings import child_job_name
from cloudlet.domain.jobs.pipeline_dag import child_doc, dag_text, parent_outputs, progress, reuse_key
from cloudlet.domain.jobs.pipeline_jobs import PIPELINE, setting_warnings

DATA = Path(__file__).resolve().parents[1] / "data" / "pipelines"
EXAMPLES = sorted(p.name for p in DATA.glob("*.yml"))
NOW = ParentContext(now=100.0, started_at=90.0)
S = JobStatus


def parse(doc: dict[str, Any], name: str = "p1") -> dict[str, Any]:
    return PIPELINE.parse(doc, name)


def refused(doc: dict[str, Any]) -> CloudletError:
    with pytest.raises(CloudletError) as info:
        parse(doc)
    return info.value


def done(key: str, outputs: dict[str, str] | None = None, reused: str | None = None) -> ChildView:
    return ChildView(key=key, name=f"p1-{key}", status=S.COMPLETED, outputs=outputs or {}, reused_from=reused)


def child(key: str, status: JobStatus, error: str | None = None) -> ChildView:
    return ChildView(key=key, name=f"p1-{key}", status=status, error=error)


def io_pipeline(**settings: Any) -> dict[str, Any]:
    return {
        "type": "pipeline",
        "settings": {"default_compute": "azureml:cpu-cluster", **settings},
        "inputs": {
            "greeting": "hi",
            "data": {"type": "uri_folder", "path": "azureml://datastores/d/paths/x"},
        },
        "jobs": {
            "a": {
                "command": "echo ${{inputs.g}} > ${{outputs.o}}/f",
                "inputs": {"g": "${{parent.inputs.greeting}}"},
                "outputs": {"o": None},
            },
            "b": {
                "command": "cat ${{inputs.i}}/f",
                "inputs": {"i": "${{parent.jobs.a.outputs.o}}"},
                "compute": "local",
            },
            "c": {"command": "ls ${{inputs.d}}", "inputs": {"d": "${{parent.inputs.data}}"}},
        },
    }


# ----------------------------------------------------------------------------------------------
# Azure's example shapes.


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_parses_and_its_first_steps_are_valid_command_jobs(example: str) -> None:
    doc = yaml.safe_load((DATA / example).read_text())
    stored = parse(doc, "run1")
    assert stored["type"] == "pipeline" and stored["jobs"]
    step = PIPELINE.advance(stored, [], NOW)
    assert step.outcome is None and step.submit
    for new in step.submit:
        spec = parse_job(new.doc, new.doc["name"])
        assert spec.name == child_job_name("run1", new.key)
        assert new.reuse_key


def test_serverless_default_compute_gives_steps_no_compute_and_step_compute_wins() -> None:
    doc = yaml.safe_load((DATA / "hello-pipeline-customize-output-file-serverless.yml").read_text())
    (new,) = PIPELINE.advance(parse(doc), [], NOW).submit
    assert new.doc["compute"] == "cpu-cluster"
    doc = yaml.safe_load((DATA / "hello-pipeline-serverless.yml").read_text())
    assert all("compute" not in n.doc for n in PIPELINE.advance(parse(doc), [], NOW).submit)


def test_top_level_compute_is_the_default_compute() -> None:
    stored = parse({"type": "pipeline", "compute": "azureml:cpu-cluster", "jobs": {"a": {"command": "true"}}})
    assert stored["settings"]["default_compute"] == "cpu-cluster"


# ----------------------------------------------------------------------------------------------
# Bindings and output paths.


def test_bindings_resolve_parent_inputs_and_upstream_outputs() -> None:
    stored = parse(io_pipeline())
    first = {n.key: n for n in PIPELINE.advance(stored, [], NOW).submit}
    assert set(first) == {"a", "c"}  # b waits for a
    assert first["a"].doc["inputs"] == {"g": "hi"}
    assert first["a"].doc["outputs"]["o"]["path"] == (
        "azureml://datastores/workspaceblobstore/paths/azureml/p1-a/o/"
    )
    assert first["c"].doc["inputs"]["d"] == {"type": "uri_folder", "path": "azureml://datastores/d/paths/x"}
    assert first["a"].doc["compute"] == "cpu-cluster"
    running = [child("a", S.RUNNING), child("c", S.RUNNING)]
    assert PIPELINE.advance(stored, running, NOW).submit == ()
    a_out = "azureml://datastores/workspaceblobstore/paths/azureml/p1-a/o/"
    step = PIPELINE.advance(stored, [done("a", {"o": a_out}), child("c", S.RUNNING)], NOW)
    (b,) = step.submit
    assert b.key == "b" and b.doc["compute"] == "local"
    assert b.doc["inputs"]["i"] == {"type": "uri_folder", "path": a_out}


def test_output_paths_fill_name_and_output_name_and_parent_outputs_bind() -> None:
    doc = yaml.safe_load((DATA / "hello-pipeline-customize-output-file.yml").read_text())
    stored = parse(doc, "run7")
    (new,) = PIPELINE.advance(stored, [], NOW).submit
    out = new.doc["outputs"]["output"]
    assert out == {
        "type": "uri_file",
        "path": "azureml://datastores/workspaceblobstore/paths/run7-hello_world/hello_world.txt",
        "mode": "rw_mount",
    }
    view = ChildView("hello_world", "run7-hello_world", S.COMPLETED, outputs={"output": out["path"]})
    assert parent_outputs(stored, [view]) == {"output": out["path"]}
    doc = {
        "type": "pipeline",
        "settings": {"default_datastore": "azureml:other"},
        "jobs": {
            "a": {
                "command": "true",
                "outputs": {
                    "x": {
                        "path": "azureml://datastores/${{default_datastore}}/paths/${{name}}/${{output_name}}"
                    },
                    "y": {"mode": "direct"},
                },
            }
        },
    }
    (new,) = PIPELINE.advance(parse(doc), [], NOW).submit
    assert new.doc["outputs"]["x"]["path"] == "azureml://datastores/other/paths/p1-a/x"
    assert new.doc["outputs"]["y"] == {
        "path": "azureml://datastores/other/paths/azureml/p1-a/y/",
        "mode": "rw_mount",
    }


@pytest.mark.parametrize(
    ("jobs", "target", "words"),
    [
        (
            {"a": {"command": "echo ${{inputs.x}}", "inputs": {"x": "${{parent.jobs.zz.outputs.o}}"}}},
            "jobs.a.inputs.x",
            "step 'zz' does not exist",
        ),
        (
            {
                "a": {"command": "true", "outputs": {"o": None}},
                "b": {"command": "echo ${{inputs.x}}", "inputs": {"x": "${{parent.jobs.a.outputs.nope}}"}},
            },
            "jobs.b.inputs.x",
            "has no output 'nope' (its outputs: o)",
        ),
        (
            {"a": {"command": "echo ${{inputs.x}}", "inputs": {"x": "${{parent.inputs.missing}}"}}},
            "jobs.a.inputs.x",
            "pipeline input 'missing' is not declared",
        ),
        (
            {"a": {"command": "echo ${{inputs.x}}", "inputs": {"x": "${{jobs.b.outputs.o}}"}}},
            "jobs.a.inputs.x",
            "parent.",
        ),
        (
            {"a": {"command": "echo ${{inputs.x}}", "inputs": {"x": "${{parent.nonsense}}"}}},
            "jobs.a.inputs.x",
            "not a binding",
        ),
        (
            {"a": {"command": "true", "outputs": {"o": "${{parent.outputs.none}}"}}},
            "jobs.a.outputs.o",
            "pipeline output 'none' is not declared",
        ),
        (
            {
                "a": {
                    "command": "echo ${{inputs.x}}",
                    "outputs": {"o": None},
                    "inputs": {"x": "${{parent.jobs.a.outputs.o}}"},
                }
            },
            "jobs.a.inputs.x",
            "cannot read its own output",
        ),
        (
            {
                "a": {
                    "command": "true",
                    "outputs": {"o": {"path": "azureml://datastores/d/paths/${{run_id}}"}},
                }
            },
            "jobs.a.outputs.o.path",
            "'${{run_id}}' cannot be used in an output path",
        ),
        (
            {"a": {"command": "true", "outputs": {"o": {"mode": "download"}}}},
            "jobs.a.outputs.o.mode",
            "input modes",
        ),
        ({"a": {"command": "echo ${{inputs.nope}}"}}, "jobs.a.command", "'nope' is not declared"),
        ({"a": {"command": "true", "compute": 3}}, "jobs.a.compute", ""),
        ({"a": {"type": "sweep"}}, "jobs.a.type", "not supported in pipelines yet"),
        ({"a": {"component": "./train.yml"}}, "jobs.a.component", "was not resolved"),
        ({"a": {"command": "true", "bogus": 1}}, "jobs.a.bogus", "cannot be set"),
        ({"bad-name": {"command": "true"}}, "jobs.bad-name", "letters, digits and '_'"),
        ({}, "jobs", "needs 'jobs'"),
    ],
)
def test_bad_steps_are_refused_naming_the_field(jobs: dict[str, Any], target: str, words: str) -> None:
    err = refused({"type": "pipeline", "jobs": jobs})
    assert err.target == target, err
    assert words in err.message


def test_a_cycle_is_refused_naming_it() -> None:
    err = refused(
        {
            "type": "pipeline",
            "jobs": {
                "a": {
                    "command": "ls ${{inputs.x}}",
                    "inputs": {"x": "${{parent.jobs.b.outputs.o}}"},
                    "outputs": {"o": None},
                },
                "b": {
                    "command": "ls ${{inputs.x}}",
                    "inputs": {"x": "${{parent.jobs.a.outputs.o}}"},
                    "outputs": {"o": None},
                },
            },
        }
    )
    assert err.target == "jobs.a.inputs" and "cycle: a → b → a" in err.message


PIPELINE_COMPONENT: dict[str, Any] = {
    "type": "pipeline",
    "name": "data_pipeline",
    "inputs": {"raw": {"type": "uri_folder"}, "ratio": {"type": "number", "default": 0.5}},
    "outputs": {"clean": {"type": "uri_folder"}},
    "jobs": {
        "prep": {
            "command": "cp -r ${{inputs.raw}} ${{outputs.out}} # ${{inputs.ratio}}",
            "inputs": {"raw": "${{parent.inputs.raw}}", "ratio": "${{parent.inputs.ratio}}"},
            "outputs": {"out": "${{parent.outputs.clean}}"},
        }
    },
}


def test_a_pipeline_component_step_becomes_a_child_pipeline() -> None:
    raw = {"type": "uri_folder", "path": "azureml://datastores/workspaceblobstore/paths/raw/"}
    doc = {
        "type": "pipeline",
        "settings": {"default_compute": "azureml:cpu-cluster"},
        "inputs": {"raw": raw},
        "jobs": {
            "data": {
                "type": "pipeline",
                "component": PIPELINE_COMPONENT,
                "inputs": {"raw": "${{parent.inputs.raw}}"},
                "outputs": {"clean": None},
            },
            "use": {"command": "ls ${{inputs.x}}", "inputs": {"x": "${{parent.jobs.data.outputs.clean}}"}},
        },
    }
    stored = parse(doc)
    assert parse(stored) == stored
    child = child_doc(stored, "data", {})
    assert child["type"] == "pipeline" and child["name"] == "p1-data" and list(child["jobs"]) == ["prep"]
    assert child["inputs"] == {"raw": raw, "ratio": {"type": "number", "default": 0.5}}  # its default
    assert child["outputs"]["clean"]["path"].endswith("/paths/azureml/p1-data/clean/")
    assert child["settings"]["default_compute"] == "cpu-cluster"
    assert PIPELINE.parse(child, "p1-data")["jobs"]["prep"]["inputs"]["ratio"] == "${{parent.inputs.ratio}}"
    assert reuse_key(stored, "data", child) is None  # its own steps are reused one by one
    unknown = {**doc["jobs"]["data"], "inputs": {"nope": 1}}
    assert refused({**doc, "jobs": {"data": unknown}}).target == "jobs.data.inputs.nope"
    registered = {**doc["jobs"]["data"], "component": "azureml:data_pipeline@latest"}
    assert (
        parse({**doc, "jobs": {"data": registered}})["jobs"]["data"]["component"] == registered["component"]
    )
    broken = {**PIPELINE_COMPONENT, "jobs": {"prep": {"command": "echo ${{inputs.x}}"}}}
    err = refused({**doc, "jobs": {"data": {**doc["jobs"]["data"], "component": broken}}})
    assert err.target.startswith("jobs.data.component.jobs.prep"), err


def test_an_unknown_setting_is_kept_and_warned_of_not_refused() -> None:
    # Azure ignores the samples' ``default_datestore`` typo; so does cloudlet, saying so.
    doc = {"type": "pipeline", "jobs": {"a": {"command": "true"}}}
    settings = {"default_datestore": "azureml:workspaceblobstore", "default_compute": "azureml:c"}
    stored = parse({**doc, "settings": settings})
    assert stored["settings"]["default_compute"] == "c" and "default_datastore" not in stored["settings"]
    assert parse(stored) == stored  # the stored form parses to itself, warnings included
    [warning] = setting_warnings(stored)
    assert warning.startswith("settings.default_datestore: unknown pipeline setting, ignored")
    assert "did you mean 'default_datastore'?" in warning
    assert setting_warnings(parse({**doc, "settings": {"force_rerun": True}})) == []


@pytest.mark.parametrize(
    ("doc", "target"),
    [
        ({"settings": {"force_rerun": "maybe"}}, "settings.force_rerun"),
        ({"inputs": {"x": [1]}}, "inputs.x"),
        ({"outputs": {"o": {"path": "/tmp/x"}}}, "outputs.o.path"),
        ({"outputs": {"o": {"mode": {}}}}, "outputs.o.mode"),
        ({"surprise": 1}, "surprise"),
        ({"type": "command"}, "type"),
    ],
)
def test_bad_pipeline_fields_are_refused(doc: dict[str, Any], target: str) -> None:
    err = refused({"type": "pipeline", "jobs": {"a": {"command": "true"}}, **doc})
    assert err.target == target


# ----------------------------------------------------------------------------------------------
# Advancing: failures, reuse keys, completion.


def test_a_failed_step_cancels_the_running_ones_and_fails_the_pipeline_with_its_error() -> None:
    stored = parse(io_pipeline())
    step = PIPELINE.advance(stored, [child("a", S.FAILED, "exit code 3"), child("c", S.RUNNING)], NOW)
    assert step.outcome is S.FAILED
    assert step.message == "step a failed: exit code 3"
    assert step.cancel == ("c",) and step.submit == ()


def test_continue_on_step_failure_runs_the_rest_and_skips_what_depends_on_the_failure() -> None:
    stored = parse(io_pipeline(continue_on_step_failure=True))
    step = PIPELINE.advance(stored, [child("a", S.FAILED, "boom")], NOW)
    assert [n.key for n in step.submit] == ["c"] and step.outcome is None
    step = PIPELINE.advance(stored, [child("a", S.FAILED, "boom"), done("c")], NOW)
    assert step.outcome is S.FAILED
    assert step.message == "step a failed: boom; not run (they depend on a failed step): b"
    assert "b" in dag_text(stored, [child("a", S.FAILED, "boom"), done("c")])
    assert "Skipped" in dag_text(stored, [child("a", S.FAILED, "boom"), done("c")])


def test_all_done_completes_with_progress_counting_reused_steps() -> None:
    stored = parse(io_pipeline())
    kids = [
        done("a", {"o": "azureml://datastores/workspaceblobstore/paths/x/"}, reused="old-a"),
        done("b"),
        done("c"),
    ]
    step = PIPELINE.advance(stored, kids, NOW)
    assert step.outcome is S.COMPLETED and step.submit == ()
    assert step.message == "3 of 3 steps completed (1 reused)"
    assert progress(stored, [done("a"), child("b", S.RUNNING)]) == "1 of 3 steps completed, 1 running"


def test_cancel_requested_cancels_the_active_steps() -> None:
    stored = parse(io_pipeline())
    ctx = ParentContext(now=1.0, started_at=0.0, cancel_requested=True)
    step = PIPELINE.advance(stored, [child("a", S.RUNNING), done("c")], ctx)
    assert step.outcome is S.CANCELED and step.cancel == ("a",)


def test_reuse_key_is_stable_and_changes_with_what_decides_the_outputs() -> None:
    def key_of(doc: dict[str, Any], name: str = "p1", step: str = "a") -> str | None:
        return {n.key: n for n in PIPELINE.advance(parse(doc, name), [], NOW).submit}[step].reuse_key

    base = io_pipeline()
    assert key_of(base) == key_of(base, name="p2")  # another run, other output paths: same key
    moved = io_pipeline()
    moved["jobs"]["a"]["compute"] = "other-cluster"
    assert key_of(moved) == key_of(base)  # compute does not change outputs
    changed = io_pipeline()
    changed["inputs"]["greeting"] = "hello"
    assert key_of(changed) != key_of(base)
    recoded = io_pipeline()
    recoded["jobs"]["a"]["command"] += " # v2"
    assert key_of(recoded) != key_of(base)
    coded = io_pipeline()
    coded["jobs"]["a"]["code"] = "codes/" + "0" * 64
    assert key_of(coded) != key_of(base)

    def b_key(path: str) -> str | None:
        return PIPELINE.advance(parse(base), [done("a", {"o": path}), done("c")], NOW).submit[0].reuse_key

    assert b_key("azureml://datastores/w/paths/one/") != b_key("azureml://datastores/w/paths/two/")


def test_dag_text_shows_status_upstream_compute_and_reuse() -> None:
    stored = parse(io_pipeline())
    text = dag_text(stored, [done("a", reused="old-a"), child("b", S.RUNNING)])
    lines = text.splitlines()
    assert (
        lines[0].startswith("a  Completed") and "(reused old-a)" in lines[0] and "on cpu-cluster" in lines[0]
    )
    assert lines[1].startswith("b  Running") and "← a" in lines[1] and "on local" in lines[1]
    assert lines[2].startswith("c  NotStarted") and "(start)" in lines[2]


def test_child_job_names_are_the_names_the_parent_job_loop_gives() -> None:
    from cloudlet.services.jobs.parent_jobs import child_name  # the loop's (a pure function)

    for parent, key in [("run", "step_1"), ("x" * 120, "step"), ("y" * 200, "train"), ("r", "a")]:
        assert child_job_name(parent, key) == child_name(parent, key)
    assert child_job_name("x" * 250, "step") != child_job_name("x" * 251, "step")


# ----------------------------------------------------------------------------------------------
# Component steps (the client has inlined ./component.yml files by the time the server parses).

TRAIN = {
    "name": "train",
    "version": "1",
    "type": "command",
    "inputs": {"data": {"type": "uri_folder"}, "lr": {"type": "number", "default": 0.1}},
    "outputs": {"model": {"type": "custom_model"}},
    "command": "train --data ${{inputs.data}} --lr ${{inputs.lr}} --out ${{outputs.model}}",
}


def component_pipeline(**train: Any) -> dict[str, Any]:
    return {
        "type": "pipeline",
        "inputs": {
            "raw": {"type": "uri_folder", "path": "azureml://datastores/workspaceblobstore/paths/raw"}
        },
        "settings": {"default_compute": "cpu-cluster"},
        "jobs": {
            "train": {
                "component": {**TRAIN, **train},
                "inputs": {"data": "${{parent.inputs.raw}}"},
                "environment_variables": {"A": "1"},
            },
            "score": {
                "command": "score ${{inputs.m}}",
                "inputs": {"m": "${{parent.jobs.train.outputs.model}}"},
            },
        },
    }


def test_a_component_step_runs_as_its_command_job_with_defaults_and_overrides() -> None:
    stored = parse(component_pipeline())
    (train,) = PIPELINE.advance(stored, [], NOW).submit
    doc = train.doc
    assert doc["command"] == TRAIN["command"] and doc["environment_variables"] == {"A": "1"}
    assert doc["inputs"]["lr"] == 0.1
    assert doc["inputs"]["data"]["path"] == "azureml://datastores/workspaceblobstore/paths/raw"
    assert doc["outputs"]["model"]["type"] == "custom_model"
    assert doc["outputs"]["model"]["path"].endswith("/azureml/p1-train/model/")
    parse_job(doc, doc["name"])
    model = doc["outputs"]["model"]["path"]
    (score,) = PIPELINE.advance(stored, [done("train", {"model": model})], NOW).submit
    assert score.doc["inputs"]["m"] == {"type": "custom_model", "path": model}


def test_component_steps_are_checked_against_the_component() -> None:
    bad = component_pipeline()
    bad["jobs"]["train"]["inputs"]["nope"] = 1
    assert refused(bad).target == "jobs.train.inputs.nope"
    bad = component_pipeline()
    bad["jobs"]["score"]["inputs"]["m"] = "${{parent.jobs.train.outputs.weights}}"
    err = refused(bad)
    assert err.target == "jobs.score.inputs.m" and "(its outputs: model)" in err.message
    bad = component_pipeline(command="")
    assert refused(bad).target == "jobs.train.component.command"


def test_a_component_that_is_not_deterministic_is_never_reused() -> None:
    assert PIPELINE.advance(parse(component_pipeline()), [], NOW).submit[0].reuse_key
    stored = parse(component_pipeline(is_deterministic=False))
    assert PIPELINE.advance(stored, [], NOW).submit[0].reuse_key is None
    other = parse(component_pipeline(version="2", name="train_v2"))  # name/version: same content
    assert PIPELINE.advance(other, [], NOW).submit[0].reuse_key == (
        PIPELINE.advance(parse(component_pipeline()), [], NOW).submit[0].reuse_key
    )


def test_the_stored_form_parses_to_itself_and_registered_components_wait_for_the_server() -> None:
    for example in EXAMPLES:
        stored = parse(yaml.safe_load((DATA / example).read_text()), "run1")
        assert PIPELINE.parse(stored, "run1") == stored
    stored = parse(component_pipeline())
    assert PIPELINE.parse(stored, "p1") == stored
    doc = component_pipeline()
    doc["jobs"]["train"]["component"] = "azureml:train@latest"
    stored = parse(doc)  # its ports and inputs are checked once the server has resolved it
    assert stored["jobs"]["train"]["component"] == "azureml:train@latest"


def test_an_upstream_step_without_the_output_fails_the_pipeline_naming_it() -> None:
    stored = parse(io_pipeline())
    step = PIPELINE.advance(stored, [done("a", {}), done("c")], NOW)  # a's view has no 'o'
    assert step.outcome is S.FAILED
    assert step.message == "step b could not start: step 'a' ended without an output 'o'"


@pytest.mark.parametrize(
    ("text", "reference"),
    [
        ("azureml:train:1", True),
        ("azureml:train@latest", True),
        ("train:1", True),
        ("train@latest", True),
        ("./train.yml", False),
        ("file:./train.yml", False),
        ("train.yml", False),
        ("c:1.yml", False),
    ],
)
def test_component_references_and_files_are_told_apart(text: str, reference: bool) -> None:
    from cloudlet.domain.jobs.pipeline_dag import is_reference

    assert is_reference(text) is reference


def test_a_step_input_may_bind_what_another_step_is_given() -> None:
    doc = io_pipeline()
    doc["jobs"]["d"] = {
        "command": "echo ${{inputs.g}} ${{inputs.i}}",
        "inputs": {"g": "${{parent.jobs.a.inputs.g}}", "i": "${{parent.jobs.b.inputs.i}}"},
    }
    stored = parse(doc)
    assert "d" not in {n.key for n in PIPELINE.advance(stored, [], NOW).submit}  # b's input is a's output
    a_out = "azureml://datastores/workspaceblobstore/paths/azureml/p1-a/o/"
    step = PIPELINE.advance(stored, [done("a", {"o": a_out}), done("c")], NOW)
    d = {n.key: n for n in step.submit}["d"]
    assert d.doc["inputs"] == {"g": "hi", "i": {"type": "uri_folder", "path": a_out}}
    for given, words in [
        ("${{parent.jobs.a.inputs.nope}}", "step 'a' is given no input 'nope' (it is given: g)"),
        ("${{parent.jobs.zz.inputs.g}}", "step 'zz' does not exist"),
    ]:
        doc["jobs"]["d"]["inputs"]["g"] = given
        err = refused(doc)
        assert (err.target, words in err.message) == ("jobs.d.inputs.g", True), err
    doc["jobs"]["d"]["inputs"]["g"] = "${{parent.jobs.e.inputs.x}}"
    doc["jobs"]["e"] = {"command": "echo ${{inputs.x}}", "inputs": {"x": "${{parent.jobs.d.inputs.g}}"}}
    assert "loop" in refused(doc).message


def test_the_failed_step_is_named_not_the_one_the_pipeline_cancelled_after_it() -> None:
    stored = parse(io_pipeline())  # order: a, b, c; c fails while a runs, a is then cancelled
    step = PIPELINE.advance(stored, [child("a", S.CANCELED), child("c", S.FAILED, "exit code 1")], NOW)
    assert step.outcome is S.FAILED and step.message == "step c failed: exit code 1"


def test_a_registered_pipeline_component_is_checked_and_named_by_reference() -> None:
    from cloudlet.domain.jobs.pipeline_jobs import registered_pipeline_component

    component = {
        "type": "pipeline",
        "name": "inner",
        "version": "2",
        "inputs": {"x": {"type": "string", "default": "hi"}},
        "outputs": {"o": {"type": "uri_folder"}},
        "jobs": {
            "a": {
                "command": "echo ${{inputs.s}}",
                "inputs": {"s": "${{parent.inputs.x}}"},
                "outputs": {"o": "${{parent.outputs.o}}"},
            }
        },
    }
    name, version, stored = registered_pipeline_component(component, None, None)
    assert (name, version) == ("inner", "2")
    assert stored["type"] == "pipeline" and set(stored["jobs"]) == {"a"} and "name" not in stored
    with pytest.raises(CloudletError) as info:
        registered_pipeline_component({**component, "name": None}, None, None)
    assert info.value.target == "name"
    with pytest.raises(CloudletError) as info:
        registered_pipeline_component(
            {**component, "jobs": {"a": {"command": "echo ${{inputs.nope}}"}}}, None, None
        )
    assert info.value.target == "jobs.a.command"
    doc = parse(
        {
            "type": "pipeline",
            "jobs": {
                "p": {"type": "pipeline", "component": "azureml:inner@latest"},
                "b": {"command": "ls ${{inputs.d}}", "inputs": {"d": "${{parent.jobs.p.outputs.o}}"}},
            },
        }
    )
    assert doc["jobs"]["p"]["component"] == "azureml:inner@latest"  # resolved by the server
    resolved = {**doc, "jobs": {**doc["jobs"], "p": {**doc["jobs"]["p"], "component": stored}}}
    assert parse(resolved)["jobs"]["p"]["component"]["outputs"] == {"o": {"type": "uri_folder"}}
