"""A deployment's registered environment (issue 14): ``services.assets.assets.resolve_environment`` is the
one rule jobs, online deployments and batch deployments resolve ``environment`` with, on an
in-memory store: ``azureml:<name>:<version>``, ``@latest`` (the newest version not archived) and
the SDK's ARM id become the version's definition inline; an unknown name, version or label is a
400 naming ``environment`` and the fix; what the replica's node then prepares; the ARM id given
back."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from cloudlet.api.arm.wire import arm_batch, arm_online
from cloudlet.api.arm.wire.arm_jobs import environment_id
from cloudlet.control.online_placement import replica_environment
from cloudlet.domain.endpoints import online_endpoints as rules
from cloudlet.domain.errors import CloudletError
from cloudlet.services.assets import assets
from cloudlet.services.endpoints import batch_endpoints
from cloudlet.services.endpoints import online_endpoints as online
from cloudlet.store.schema import Asset, Base, ResourceGroup, Subscription, Workspace

CONDA = {"dependencies": ["python=3.11", {"pip": ["scikit-learn", "joblib"]}]}
WS_ID = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.MachineLearningServices/workspaces/ws"
DEPLOYMENT: dict[str, Any] = {
    "name": "blue",
    "model": "azureml:m:1",
    "code_configuration": {"code": "codes/" + "a" * 64, "scoring_script": "score.py"},
    "instance_type": "Standard_DS3_v2",
}


@pytest.fixture
def session() -> Iterator[Session]:
    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine)
    with Session(engine) as s:
        s.add(Subscription(id="s", display_name="s"))
        s.add(ResourceGroup(id=1, subscription_id="s", name="rg", location="l"))
        s.add(Workspace(id=3, resource_group_id=1, name="ws", location="l", created_on=datetime.now(UTC)))
        for version, spec, archived in (
            ("1", {"image": "python:3.11-slim"}, False),
            ("2", {"image": "python:3.11-slim", "conda_file": CONDA}, False),
            ("3", {"pip": ["numpy"]}, True),  # archived: @latest skips it
        ):
            now = time.time()
            s.add(
                Asset(
                    workspace_id=3,
                    kind="environment",
                    name="inf-env",
                    version=version,
                    spec=spec,
                    archived=archived,
                    created_by="alice",
                    created_at=now,
                    modified_at=now,
                )
            )
        s.commit()
        yield s
    engine.dispose()


def ws_of(session: Session) -> Workspace:
    ws = session.get(Workspace, 3)
    assert ws is not None
    return ws


@pytest.mark.parametrize(
    ("given", "version"),
    [
        ("azureml:inf-env:1", "1"),
        ("azureml:inf-env@latest", "2"),
        (f"{WS_ID}/environments/inf-env/versions/3", "3"),  # archived, but named exactly
    ],
)
def test_a_registered_environment_becomes_its_version_inline(
    session: Session, given: str, version: str
) -> None:
    inline, found = assets.resolve_environment(session, ws_of(session), given)
    assert found is not None and found.version == version
    assert inline["name"] == "inf-env" and inline["version"] == version
    assert {k: v for k, v in inline.items() if k not in ("name", "version")} == found.spec


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ("azureml:inf-env:9", "create it first"),
        ("azureml:no-env@latest", "create it first"),
        ("azureml:inf-env@stable", "the only label is 'latest'"),
    ],
)
def test_an_unknown_environment_is_a_400_naming_environment(session: Session, given: str, words: str) -> None:
    with pytest.raises(CloudletError) as info:
        assets.resolve_environment(session, ws_of(session), given)
    assert (info.value.status, info.value.target) == (400, "environment"), info.value
    assert words in info.value.message, info.value.message


@pytest.mark.parametrize(
    "given",
    [
        None,
        {"pip": ["x"]},
        "azureml://registries/azureml/environments/sklearn-1.5/labels/latest",
        "sklearn-inference",
    ],
)
def test_what_names_no_workspace_environment_is_left_as_it_is(session: Session, given: Any) -> None:
    assert assets.resolve_environment(session, ws_of(session), given) == (given, None)


def test_an_online_deployment_pins_the_version_and_its_node_builds_it(session: Session) -> None:
    spec = rules.parse_deployment({**DEPLOYMENT, "environment": "azureml:inf-env@latest"}, "ep1")
    resolved = online.registered_environment(session, ws_of(session), spec)
    assert resolved.environment_doc is not None and resolved.environment_doc["version"] == "2"
    assert resolved.to_doc()["environment"] == resolved.environment_doc  # stored pinned
    again = rules.parse_deployment(resolved.to_doc(), "ep1")  # what the runtime reads back
    built = replica_environment(again)
    assert built is not None and built["kind"] == "image" and built["image"] == "python:3.11-slim"
    # a conda file's environment has what a conda environment has: pip, setuptools, wheel
    assert built["pip"] == [
        *("azureml-inference-server-http", "joblib", "pip", "scikit-learn", "setuptools<81", "wheel")
    ]
    arm = arm_online.deployment_to_arm(resolved.to_doc(), WS_ID, "ep1", None, "local")
    assert arm["properties"]["environmentId"] == f"{WS_ID}/environments/inf-env/versions/2"


def test_an_image_alone_runs_on_the_nodes_inference_interpreter(session: Session) -> None:
    spec = rules.parse_deployment({**DEPLOYMENT, "environment": "azureml:inf-env:1"}, "ep1")
    built = replica_environment(online.registered_environment(session, ws_of(session), spec))
    # the agent warns (no containers) and runs the node's inference interpreter: no venv to build
    assert built is not None and built["kind"] == "image" and built["pip"] == []


def test_a_batch_deployment_resolves_as_its_scoring_job_will(session: Session) -> None:
    ws = ws_of(session)
    spec = {"name": "blue", "environment": "azureml:inf-env@latest"}
    resolved = batch_endpoints._with_environment(session, ws, spec)
    assert resolved["environment"]["version"] == "2" and resolved["environment"]["conda_file"] == CONDA
    arm = arm_batch.deployment_to_arm({**resolved, "code_configuration": {}}, WS_ID, "ep", None, "l")
    assert arm["properties"]["environmentId"] == f"{WS_ID}/environments/inf-env/versions/2"
    with pytest.raises(CloudletError) as info:  # a job could not run it: refused now, not at invoke
        batch_endpoints._with_environment(session, ws, {"environment": "sklearn-inference"})
    assert (info.value.status, info.value.target) == (400, "environment")
    assert arm_batch.arm_target("environment") == "properties.environmentId"
    assert arm_online.arm_target("environment") == "properties.environmentId"


def test_environment_ids() -> None:
    assert environment_id("azureml:e:1", WS_ID) == f"{WS_ID}/environments/e/versions/1"
    assert environment_id("azureml:e@latest", WS_ID) == f"{WS_ID}/environments/e"
    assert environment_id({"name": "e", "version": "4", "pip": ["x"]}, WS_ID).endswith("/e/versions/4")  # type: ignore[union-attr]
    assert environment_id({"pip": ["x"]}, WS_ID) is None and environment_id(None, WS_ID) is None
