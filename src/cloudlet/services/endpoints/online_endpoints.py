"""Online endpoints and deployments: the use cases behind the native REST routes (issue 14).

Each call is one unit of work on the store: validate the whole document
(``domain/endpoints/online_endpoints``)
and what it names (the code snapshot, the model, the size), then write. The replicas themselves
are run by ``control/online_loop.OnlineLoop``, a reconcile loop over what these calls store: each
write records the effect and its commit wakes the loop (``services/core/effects.py``).

Keys are two random secrets per endpoint; an ``aml_token`` is ``<expiry>.<HMAC>`` signed with the
server's token secret over the endpoint and its primary key, so regenerating the primary key also
ends every token minted from it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.domain.assets import environments
from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.compute.nodes import NodeState
from cloudlet.domain.compute.quota import CoreRequest, Tier, check_request
from cloudlet.domain.endpoints import mlflow_models
from cloudlet.domain.endpoints import online_endpoints as rules
from cloudlet.domain.errors import CloudletError, not_found, validation_error
from cloudlet.domain.resources import ONLINE_DEPLOYMENTS
from cloudlet.services.access import audit
from cloudlet.services.assets import assets as asset_service
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.compute import quotas
from cloudlet.services.core import effects
from cloudlet.services.core.clock import iso, utcnow
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.endpoints.mlflow_models import environment as mlflow_environment
from cloudlet.services.endpoints.mlflow_models import registered_model
from cloudlet.store.schema import (
    Asset,
    CodeAsset,
    Compute,
    Node,
    OnlineDeployment,
    OnlineEndpoint,
    Workspace,
)

TOKEN_TTL_S = 3600
KEY_TYPES = ("Primary", "Secondary")


def new_key() -> str:
    return secrets.token_urlsafe(32)


def _target(ref: WorkspaceRef, endpoint: str, deployment: str | None = None) -> str:
    base = f"{ref.arm_id}/onlineEndpoints/{endpoint}"
    return base if deployment is None else f"{base}/deployments/{deployment}"


def _changed(session: Session) -> None:
    """Endpoints' or deployments' desired state was written: its commit wakes the online loop."""
    effects.endpoints_changed(session)


def get_endpoint(session: Session, ws: Workspace, name: str) -> OnlineEndpoint:
    row = session.scalar(
        select(OnlineEndpoint).where(OnlineEndpoint.workspace_id == ws.id, OnlineEndpoint.name == name)
    )
    if row is None:
        raise not_found("Online endpoint", name)
    return row


def list_endpoints(session: Session, ws: Workspace) -> list[OnlineEndpoint]:
    return list(
        session.scalars(
            select(OnlineEndpoint).where(OnlineEndpoint.workspace_id == ws.id).order_by(OnlineEndpoint.name)
        )
    )


def deployments_of(session: Session, endpoint: OnlineEndpoint) -> list[OnlineDeployment]:
    return list(
        session.scalars(
            select(OnlineDeployment)
            .where(OnlineDeployment.endpoint_id == endpoint.id)
            .order_by(OnlineDeployment.name)
        )
    )


def get_deployment(session: Session, endpoint: OnlineEndpoint, name: str) -> OnlineDeployment:
    row = session.scalar(
        select(OnlineDeployment).where(
            OnlineDeployment.endpoint_id == endpoint.id, OnlineDeployment.name == name
        )
    )
    if row is None:
        raise not_found("Online deployment", name)
    return row


def spec_of(row: OnlineEndpoint) -> rules.EndpointSpec:
    return rules.parse_endpoint(row.spec, row.name)


@dataclass
class Written:
    row: Any
    created: bool


def put_endpoint(
    session: Session, ref: WorkspaceRef, ws: Workspace, name: str, doc: Any, actor: str
) -> Written:
    spec = rules.parse_endpoint(doc, name)
    row = session.scalar(
        select(OnlineEndpoint).where(OnlineEndpoint.workspace_id == ws.id, OnlineEndpoint.name == name)
    )
    created = row is None
    if row is None:
        row = OnlineEndpoint(
            workspace_id=ws.id,
            name=name,
            spec=spec.to_doc(),
            primary_key=new_key(),
            secondary_key=new_key(),
            provisioning_state="Succeeded",
            created_by=actor,
            created_on=utcnow(),
        )
        session.add(row)
        session.flush()
    else:
        if spec.auth_mode != row.spec.get("auth_mode"):
            raise validation_error(
                "auth_mode", "an endpoint's auth_mode cannot change; delete and re-create it"
            )
        row.spec = spec.to_doc()
    _check_traffic_names(session, row, spec)
    _changed(session)
    audit.record(
        session,
        actor,
        "onlineendpoint.create" if created else "onlineendpoint.update",
        _target(ref, name),
        spec.to_doc(),
    )
    return Written(row, created)


def _check_traffic_names(session: Session, row: OnlineEndpoint, spec: rules.EndpointSpec) -> None:
    known = {d.name for d in deployments_of(session, row)}
    for field_name, weights in (("traffic", spec.traffic), ("mirror_traffic", spec.mirror_traffic)):
        for name, weight in weights.items():
            if weight > 0 and name not in known:
                raise validation_error(
                    f"{field_name}.{name}",
                    f"endpoint '{row.name}' has no deployment '{name}'; "
                    f"deployments: {', '.join(sorted(known)) or 'none'}",
                )


def update_traffic(
    session: Session,
    ref: WorkspaceRef,
    row: OnlineEndpoint,
    actor: str,
    traffic: dict[str, int] | None = None,
    mirror: dict[str, int] | None = None,
) -> OnlineEndpoint:
    doc = dict(row.spec)
    if traffic is not None:
        doc["traffic"] = traffic
    if mirror is not None:
        doc["mirror_traffic"] = mirror
    ws = session.get(Workspace, row.workspace_id)
    assert ws is not None
    return put_endpoint(session, ref, ws, row.name, doc, actor).row


def delete_endpoint(session: Session, ref: WorkspaceRef, row: OnlineEndpoint, actor: str) -> None:
    for deployment in deployments_of(session, row):
        session.delete(deployment)
    session.delete(row)
    _changed(session)
    audit.record(session, actor, "onlineendpoint.delete", _target(ref, row.name))


def keys(row: OnlineEndpoint) -> dict[str, str]:
    if row.spec.get("auth_mode") != "key":
        raise CloudletError(
            "WrongAuthMode",
            f"endpoint '{row.name}' uses aml_token: ask for a token (get-credentials)",
            "auth_mode",
        )
    return {"primaryKey": row.primary_key, "secondaryKey": row.secondary_key}


def regenerate(session: Session, ref: WorkspaceRef, row: OnlineEndpoint, key_type: str, actor: str) -> None:
    kind = key_type.capitalize()
    if kind not in KEY_TYPES:
        raise validation_error("keyType", f"keyType '{key_type}' is not Primary or Secondary")
    if kind == "Primary":
        row.primary_key = new_key()
    else:
        row.secondary_key = new_key()
    _changed(session)
    audit.record(session, actor, "onlineendpoint.regeneratekeys", _target(ref, row.name), {"keyType": kind})


def _signature(secret: str, endpoint_id: int, primary_key: str, expiry: int) -> str:
    message = f"{endpoint_id}|{expiry}|{primary_key}".encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def token(secret: str, row: OnlineEndpoint, now: float | None = None) -> dict[str, Any]:
    if row.spec.get("auth_mode") != "aml_token":
        raise CloudletError(
            "WrongAuthMode", f"endpoint '{row.name}' uses keys: list its keys (get-credentials)", "auth_mode"
        )
    issued = int(now if now is not None else time.time())
    expiry = issued + TOKEN_TTL_S
    return {
        "accessToken": f"{expiry}.{_signature(secret, row.id, row.primary_key, expiry)}",
        "expiryTimeUtc": expiry,
        "refreshAfterTimeUtc": issued + TOKEN_TTL_S // 2,
        "tokenType": "Bearer",
    }


def token_valid(secret: str, endpoint_id: int, primary_key: str, value: str, now: float) -> bool:
    expiry_text, _, signature = value.partition(".")
    if not expiry_text.isdigit() or int(expiry_text) < now:
        return False
    want = _signature(secret, endpoint_id, primary_key, int(expiry_text))
    return hmac.compare_digest(want, signature)


def _check_code(session: Session, ws: Workspace, uri: str, target: str) -> None:
    digest = uri.removeprefix("codes/")
    if not session.scalar(
        select(CodeAsset.id).where(CodeAsset.workspace_id == ws.id, CodeAsset.hash == digest)
    ):
        raise validation_error(target, f"no uploaded code '{uri}' in this workspace; upload the folder first")


def model_type(session: Session, ws: Workspace, model: str) -> str | None:
    """A registered model's type (its asset's); None for an uploaded folder (its document says)."""
    asset = registered_model(session, ws, model)
    return None if asset is None else str(asset.spec.get("type") or "custom_model")


def no_code(
    session: Session, ws: Workspace, spec: rules.DeploymentSpec, data: DataRoot | None
) -> rules.DeploymentSpec:
    """SPEC with its model's type known; one without code_configuration must be an MLflow model,
    scored by cloudlet's MLflow scorer, and without an environment it gets one from the model's
    own dependencies (as Azure builds it)."""
    kind = spec.model_type or model_type(session, ws, spec.model)
    spec = dataclasses.replace(spec, model_type=kind)
    mlflow_models.check_scoring(spec.code is not None, kind, "an online deployment")
    if spec.code is not None or spec.environment is not None or data is None:
        return spec
    where = model_path(data, ws.id, model_source(session, ws, spec.model))
    env = mlflow_environment(*where)
    return dataclasses.replace(spec, environment=str(env["name"]), environment_doc=env)


def model_source(session: Session, ws: Workspace, model: str) -> str:
    """What the replica unpacks or links as its model: ``codes/<sha>``, or a datastore path (an
    uploaded folder's, or a model asset's)."""
    if model.startswith("codes/"):
        _check_code(session, ws, model, "model")
        return model
    if model.startswith("azureml://datastores/"):  # an uploaded folder or file: kept by its name
        return model
    parts = model.removeprefix("azureml:").split(":")
    if len(parts) != 2:
        raise validation_error("model", f"model '{model}' is not azureml:<name>:<version>")
    asset = session.scalar(
        select(Asset).where(
            Asset.workspace_id == ws.id,
            Asset.kind == "model",
            Asset.name == parts[0],
            Asset.version == parts[1],
        )
    )
    if asset is None:
        raise validation_error("model", f"no model '{parts[0]}' version {parts[1]} in this workspace")
    return str(asset.spec.get("path") or "")


def _check_size_and_quota(
    session: Session,
    ref: WorkspaceRef,
    ws: Workspace,
    endpoint: OnlineEndpoint,
    spec: rules.DeploymentSpec,
    local: bool,
) -> None:
    """A managed deployment's replicas hold instance_count × the size's cores of the workspace's
    location, against the same family and total quotas as clusters and instances (an update's
    own cores are not counted twice; a local deployment holds none)."""
    catalogue = catalogue_service.current(session)
    size = catalogue.get(spec.instance_type)
    if size is None:
        raise validation_error(
            "instance_type",
            f"'{spec.instance_type}' is not a size of this installation; see `cloudlet compute list-sizes`",
        )
    if local or spec.compute:
        return  # a compute instance holds its own cores already
    holder = f"online deployment {endpoint.name}/{spec.name}"
    request = CoreRequest(
        holder,
        size.family,
        Tier.DEDICATED,
        size.vcpus,
        spec.scale_settings.max_instances if spec.scale_settings else spec.instance_count,
        "scale_settings.max_instances" if spec.scale_settings else "instance_count",
    )
    current = quotas.limits(session, ref.subscription_id, ws.location, catalogue)
    others = [
        h
        for h in quotas.holders(session, ref.subscription_id, ws.location, catalogue)
        if not (h.compute == holder and h.workspace == ws.name)
    ]
    check_request(current, others, request)


def _check_placement(session: Session, ws: Workspace, spec: rules.DeploymentSpec, local: bool) -> None:
    """``compute`` names a compute instance of the workspace; an inline environment resolves."""
    if spec.environment_doc is not None:
        environments.resolve_environment(spec.environment_doc)  # errors name environment.*
    if spec.compute is None:
        return
    if local:
        raise validation_error(
            "compute", "a --local deployment runs on this machine: drop 'compute' or drop --local"
        )
    compute = session.scalar(
        select(Compute).where(Compute.workspace_id == ws.id, Compute.name == spec.compute)
    )
    if compute is None or compute.type.lower() != ComputeType.COMPUTE_INSTANCE:
        what = (
            f"no compute '{spec.compute}'"
            if compute is None
            else f"'{spec.compute}' is a {compute.type}, not a compute instance,"
        )
        raise validation_error(
            "compute",
            f"{what} in this workspace; name a compute instance (cloudlet compute list), "
            "or omit 'compute' for nodes made for the deployment",
        )


def registered_environment(
    session: Session, ws: Workspace, spec: rules.DeploymentSpec
) -> rules.DeploymentSpec:
    """SPEC with a registered ``environment`` (``azureml:<name>:<version>``, ``@latest``, an ARM id)
    replaced by that version's definition, as a job's is (``services.assets.assets.resolve_environment``):
    the version is pinned when the deployment is written, and its replicas' nodes build it."""
    if spec.environment_doc is not None:
        return spec
    inline, found = asset_service.resolve_environment(session, ws, spec.environment)
    if found is None:
        return spec
    return dataclasses.replace(spec, environment=found.name, environment_doc=inline)


def put_deployment(
    session: Session,
    ref: WorkspaceRef,
    ws: Workspace,
    endpoint: OnlineEndpoint,
    name: str,
    doc: Any,
    actor: str,
    local: bool = False,
    data: DataRoot | None = None,
) -> Written:
    spec = registered_environment(session, ws, rules.parse_deployment(doc, endpoint.name, name))
    if spec.code is not None:
        _check_code(session, ws, spec.code, "code_configuration.code")
    model_source(session, ws, spec.model)
    spec = no_code(session, ws, spec, data)
    row = session.scalar(
        select(OnlineDeployment).where(
            OnlineDeployment.endpoint_id == endpoint.id, OnlineDeployment.name == name
        )
    )
    _check_placement(session, ws, spec, local)
    _check_size_and_quota(session, ref, ws, endpoint, spec, local)
    created = row is None
    if row is None:
        row = OnlineDeployment(
            endpoint_id=endpoint.id,
            name=name,
            spec=spec.to_doc(),
            provisioning_state="Creating",
            stage="provisioning",
            reason=None,
            generation=1,
            local=local,
            created_by=actor,
            created_on=utcnow(),
        )
        session.add(row)
    else:
        row.spec = spec.to_doc()
        row.generation += 1
        row.provisioning_state = "Updating"
        row.stage = "provisioning"
        row.local = local
    session.flush()
    _changed(session)
    audit.record(
        session,
        actor,
        "onlinedeployment.create" if created else "onlinedeployment.update",
        _target(ref, endpoint.name, name),
        spec.to_doc(),
    )
    return Written(row, created)


def delete_deployment(
    session: Session, ref: WorkspaceRef, endpoint: OnlineEndpoint, row: OnlineDeployment, actor: str
) -> None:
    rules.check_deletable(spec_of(endpoint), row.name)
    mirror = dict(endpoint.spec.get("mirror_traffic") or {})
    if row.name in mirror:
        mirror.pop(row.name)
        endpoint.spec = {**endpoint.spec, "mirror_traffic": mirror}
    session.delete(row)
    _changed(session)
    audit.record(session, actor, "onlinedeployment.delete", _target(ref, endpoint.name, row.name))


def nodes_of(session: Session, row: OnlineDeployment) -> list[dict[str, Any]]:
    """The live nodes made for ROW's replicas (list-nodes' shape)."""
    nodes = session.scalars(
        select(Node)
        .where(
            Node.owner_type == ONLINE_DEPLOYMENTS,
            Node.owner_id == row.id,
            Node.state != NodeState.TERMINATED.value,
        )
        .order_by(Node.created_at)
    )
    return [node_service.render(n) for n in nodes]


def record_stage(
    session: Session, deployment_id: int, generation: int, stage: str, state: str, reason: str | None
) -> None:
    """The runtime's report of a generation's progress; a stale generation's report is dropped."""
    row = session.get(OnlineDeployment, deployment_id)
    if row is None or row.generation != generation:
        return
    row.stage, row.provisioning_state, row.reason = stage, state, reason


def scoring_uri(base: str, ref: WorkspaceRef, endpoint: str) -> str:
    return f"{base}/online/{ref.subscription_id}/{ref.resource_group}/{ref.workspace}/{endpoint}/score"


def render_endpoint(row: OnlineEndpoint, ref: WorkspaceRef, base: str) -> dict[str, Any]:
    uri = scoring_uri(base, ref, row.name)
    return {
        "id": _target(ref, row.name),
        **row.spec,
        "scoring_uri": uri,
        "swagger_uri": uri.removesuffix("/score") + "/swagger.json",
        "provisioning_state": row.provisioning_state,
        "created_by": row.created_by,
        "created_on": iso(row.created_on),
    }


def render_deployment(
    row: OnlineDeployment, ref: WorkspaceRef, endpoint: str, live: dict[str, Any]
) -> dict[str, Any]:
    return {
        "id": _target(ref, endpoint, row.name),
        **row.spec,
        "provisioning_state": row.provisioning_state,
        "stage": row.stage,
        "reason": row.reason,
        "generation": row.generation,
        "local": row.local,
        # autoscale's current count (None until it has one), which a restart starts from
        "autoscaled_instances": row.autoscaled_instances,
        **live,
        "created_by": row.created_by,
        "created_on": iso(row.created_on),
    }


def model_path(data: DataRoot, ws_id: int, source: str) -> tuple[str, str]:
    """(kind, where) of a model source: ``("code", <tar.gz>)`` or ``("path", <folder or file>)``."""
    if source.startswith("codes/"):
        return "code", str(data.code(ws_id, source.removeprefix("codes/")))
    prefix = "azureml://datastores/"
    if source.startswith(prefix):
        store, _, rest = source.removeprefix(prefix).partition("/paths/")
        return "path", str(data.datastore_path(ws_id, store, rest))
    raise validation_error("model", f"the model's path '{source}' is not in a datastore of this workspace")
