"""Unit tests for command jobs in the Azure ML CLI v2 YAML shape (pure, no I/O)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cloudlet.domain.assets.environments import CURATED_ENVIRONMENTS, curated_environment, resolve_environment
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs.job_spec import (
    InlineEnvironment,
    InputSpec,
    MpiDistribution,
    OutputSpec,
    PyTorchDistribution,
    TensorFlowDistribution,
    data_inputs,
    distribution_env,
    is_remote_path,
    job_tier_value,
    job_to_doc,
    literal_inputs,
    normalise_compute,
    parse_job,
    priority_value,
    render_command,
)

SCHEMA = "https://azuremlschemas.azureedge.net/latest/commandJob.schema.json"
TRAIN = (
    "python train.py --data ${{inputs.training_data}} --lr ${{inputs.learning_rate}} --out ${{outputs.model}}"
)


def job(**extra: Any) -> dict[str, Any]:
    return {
        "$schema": SCHEMA,
        "command": TRAIN,
        "code": "./src",
        "inputs": {
            "training_data": {"type": "uri_folder", "path": "./data"},
            "learning_rate": 0.01,
        },
        "outputs": {"model": {"type": "uri_folder"}},
        "compute": "azureml:cpu-cluster",
        **extra,
    }


def error_of(doc: Any, name: str | None = None) -> CloudletError:
    with pytest.raises(CloudletError) as info:
        parse_job(doc, name)
    return info.value


# ----------------------------------------------------------------------------------------------
# Parsing and defaults.


def test_minimal_job_defaults() -> None:
    spec = parse_job({"command": "echo hi", "compute": "azureml:cpu-cluster"})
    assert spec.type == "command"
    assert spec.compute == "cpu-cluster"
    assert spec.resources.instance_count == 1
    assert spec.distribution is None
    assert spec.inputs == {} and spec.outputs == {} and spec.environment_variables == {}
    assert priority_value(spec) == 2
    assert job_to_doc(spec) == {
        "type": "command",
        "tags": {},
        "command": "echo hi",
        "inputs": {},
        "outputs": {},
        "environment_variables": {},
        "compute": "cpu-cluster",
        "resources": {"instance_count": 1},
    }


def test_full_train_job() -> None:
    spec = parse_job(
        job(
            name="train_1",
            display_name="iris",
            experiment_name="iris-exp",
            description="d",
            tags={"team": "ml", "run": 3},
            environment="azureml://registries/azureml/environments/sklearn-1.5/labels/latest",
            environment_variables={"OMP_NUM_THREADS": "1"},
            resources={"instance_count": 2, "shm_size": "2g", "properties": {"x": 1}},
            limits={"timeout": 3600},
            queue_settings={"job_tier": "Standard", "priority": "High"},
            identity={"type": "user_identity"},
            services={"my_jupyter": {"type": "jupyter_lab"}},
        )
    )
    assert spec.name == "train_1"
    assert spec.tags == {"team": "ml", "run": "3"}
    assert spec.inputs["learning_rate"] == 0.01
    data = spec.inputs["training_data"]
    assert isinstance(data, InputSpec) and data.type == "uri_folder" and data.path == "./data"
    assert spec.outputs["model"] == OutputSpec(type="uri_folder", mode="rw_mount")
    assert spec.limits is not None and spec.limits.timeout == 3600
    assert spec.queue_settings is not None and spec.queue_settings.job_tier == "standard"
    assert priority_value(spec) == 3
    assert spec.identity is not None and spec.identity.type == "user_identity"
    assert literal_inputs(spec) == {"learning_rate": "0.01"}
    assert list(data_inputs(spec)) == ["training_data"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("azureml:cpu-cluster", "cpu-cluster"),
        ("cpu-cluster", "cpu-cluster"),
        ("local", "local"),
        ("azureml:LOCAL", "local"),
        (
            "azureml:/subscriptions/s/resourceGroups/rg/providers/Microsoft.MachineLearningServices"
            "/workspaces/ws/computes/gpu",
            "gpu",
        ),
    ],
)
def test_compute_is_normalised(value: str, expected: str) -> None:
    assert normalise_compute(value) == expected
    assert parse_job({"command": "true", "compute": value}).compute == expected


def test_a_job_without_compute_or_instance_type_is_valid() -> None:
    """Azure ML's hello-world.yml (command + environment only) runs serverless on the workspace's
    default instance type, which submission fills in (services.jobs.jobs._target)."""
    spec = parse_job({"command": "true"})
    assert spec.compute is None and spec.resources.instance_type is None
    spec = parse_job({"command": "true", "resources": {"instance_type": "Standard_DS3_v2"}})
    assert spec.compute is None and spec.resources.instance_type == "Standard_DS3_v2"


def test_name_from_url_wins_and_must_match() -> None:
    assert parse_job({"command": "true", "compute": "local"}, name="j1").name == "j1"
    err = error_of({"command": "true", "compute": "local", "name": "other"}, name="j1")
    assert err.target == "name"


@pytest.mark.parametrize(
    ("doc", "target", "fragment"),
    [
        ("not a mapping", "$", "mapping"),
        ({"compute": "local"}, "command", "required"),
        ({"command": "  ", "compute": "local"}, "command", "must not be empty"),
    ],
)
def test_document_level_errors(doc: Any, target: str, fragment: str) -> None:
    err = error_of(doc)
    assert err.target == target
    assert fragment in err.message


@pytest.mark.parametrize(
    ("extra", "target", "fragment"),
    [
        ({"type": "sweep"}, "type", "only 'command'"),
        ({"name": "bad name!"}, "name", "letters"),
        ({"resources": {"instance_count": 0}}, "resources.instance_count", "≥ 1"),
        ({"resources": {"gpus": 1}}, "resources.gpus", "unknown field"),
        ({"resources": {"shm_size": "lots"}}, "resources.shm_size", "2g"),
        ({"limits": {"timeout": 0}}, "limits.timeout", "≥ 1"),
        ({"queue_settings": {"priority": "urgent"}}, "queue_settings.priority", "low, medium, high"),
        ({"identity": {"type": "root"}}, "identity.type", "managed"),
        ({"distribution": {"type": "horovod"}}, "distribution.type", "pytorch"),
        (
            {"distribution": {"type": "pytorch", "process_count_per_instance": 0}},
            "distribution.process_count_per_instance",
            "≥ 1",
        ),
        ({"distribution": {"type": "mpi", "workers": 2}}, "distribution.workers", "unknown field"),
        ({"environment": {"pip": "numpy"}}, "environment.pip", "list"),
        ({"environment": {"name": "e"}}, "environment", "image"),
        ({"environment": "my-env"}, "environment", "unknown environment"),
        ({"inputs": {"x": {"type": "uri_folder"}}}, "inputs.x.path", "needs 'path'"),
        ({"inputs": {"x": {"type": "integer", "value": "ten"}}}, "inputs.x.value", "integer"),
        ({"inputs": {"x": {"type": "uri_file", "path": "a", "mode": "copy"}}}, "inputs.x.mode", "ro_mount"),
        ({"inputs": {"x": [1, 2]}}, "inputs.x", "literal"),
        ({"inputs": {"bad-name": 1}}, "inputs.bad-name", "letters"),
        ({"outputs": {"m": {"type": "pickle_model"}}}, "outputs.m.type", "uri_folder"),
        ({"outputs": {"m": {"mode": "download"}}}, "outputs.m.mode", "upload"),
    ],
)
def test_validation_errors_name_the_field(extra: dict[str, Any], target: str, fragment: str) -> None:
    err = error_of({"command": "true", "compute": "local", **extra})
    assert err.target == target
    assert fragment in err.message
    assert err.status == 400


def test_unknown_top_level_field_lists_allowed_fields() -> None:
    err = error_of(job(computer="cpu"))
    assert err.target == "computer"
    assert "unknown field 'computer'" in err.message
    assert "Allowed fields:" in err.message and "compute" in err.message and "$schema" in err.message


def test_environment_variables_must_be_strings() -> None:
    err = error_of(job(environment_variables={"OK": "1", "THREADS": 4}))
    assert err.target == "environment_variables.THREADS"
    assert "THREADS" in err.message and '"4"' in err.message


def test_input_forms() -> None:
    spec = parse_job(
        {
            "command": " ".join(f"${{{{inputs.{n}}}}}" for n in "abcdef"),
            "compute": "local",
            "inputs": {
                "a": "text",
                "b": 3,
                "c": True,
                "d": {"type": "number", "value": 0.5},
                "e": {"path": "azureml://datastores/workspaceblobstore/paths/x", "mode": "download"},
                "f": {"value": 7},
            },
        }
    )
    e = spec.inputs["e"]
    f = spec.inputs["f"]
    assert isinstance(e, InputSpec) and e.type == "uri_folder" and e.mode == "download"
    assert isinstance(f, InputSpec) and f.type == "integer"
    assert literal_inputs(spec) == {"a": "text", "b": "3", "c": "True", "d": "0.5", "f": "7"}


def test_outputs_may_be_empty_mappings() -> None:
    spec = parse_job({"command": "ls ${{outputs.m}}", "compute": "local", "outputs": {"m": None}})
    assert spec.outputs["m"].type == "uri_folder"


# ----------------------------------------------------------------------------------------------
# Command placeholders.


def test_undeclared_input_placeholder_names_it_and_the_declared_ones() -> None:
    err = error_of(job(command="python t.py --data ${{inputs.trainig_data}}"))
    assert err.target == "command"
    assert "${{inputs.trainig_data}}" in err.message
    assert "training_data" in err.message and "learning_rate" in err.message


def test_undeclared_output_placeholder() -> None:
    err = error_of(job(command="python t.py --out ${{outputs.models}}"))
    assert err.target == "command" and "${{outputs.models}}" in err.message and "model" in err.message


def test_unsupported_placeholder_namespace() -> None:
    err = error_of(job(command="echo ${{search_space.lr}}"))
    assert err.target == "command" and "not supported" in err.message


def test_optional_input_may_be_undeclared_only_inside_brackets() -> None:
    parse_job(job(command=TRAIN + " $[[--seed ${{inputs.seed}}]]"))
    err = error_of(job(command=TRAIN + " --seed ${{inputs.seed}} $[[--s ${{inputs.seed}}]]"))
    assert err.target == "command" and "seed" in err.message
    err = error_of(job(command=TRAIN + " $[[--x ${{outputs.nope}}]]"))
    assert "outputs.nope" in err.message


def test_render_command_substitutes() -> None:
    rendered = render_command(
        TRAIN, {"training_data": "/mnt/in", "learning_rate": "0.01"}, {"model": "/mnt/out"}
    )
    assert rendered == "python train.py --data /mnt/in --lr 0.01 --out /mnt/out"
    assert render_command("echo ${{ inputs.x }}", {"x": "spaced"}, {}) == "echo spaced"


def test_render_command_optional_parts() -> None:
    command = "python t.py --a ${{inputs.a}} $[[--b ${{inputs.b}}]] $[[--c ${{inputs.c}} --d ${{inputs.a}}]]"
    assert render_command(command, {"a": "1"}, {}) == "python t.py --a 1  "
    assert render_command(command, {"a": "1", "b": "2"}, {}) == "python t.py --a 1 --b 2 "
    assert render_command(command, {"a": "1", "b": "2", "c": "3"}, {}) == (
        "python t.py --a 1 --b 2 --c 3 --d 1"
    )


def test_render_command_missing_required_value() -> None:
    with pytest.raises(CloudletError) as info:
        render_command("echo ${{inputs.x}}", {}, {})
    assert info.value.target == "command" and "inputs.x" in info.value.message


# ----------------------------------------------------------------------------------------------
# Distribution.


def test_pytorch_two_nodes_two_processes() -> None:
    spec = parse_job(
        job(
            resources={"instance_count": 2},
            distribution={"type": "pytorch", "process_count_per_instance": 2},
        )
    )
    assert isinstance(spec.distribution, PyTorchDistribution)
    world = ["10.0.0.4", "10.0.0.5"]
    node0 = distribution_env(spec, world, 0, 29500)
    node1 = distribution_env(spec, world, 1, 29500)
    assert [e["RANK"] for e in node0 + node1] == ["0", "1", "2", "3"]
    assert [e["LOCAL_RANK"] for e in node1] == ["0", "1"]
    for env in node0 + node1:
        assert env["MASTER_ADDR"] == "10.0.0.4"
        assert env["MASTER_PORT"] == "29500"
        assert env["WORLD_SIZE"] == "4"
        assert env["LOCAL_WORLD_SIZE"] == "2"
    assert {e["NODE_RANK"] for e in node1} == {"1"}


def test_pytorch_default_one_process_per_node() -> None:
    spec = parse_job(job(resources={"instance_count": 2}, distribution={"type": "PyTorch"}))
    envs = distribution_env(spec, ["a", "b"], 1, 6000)
    assert envs == [
        {
            "MASTER_ADDR": "a",
            "MASTER_PORT": "6000",
            "WORLD_SIZE": "2",
            "RANK": "1",
            "LOCAL_RANK": "0",
            "NODE_RANK": "1",
            "LOCAL_WORLD_SIZE": "1",
        }
    ]


def test_mpi_env() -> None:
    spec = parse_job(
        job(resources={"instance_count": 2}, distribution={"type": "mpi", "process_count_per_instance": 3})
    )
    assert isinstance(spec.distribution, MpiDistribution)
    envs = distribution_env(spec, ["h0", "h1"], 1, 6105)
    assert [e["OMPI_COMM_WORLD_RANK"] for e in envs] == ["3", "4", "5"]
    assert [e["OMPI_COMM_WORLD_LOCAL_RANK"] for e in envs] == ["0", "1", "2"]
    assert {e["OMPI_COMM_WORLD_SIZE"] for e in envs} == {"6"}
    assert {e["AZ_BATCH_MASTER_NODE"] for e in envs} == {"h0:6105"}


def test_tensorflow_tf_config() -> None:
    spec = parse_job(
        job(
            resources={"instance_count": 2},
            distribution={"type": "tensorflow", "worker_count": 2, "parameter_server_count": 1},
        )
    )
    assert isinstance(spec.distribution, TensorFlowDistribution)
    world = ["h0", "h1"]
    node0 = [json.loads(e["TF_CONFIG"]) for e in distribution_env(spec, world, 0, 2222)]
    node1 = [json.loads(e["TF_CONFIG"]) for e in distribution_env(spec, world, 1, 2222)]
    cluster = {"worker": ["h0:2222", "h1:2222"], "ps": ["h0:2223"]}
    assert all(c["cluster"] == cluster for c in node0 + node1)
    assert [c["task"] for c in node0] == [{"type": "worker", "index": 0}, {"type": "ps", "index": 0}]
    assert [c["task"] for c in node1] == [{"type": "worker", "index": 1}]


def test_tensorflow_worker_count_defaults_to_instance_count() -> None:
    spec = parse_job(job(resources={"instance_count": 3}, distribution={"type": "tensorflow"}))
    configs = [json.loads(distribution_env(spec, ["a", "b", "c"], n, 7000)[0]["TF_CONFIG"]) for n in range(3)]
    assert configs[0]["cluster"] == {"worker": ["a:7000", "b:7000", "c:7000"]}
    assert [c["task"]["index"] for c in configs] == [0, 1, 2]


def test_no_distribution_is_one_plain_process() -> None:
    spec = parse_job(job())
    assert distribution_env(spec, ["a"], 0, 1) == [{}]


def test_distribution_env_rejects_bad_rank() -> None:
    spec = parse_job(job(distribution={"type": "pytorch"}))
    with pytest.raises(ValueError):
        distribution_env(spec, ["a"], 1, 1)


@pytest.mark.parametrize(
    ("priority", "value"), [("low", 1), ("medium", 2), ("high", 3), ("LOW", 1), (3, 3), ("1", 1)]
)
def test_priority_value(priority: str | int, value: int) -> None:
    assert priority_value(parse_job(job(queue_settings={"priority": priority}))) == value


@pytest.mark.parametrize(
    ("given", "stored", "tier"),
    [
        ({"job_tier": "Spot", "priority": "HIGH"}, {"job_tier": "spot", "priority": "high"}, "spot"),
        ({"jobTier": "Premium", "priority": 1}, {"job_tier": "premium", "priority": "low"}, "premium"),
        ({"job_tier": "null"}, {}, None),
        ({"job_tier": "Null", "priority": 2}, {"priority": "medium"}, None),
    ],
)
def test_queue_settings_are_stored_in_the_sdk_entity_shape(
    given: dict[str, Any], stored: dict[str, Any], tier: str | None
) -> None:
    """One parser (domain/jobs/queue_settings.py) behind the model: the SDK's, the wire's and
    YAML's spellings are stored alike, and ``jobs.job_tier`` gets None for the default tier."""
    spec = parse_job(job(queue_settings=given))
    assert job_to_doc(spec)["queue_settings"] == stored
    assert job_tier_value(spec) == tier


@pytest.mark.parametrize(
    ("given", "target"),
    [
        ({"job_tier": "gold"}, "queue_settings.job_tier"),
        ({"priority": True}, "queue_settings.priority"),
        ({"priority": 4}, "queue_settings.priority"),
        ({"tier": "spot"}, "queue_settings.tier"),
    ],
)
def test_bad_queue_settings_name_the_field(given: dict[str, Any], target: str) -> None:
    assert error_of({"command": "true", "compute": "local", "queue_settings": given}).target == target


# ----------------------------------------------------------------------------------------------
# Environments.


def test_no_environment_uses_node_python() -> None:
    resolved = resolve_environment(None)
    assert resolved.kind == "python" and resolved.pip == [] and resolved.image is None
    assert len(resolved.hash) == 64


@pytest.mark.parametrize(
    "reference",
    [
        "azureml://registries/azureml/environments/sklearn-1.5/labels/latest",
        "azureml://registries/azureml/environments/sklearn-1.5/versions/12",
        "azureml:AzureML-sklearn-1.5@latest",
        "azureml:AzureML-sklearn-1.5:3",
        "AzureML-sklearn-1.5",
        "sklearn-1.5",
    ],
)
def test_curated_reference_forms(reference: str) -> None:
    curated = curated_environment(reference)
    assert curated is not None and curated.name == "sklearn-1.5"
    resolved = resolve_environment(reference)
    assert resolved.kind == "venv" and resolved.name == "sklearn-1.5"
    assert any(p.startswith("scikit-learn") for p in resolved.pip)


def test_curated_table_is_small_and_consistent() -> None:
    assert 3 <= len(CURATED_ENVIRONMENTS) <= 20
    for name, env in CURATED_ENVIRONMENTS.items():
        assert curated_environment(env.registry_uri) is env
        assert curated_environment(f"azureml:{env.workspace_name}@latest") is env
        assert env.pip and name == env.name


def test_unknown_environment_names_the_curated_ones() -> None:
    with pytest.raises(CloudletError) as info:
        resolve_environment("azureml:my-env@latest")
    assert info.value.target == "environment"
    assert "sklearn-1.5" in info.value.message


def test_inline_environment_hash_is_stable_across_key_and_list_order() -> None:
    a = resolve_environment({"pip": ["numpy==1.26.4", "pandas"], "name": "e"})
    b = resolve_environment({"name": "e", "pip": ["pandas", "numpy==1.26.4", "pandas"]})
    assert a.kind == "venv" and a.pip == ["numpy==1.26.4", "pandas"]
    assert a.hash == b.hash
    assert resolve_environment({"pip": ["numpy"]}).hash != a.hash


def test_conda_file_pip_and_plain_names() -> None:
    conda = {
        "name": "train",
        "channels": ["conda-forge"],
        "dependencies": ["python=3.10", "pip", "numpy", "scipy=1.11", {"pip": ["scikit-learn==1.5.0"]}],
    }
    resolved = resolve_environment({"conda_file": conda})
    assert resolved.kind == "venv" and resolved.python == "3.10"
    # conda packages too (scipy=1.11 was dropped before issue 25), and what a conda env always has
    assert resolved.pip == ["numpy", "pip", "scikit-learn==1.5.0", "scipy==1.11.*", "setuptools<81", "wheel"]
    reordered = {"dependencies": conda["dependencies"], "channels": ["conda-forge"], "name": "train"}
    assert resolve_environment({"conda_file": reordered}).hash == resolved.hash
    # Without the python= pin, the same packages given as pip share the cached venv.
    unpinned = {"dependencies": [d for d in conda["dependencies"] if d != "python=3.10"]}
    assert (
        resolve_environment({"pip": resolved.pip}).hash == resolve_environment({"conda_file": unpinned}).hash
    )


def test_image_environment() -> None:
    resolved = resolve_environment(InlineEnvironment(image="python:3.11-slim", pip=["requests"]))
    assert resolved.kind == "image" and resolved.image == "python:3.11-slim" and resolved.pip == ["requests"]
    assert resolve_environment({"image": "python:3.12-slim"}).hash != resolved.hash


def test_conda_file_path_must_be_inlined_before_resolving() -> None:
    spec = parse_job(job(environment={"conda_file": "./conda.yml"}))  # accepted as submitted
    with pytest.raises(CloudletError) as info:
        resolve_environment(spec.environment)
    assert info.value.target == "environment.conda_file"


def test_curated_and_equal_inline_spec_share_hash() -> None:
    curated = CURATED_ENVIRONMENTS["sklearn-1.5"]
    resolved = resolve_environment(curated.registry_uri)
    assert resolve_environment(f"azureml:AzureML-{curated.name}@latest").hash == resolved.hash
    # Its image's Python (3.10) is part of its spec, as an inline pin is: the same packages on the
    # same pinned Python hash alike, whatever their source.
    from cloudlet.domain.assets.environments import _resolved

    assert _resolved("venv", list(curated.pip), None, None, curated.python).hash == resolved.hash
    assert resolve_environment({"pip": list(curated.pip)}).hash != resolved.hash  # the node's Python


@pytest.mark.parametrize(
    ("value", "remote"),
    [
        ("./src", False),
        ("src", False),
        ("/abs/path", False),
        ("file:./data", False),
        ("codes/" + "a" * 64, True),
        ("codes/not-a-hash", False),
        ("azureml://datastores/workspaceblobstore/paths/x", True),
        ("azureml:my-data:1", True),
        ("https://example.com/x.csv", True),
    ],
)
def test_is_remote_path(value: str, remote: bool) -> None:
    assert is_remote_path(value) is remote


def test_dumped_spec_parses_back_to_the_same_spec() -> None:
    doc = job(
        code="codes/" + "a" * 64,
        environment={"image": "python:3.11-slim", "conda_file": {"dependencies": ["numpy"]}},
        distribution={"type": "tensorflow", "parameter_server_count": 1},
        resources={"instance_count": 2},
        queue_settings={"priority": "High", "job_tier": "Spot"},
        limits={"timeout": 60},
        tags={"n": 1},
    )
    spec = parse_job(doc, "j1")
    for dumped in (job_to_doc(spec), spec.model_dump(mode="json", by_alias=True, exclude_none=True)):
        dumped.pop("$schema", None)
        assert parse_job(dumped, "j1") == spec.model_copy(update={"schema_": None})
