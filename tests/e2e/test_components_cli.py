"""Registered command components through ``cloudlet component …`` (a subprocess per command) and
the native REST API against a real server: the local code uploaded once, versions, ``@latest``,
archive and restore, errors naming the field; and a component run as a command job on
``compute: local`` (resolved by ``services.assets.components.resolve``'s rules: what a pipeline step does).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from cloudlet.client import MLClient, load_component
from cloudlet.domain.assets.components import command_job_doc, component_hash, parse_component
from cloudlet.domain.errors import CloudletError
from cloudlet.services.assets.components import register_anonymous, resolve
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.services.core.storage import DataRoot
from cloudlet.store import db
from cloudlet.store.schema import Workspace
from tests.conftest import RunningServer
from tests.jobs_helpers import error_of, log_text, served, submit, wait_job

INCLUDES = Path(__file__).resolve().parents[1] / "data" / "component_includes"
TRAIN: dict[str, Any] = {
    "$schema": "https://azuremlschemas.azureedge.net/latest/commandComponent.schema.json",
    "name": "train_model",
    "display_name": "Train",
    "type": "command",
    "inputs": {
        "epochs": {"type": "integer", "default": 3, "min": 1, "max": 10},
        "rate": {"type": "number", "default": 0.5},
        "note": {"type": "string", "optional": True},
    },
    "outputs": {"model": {"type": "uri_folder"}},
    "code": "./src",
    "command": (
        "python train.py --epochs ${{inputs.epochs}} --rate ${{inputs.rate}} $[[--note ${{inputs.note}}]] "
        "--out ${{outputs.model}}"
    ),
}
SCRIPT = """
import argparse, pathlib
p = argparse.ArgumentParser()
p.add_argument("--epochs"); p.add_argument("--rate"); p.add_argument("--note"); p.add_argument("--out")
a = p.parse_args()
print(f"component-ran epochs={a.epochs} rate={a.rate} note={a.note}")
pathlib.Path(a.out, "model.txt").write_text("trained")
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "components-cli")


def cli(srv: RunningServer, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cloudlet", *args],
        env={**srv.cli_env(), "COLUMNS": "400"},
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
    )


def ok_json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, (
        f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    )
    return json.loads(result.stdout)


def failed(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result.stdout
    return result.stdout + result.stderr


def component_file(folder: Path, doc: dict[str, Any] | None = None) -> Path:
    (folder / "src").mkdir(exist_ok=True)
    (folder / "src" / "train.py").write_text(SCRIPT, encoding="utf-8")
    path = folder / "train.yml"
    path.write_text(yaml.safe_dump(doc or TRAIN), encoding="utf-8")
    return path


def test_cli_registers_versions_with_the_code_uploaded_once(srv: RunningServer, tmp_path: Path) -> None:
    path = component_file(tmp_path)
    first = cli(srv, "component", "create", "--file", str(path))
    created = ok_json(first)
    assert (created["name"], created["version"], created["type"]) == ("train_model", "1", "command")
    assert created["code"].startswith("codes/") and "uploaded" in first.stderr, first.stderr
    assert created["inputs"]["epochs"] == {
        "type": "integer",
        "optional": False,
        "default": 3,
        "min": 1,
        "max": 10,
    }
    assert created["is_deterministic"] is True
    # The same code again: the next version, nothing uploaded, the same snapshot.
    again = cli(srv, "component", "create", "--file", str(path))
    second = ok_json(again)
    assert second["version"] == "2" and second["code"] == created["code"]
    assert "unchanged, already on the server" in again.stderr, again.stderr
    # An explicit name and version from the command line win over the file's.
    named = ok_json(cli(srv, "component", "create", "--file", str(path), "-n", "train_other", "-v", "7"))
    assert (named["name"], named["version"]) == ("train_other", "7")

    assert ok_json(cli(srv, "component", "show", "-n", "train_model"))["version"] == "2"
    assert ok_json(cli(srv, "component", "show", "-n", "train_model", "-v", "1"))["version"] == "1"
    listed = ok_json(cli(srv, "component", "list"))
    assert {(c["name"], c["version"]) for c in listed} == {("train_model", "2"), ("train_other", "7")}
    assert [c["version"] for c in ok_json(cli(srv, "component", "list", "-n", "train_model"))] == ["2", "1"]
    ok_json(cli(srv, "component", "archive", "-n", "train_model", "-v", "2"))
    assert ok_json(cli(srv, "component", "show", "-n", "train_model", "-l", "latest"))["version"] == "1"
    ok_json(cli(srv, "component", "restore", "-n", "train_model", "-v", "2"))
    assert ok_json(cli(srv, "component", "show", "-n", "train_model"))["version"] == "2"
    table = cli(srv, "component", "list", "-o", "table")
    assert table.returncode == 0 and "epochs, note, rate" in table.stdout, table.stdout


def test_cli_refuses_an_invalid_component_before_uploading(srv: RunningServer, tmp_path: Path) -> None:
    bad = {**TRAIN, "command": "python train.py --lr ${{inputs.lr}}"}
    out = failed(cli(srv, "component", "create", "--file", str(component_file(tmp_path, bad))))
    assert "'lr' is not declared under 'inputs'" in out, out
    missing = failed(cli(srv, "component", "show", "-n", "no_such_component"))
    assert "not found" in missing.lower(), missing


def test_rest_refuses_local_code_and_unknown_snapshots(srv: RunningServer, api: httpx.Client) -> None:
    base = f"{srv.ws_path}/components/rest_component/versions"
    local = error_of(api.post(base, json={**TRAIN, "name": "rest_component"}))
    assert local["target"] == "code" and "cloudlet component create" in local["message"], local
    unknown = error_of(
        api.put(f"{base}/1", json={**TRAIN, "name": "rest_component", "code": "codes/" + "0" * 64})
    )
    assert unknown["target"] == "code" and "not in this workspace" in unknown["message"], unknown
    bad_name = error_of(api.put(f"{srv.ws_path}/components/Bad-Name/versions/1", json={"command": "echo"}))
    assert bad_name["target"] == "name" and "lower-case" in bad_name["message"], bad_name
    bad_input = error_of(
        api.put(f"{base}/1", json={"command": "echo", "inputs": {"n": {"type": "integer", "default": "x"}}})
    )
    assert bad_input["target"] == "inputs.n.default", bad_input
    # Without code: accepted, and immutable once created.
    created = api.put(f"{base}/1", json={"command": "echo hi", "description": "d"})
    assert created.status_code == 201, created.text
    assert created.json()["id"].endswith("/components/rest_component/versions/1")
    changed = api.put(f"{base}/1", json={"command": "echo bye"})
    assert changed.status_code == 409 and "create a new version" in changed.text, changed.text
    described = api.put(f"{base}/1", json={"command": "echo hi", "description": "new"})
    assert described.status_code == 200 and described.json()["description"] == "new"


def test_a_registered_component_runs_as_a_command_job(
    srv: RunningServer, api: httpx.Client, tmp_path: Path
) -> None:
    with MLClient(home=srv.home) as client:
        created = client.components.create_or_update(load_component(component_file(tmp_path)))
        fetched = client.components.get(created.name, created.version)
    spec = parse_component({k: v for k, v in fetched._to_dict().items() if k in fetched._fields})
    doc = command_job_doc(spec, {"epochs": 5, "note": "hi"}, {}, {"compute": "local"})
    submit(api, srv, "component-job", doc)
    done = wait_job(api, srv, "component-job", timeout=120)
    text = log_text(api, srv, "component-job")
    assert done["status"] == "Completed", (done, text)
    assert "component-ran epochs=5 rate=0.5 note=hi" in text, text


def test_additional_includes_are_copied_into_the_code_snapshot(
    srv: RunningServer, api: httpx.Client, tmp_path: Path
) -> None:
    # cli/assets/component/component_additional_includes.yml: `additional_includes: [common_src]`,
    # its script imports common_src.helper from the snapshot's top.
    folder = tmp_path / "component"
    shutil.copytree(INCLUDES, folder)
    made = cli(srv, "component", "create", "--file", str(folder / "component_additional_includes.yml"))
    created = ok_json(made)
    assert created["code"].startswith("codes/") and "additional_includes" not in created, created
    ran = cli(srv, "job", "create", "--file", str(folder / "pipeline.yml"), "--name", "includes1")
    assert ran.returncode == 0, ran.stderr
    done = wait_job(api, srv, "includes1", timeout=180)
    assert done["status"] == "Completed", done
    kids = {c["key"]: c for c in done["children"]}
    for key in ("from_file", "registered"):  # one may reuse the other (the same content)
        step = kids[key]["reused_from"] or f"includes1-{key}"
        assert log_text(api, srv, step).strip().splitlines()[-1] == "Hello from helper_function"
    # An include whose name the code folder already has, and one that is missing: refused, named.
    (folder / "component_src" / "common_src").mkdir()
    clash = failed(
        cli(srv, "component", "create", "--file", str(folder / "component_additional_includes.yml"))
    )
    assert "additional_includes: 'common_src' is already in the code snapshot" in clash, clash
    (folder / "component_src" / "common_src").rmdir()
    shutil.rmtree(folder / "common_src")
    missing = failed(
        cli(srv, "component", "create", "--file", str(folder / "component_additional_includes.yml"))
    )
    assert "additional_includes[0]: local path 'common_src' does not exist" in missing, missing
    # Sent to the server as they are, they are refused: only the CLI and client read local files.
    refused = error_of(
        api.put(
            f"{srv.ws_path}/components/with_includes/versions/1",
            json={"command": "echo", "additional_includes": ["common_src"]},
        )
    )
    assert refused["target"] == "additional_includes" and "cloudlet CLI" in refused["message"], refused


def test_resolve_reads_every_way_a_step_names_a_component(srv: RunningServer, tmp_path: Path) -> None:
    """``services.assets.components.resolve`` against the server's own store (read only), after the CLI
    registered versions: what the pipeline engineer's steps call."""
    path = component_file(tmp_path)
    ok_json(cli(srv, "component", "create", "--file", str(path), "-n", "resolve_me", "-v", "1"))
    ok_json(cli(srv, "component", "create", "--file", str(path), "-n", "resolve_me", "-v", "2"))
    engine = create_engine(db.sqlite_url(srv.home))
    arm = f"/subscriptions/{srv.subscription_id}/resourceGroups/default/providers/"
    arm += "Microsoft.MachineLearningServices/workspaces/default/components/resolve_me/versions/1"
    try:
        with Session(engine) as session:
            workspace = session.scalars(select(Workspace).where(Workspace.name == "default")).one()

            def version_of(ref: str | dict[str, Any]) -> str | None:
                return resolve(session, workspace, ref, tmp_path).version

            assert version_of("azureml:resolve_me:1") == "1"
            assert version_of("azureml:resolve_me@latest") == "2"
            assert version_of("resolve_me:1") == "1" and version_of("resolve_me@latest") == "2"
            assert version_of(arm) == "1" and version_of("azureml:" + arm) == "1"
            spec = resolve(session, workspace, "azureml:resolve_me:2", None)
            assert spec.name == "resolve_me" and spec.code is not None and spec.code.startswith("codes/")
            local = resolve(session, workspace, "./train.yml", tmp_path)
            assert local.name == "train_model" and local.code == str(tmp_path / "src")
            assert resolve(session, workspace, {"command": "echo"}, None).name is None
            for ref, base, words in (
                ("azureml:resolve_me:9", tmp_path, "create it first"),
                ("azureml:no_such@latest", tmp_path, "create it first"),
                ("./train.yml", None, "is a local file"),
                ("./missing.yml", tmp_path, "cannot read component file"),
            ):
                with pytest.raises(CloudletError) as info:
                    resolve(session, workspace, ref, base)
                assert info.value.target == "$" and words in info.value.message, info.value
            # An inline component (its code uploaded): registered under its content hash, once.
            inline = parse_component({**TRAIN, "name": None, "code": spec.code})
            ref = WorkspaceRef(srv.subscription_id, "default", "default")
            caller = Caller(0, "test", is_admin=True)
            data = DataRoot(srv.home / "data")
            first = register_anonymous(session, ref, workspace, inline, caller, data)
            again = register_anonymous(session, ref, workspace, inline, caller, data)
            assert (first.name, first.id) == ("azureml_anonymous", again.id)
            assert first.version == component_hash(inline, spec.code)
            session.rollback()  # the test's writes are not the server's
    finally:
        engine.dispose()
