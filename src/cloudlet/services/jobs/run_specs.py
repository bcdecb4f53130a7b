"""How an attempt's run specs are made: one per process, in rank order, with the job's inputs and
outputs resolved to the paths the node sees, its environment, its credentials and its downloads
(docs/agent-protocol.md, the run spec). ``services/jobs/dispatch`` places them."""

from __future__ import annotations

import dataclasses
import random
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.domain.assets import environments
from cloudlet.domain.jobs import job_inputs, job_outcome, job_spec
from cloudlet.domain.paths import parse_datastore_uri
from cloudlet.services.compute import compute_identity
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.tracking import tracking, tracking_tokens
from cloudlet.store.schema import Compute

SINGLE_LOG = job_outcome.SINGLE_LOG
# Folders of a run's working directory kept as the attempt's default artifacts (as on Azure ML).
DEFAULT_ARTIFACTS = ("outputs", "logs")


@dataclass(frozen=True)
class Attempt:
    """What placing an attempt needs of its job, from an object or a row."""

    name: str
    workspace_id: int
    compute_name: str | None
    spec: dict[str, Any]
    number: int  # the attempt being started


def run_specs(
    session: Session,
    attempt: Attempt,
    nodes: list[tuple[str, str]],
    data: DataRoot,
    server_url: str,
    compute: Compute | None,
) -> list[tuple[str, dict[str, Any]]]:
    """(node id, run spec) for each process of the attempt, in rank order; NODES are (id, address)
    pairs, one per instance."""
    doc, name = attempt.spec, attempt.name
    inputs, outputs = _resolve_io(attempt.workspace_id, name, doc, data)
    downloads = job_inputs.downloads(doc)
    inputs.update({d["input"]: d["placeholder"] for d in downloads})
    artifacts = data.job_artifacts(attempt.workspace_id, name, attempt.number)
    command = job_spec.render_command(doc["command"], inputs, outputs)
    port = random.randint(20000, 29999)
    world = [address for _, address in nodes]
    if doc.get("distribution"):  # re-validating the stored spec costs ms: only when it matters
        spec = job_spec.parse_job(doc, name)
        per_node = job_spec.distribution_envs(spec, world, port)
    else:
        per_node = [[{}] for _ in nodes]
    total = sum(len(envs) for envs in per_node)
    checkpoints = data.checkpoints(attempt.workspace_id, name)  # the agent makes it: off this path
    base_env = {
        **{str(k): str(v) for k, v in (doc.get("environment_variables") or {}).items()},
        "AZUREML_RUN_ID": name,
        "CLOUDLET_JOB": name,
        "CLOUDLET_ATTEMPT": str(attempt.number),
        "CLOUDLET_CHECKPOINT_DIR": str(checkpoints),
        **{f"AZUREML_OUTPUT_{k}": v for k, v in outputs.items()},
        **{f"AZURE_ML_INPUT_{k}": v for k, v in inputs.items()},
    }
    mounts = _mounts(doc, inputs, outputs, str(checkpoints))
    mounts += [{"path": str(artifacts / folder), "mode": "rw"} for folder in DEFAULT_ARTIFACTS]
    environment = dataclasses.asdict(environments.resolve_environment(doc.get("environment")))
    base_env.update(_identity_env(session, attempt, server_url, compute))
    # MLflow attaches to the job's own run, unless the job names a tracking server of its own; the
    # run's token is signed in on delivery, never stored (services/tracking/tracking_tokens.py).
    ours = tracking.job_environment(session, attempt.workspace_id, name, doc, server_url)
    token, uri = None, ours["MLFLOW_TRACKING_URI"]
    own_server = base_env.get("MLFLOW_TRACKING_URI", uri) == uri
    if own_server and tracking_tokens.TOKEN_ENV not in base_env:
        token = tracking_tokens.token_claims(attempt.workspace_id, name, doc)
    for key, value in ours.items():
        base_env.setdefault(key, value)
    code = doc.get("code")
    # A path: the agent fetches it from the endpoint it dials (HTTPS for a node on another host),
    # with its node token; an absolute URL to another origin would go without it.
    code_url = f"/agent/v1/codes/{attempt.workspace_id}/{code.split('/', 1)[1]}" if code else None
    specs: list[tuple[str, dict[str, Any]]] = []
    for (node_id, _), envs in zip(nodes, per_node, strict=True):
        for env in envs:
            process = len(specs)
            run_spec = {
                "run": f"r-{secrets.token_hex(6)}",
                "job": name,
                "attempt": attempt.number,
                "rank": process,
                "command": command,
                "cwd_code": code_url,
                "env": {**base_env, **env},
                "timeout_s": (doc.get("limits") or {}).get("timeout"),
                "log_name": SINGLE_LOG if total == 1 else f"user_logs/std_log_process_{process}.txt",
                "environment": environment,
                "mounts": mounts,
                "downloads": downloads,
                "default_artifacts": str(artifacts),
            }
            if token is not None:
                run_spec[tracking_tokens.TOKEN_FIELD] = token
            specs.append((node_id, run_spec))
    return specs


def _identity_env(
    session: Session, attempt: Attempt, server_url: str, compute: Compute | None
) -> dict[str, str]:
    if compute is None:
        compute = session.scalar(
            select(Compute).where(
                Compute.workspace_id == attempt.workspace_id, Compute.name == attempt.compute_name
            )
        )
    if compute is None:
        return {}
    lifetime = int((attempt.spec.get("limits") or {}).get("timeout") or 3600) + 600
    token = compute_identity.compute_identity_token(
        session, compute.name, compute.workspace_id, compute.spec.get("identity"), lifetime
    )
    if token is None:
        return {}
    return {
        "CLOUDLET_IDENTITY_TOKEN": token,
        "CLOUDLET_ENDPOINT": server_url,
        "DEFAULT_IDENTITY_CLIENT_ID": f"{compute.name}@identity",
    }


def _resolve_io(
    workspace_id: int, job_name: str, doc: dict[str, Any], data: DataRoot
) -> tuple[dict[str, str], dict[str, str]]:
    inputs: dict[str, str] = {}
    for name, value in (doc.get("inputs") or {}).items():
        if job_inputs.is_download(value):
            continue  # the node downloads it (job_inputs.downloads)
        if isinstance(value, dict) and value.get("type") in job_spec.PATH_TYPES:
            parsed = parse_datastore_uri(str(value["path"]))
            assert parsed is not None  # checked at submission
            inputs[name] = str(data.datastore_path(workspace_id, *parsed))
        elif isinstance(value, dict):
            inputs[name] = str(value.get("value", value.get("default", "")))
        else:
            inputs[name] = str(value)
    outputs = {}
    for name, value in (doc.get("outputs") or {}).items():
        path = _output_path(workspace_id, job_name, name, value, data)
        (path.parent if _is_file(value) else path).mkdir(parents=True, exist_ok=True)
        outputs[name] = str(path)
    return inputs, outputs


def _output_path(workspace_id: int, job_name: str, name: str, value: Any, data: DataRoot) -> Path:
    """Where an output is written: its ``path`` when that is a datastore URI (a pipeline step's
    outputs always have one), else ``<default datastore>/azureml/<job>/<output>``."""
    given = value.get("path") if isinstance(value, dict) else None
    parsed = parse_datastore_uri(given) if isinstance(given, str) else None
    if parsed is None:
        return data.job_output(workspace_id, job_name, name)
    return data.datastore_path(workspace_id, *parsed)


def _is_file(value: Any) -> bool:
    return isinstance(value, dict) and value.get("type") == "uri_file"


def _mounts(
    doc: dict[str, Any], inputs: dict[str, str], outputs: dict[str, str], checkpoints: str
) -> list[dict[str, str]]:
    """The datastore paths a run's sandbox sees (docs/agent-protocol.md, ``mounts``): its path
    inputs read-only (read-write for ``mode: rw_mount``), its outputs and checkpoints read-write."""
    mounts = []
    for name, value in (doc.get("inputs") or {}).items():
        if (
            isinstance(value, dict)
            and value.get("type") in job_spec.PATH_TYPES
            and not job_inputs.is_download(value)
        ):
            mounts.append({"path": inputs[name], "mode": "rw" if value.get("mode") == "rw_mount" else "ro"})
    declared = doc.get("outputs") or {}
    for name, path in outputs.items():  # a uri_file output: the folder it is written in
        mounts.append(
            {"path": str(Path(path).parent) if _is_file(declared.get(name)) else path, "mode": "rw"}
        )
    mounts.append({"path": checkpoints, "mode": "rw"})
    return mounts
