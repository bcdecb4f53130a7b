"""Python client for a cloudlet server, shaped like ``azure.ai.ml``.

>>> from cloudlet.client import MLClient, AmlCompute
>>> ml_client = MLClient()  # endpoint, key, subscription, resource group, workspace from ~/.cloudlet
>>> cluster = AmlCompute(name="cpu-cluster", size="Standard_DS3_v2", min_instances=0, max_instances=2)
>>> ml_client.begin_create_or_update(cluster).result()  # doctest: +SKIP
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, NamedTuple

import httpx

from cloudlet.client._config import (
    NO_SERVER_MESSAGE,
    CloudletConfig,
    ConfigurationError,
    cloudlet_home,
    load_config,
)
from cloudlet.client._rest import (
    API_PREFIX,
    ClientAuthenticationError,
    CloudletClientError,
    HttpResponseError,
    ODataV4Error,
    ResourceExistsError,
    ResourceNotFoundError,
    RestClient,
    ServiceRequestError,
    ws_path,
)
from cloudlet.client.access import AuditOperations, PrincipalOperations
from cloudlet.client.assets import (
    AssetTypes,
    AssetValidationError,
    BuildContext,
    Data,
    DataOperations,
    Environment,
    EnvironmentOperations,
    Model,
    ModelOperations,
    load_data,
    load_environment,
    load_model,
)
from cloudlet.client.batch_endpoints import BatchDeploymentOperations, BatchEndpointOperations
from cloudlet.client.components import Component, ComponentOperations, load_component
from cloudlet.client.entities import (
    AmlCompute,
    AmlComputeSshSettings,
    Compute,
    ComputeInstance,
    ComputeInstanceSshSettings,
    IdentityConfiguration,
    KubernetesCompute,
    Lock,
    Operation,
    Quota,
    SshSettings,
    Usage,
    VirtualMachineCompute,
    VirtualMachineSshSettings,
    VmSize,
    Workspace,
)
from cloudlet.client.events import EventOperations
from cloudlet.client.jobs import (
    CommandJob,
    Input,
    Job,
    JobOperations,
    JobValidationError,
    MpiDistribution,
    Output,
    PyTorchDistribution,
    TensorFlowDistribution,
    command,
    load_job,
)
from cloudlet.client.locations import LocationOperations
from cloudlet.client.online_endpoints import OnlineDeploymentOperations, OnlineEndpointOperations
from cloudlet.client.operations import (
    ComputeOperations,
    LockOperations,
    LROPoller,
    QuotaOperations,
    WorkspaceOperations,
    _Scope,
)
from cloudlet.client.schedules import ScheduleOperations


class AccessToken(NamedTuple):
    token: str
    expires_on: int


class ApiKeyCredential:
    """A cloudlet API key (``clk_…``) or access token (``clt_…``) used as a credential."""

    def __init__(self, key: str) -> None:
        self.key = key

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken(self.key, int(time.time()) + 3600)


def _token_source(credential: Any, config: CloudletConfig) -> tuple[str | None, Any]:
    """(static key, token provider) for a credential argument."""
    if credential is None:
        return config.api_key, None
    if isinstance(credential, str):
        return credential, None
    if isinstance(credential, ApiKeyCredential):
        return credential.key, None
    key = getattr(credential, "api_key", None)
    if isinstance(key, str):
        return key, None
    if hasattr(credential, "get_token"):
        return None, lambda: credential.get_token("cloudlet").token
    raise TypeError("credential must be None, an API key string, or an object with get_token()")


class MLClient:
    """Entry point: ``MLClient(credential, subscription_id, resource_group_name, workspace_name)``.

    Omitted arguments come from ``$CLOUDLET_HOME`` (``config.json``, ``credentials``) and the
    ``CLOUDLET_ENDPOINT`` / ``CLOUDLET_API_KEY`` environment variables.
    """

    def __init__(
        self,
        credential: Any = None,
        subscription_id: str | None = None,
        resource_group_name: str | None = None,
        workspace_name: str | None = None,
        endpoint: str | None = None,
        *,
        location: str | None = None,
        home: str | Path | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        **kwargs: Any,
    ) -> None:
        self._config = load_config(home).with_overrides(
            endpoint=endpoint,
            subscription_id=subscription_id,
            resource_group=resource_group_name,
            workspace=workspace_name,
            location=location,
        )
        key, provider = _token_source(credential, self._config)
        self._rest = RestClient(
            self._config.require_endpoint(),
            key,
            timeout=timeout,
            transport=transport,
            token_provider=provider,
        )
        scope = _Scope(self._config)
        self.compute = ComputeOperations(self._rest, scope)
        self.workspaces = WorkspaceOperations(self._rest, scope)
        self.locks = LockOperations(self._rest, scope)
        self.locations = LocationOperations(self._rest, scope)
        self.quotas = QuotaOperations(self._rest, scope)
        self.principals = PrincipalOperations(self._rest, scope)
        self.audit = AuditOperations(self._rest, scope)
        self.events = EventOperations(self._rest, scope)
        self.jobs = JobOperations(self._rest, scope)
        self.data = DataOperations(self._rest, scope)
        self.models = ModelOperations(self._rest, scope)
        self.environments = EnvironmentOperations(self._rest, scope)
        self.components = ComponentOperations(self._rest, scope)
        self.online_endpoints = OnlineEndpointOperations(self._rest, scope)
        self.online_deployments = OnlineDeploymentOperations(self._rest, scope)
        self.batch_endpoints = BatchEndpointOperations(self._rest, scope)
        self.batch_deployments = BatchDeploymentOperations(self._rest, scope)
        self.schedules = ScheduleOperations(self._rest, scope)

    @classmethod
    def from_config(cls, credential: Any = None, path: str | Path | None = None, **kwargs: Any) -> MLClient:
        """Build a client from ``path`` (a cloudlet home directory; default ``$CLOUDLET_HOME``)."""
        return cls(credential, home=path, **kwargs)

    @property
    def subscription_id(self) -> str | None:
        return self._config.subscription_id

    @property
    def resource_group_name(self) -> str | None:
        return self._config.resource_group

    @property
    def workspace_name(self) -> str | None:
        return self._config.workspace

    @property
    def endpoint(self) -> str:
        return self._rest.endpoint

    def begin_create_or_update(self, entity: Compute | Workspace) -> LROPoller[Any]:
        """Create or update a compute or a workspace."""
        if isinstance(entity, Compute):
            return self.compute.begin_create_or_update(entity)
        if isinstance(entity, Workspace):
            return self.workspaces.begin_create(entity)
        raise TypeError(f"cannot create or update a {type(entity).__name__}")

    def create_or_update(
        self, entity: CommandJob | Data | Model | Environment | Component | dict[str, Any]
    ) -> Any:
        """Submit a command job or create an asset version (``ml_client.create_or_update(x)``, as
        in ``azure.ai.ml``)."""
        if isinstance(entity, Data):
            return self.data.create_or_update(entity)
        if isinstance(entity, Model):
            return self.models.create_or_update(entity)
        if isinstance(entity, Environment):
            return self.environments.create_or_update(entity)
        if isinstance(entity, Component):
            return self.components.create_or_update(entity)
        return self.jobs.create_or_update(entity)

    def get_access_token(self) -> dict[str, Any]:
        """``POST /api/v1/auth/token``: ``{"access_token", "token_type", "expires_on"}``."""
        return dict(self._rest.post(f"{API_PREFIX}/auth/token"))

    def close(self) -> None:
        self._rest.close()

    def __enter__(self) -> MLClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"MLClient(endpoint={self.endpoint!r}, subscription_id={self.subscription_id!r}, "
            f"resource_group_name={self.resource_group_name!r}, workspace_name={self.workspace_name!r})"
        )


__all__ = [
    "NO_SERVER_MESSAGE",
    "AccessToken",
    "AmlCompute",
    "AmlComputeSshSettings",
    "ApiKeyCredential",
    "AssetTypes",
    "AssetValidationError",
    "AuditOperations",
    "BuildContext",
    "ClientAuthenticationError",
    "CloudletClientError",
    "CloudletConfig",
    "CommandJob",
    "Component",
    "ComponentOperations",
    "Compute",
    "ComputeInstance",
    "ComputeInstanceSshSettings",
    "ComputeOperations",
    "ConfigurationError",
    "Data",
    "DataOperations",
    "Environment",
    "EnvironmentOperations",
    "HttpResponseError",
    "IdentityConfiguration",
    "Input",
    "Job",
    "JobOperations",
    "JobValidationError",
    "KubernetesCompute",
    "LROPoller",
    "LocationOperations",
    "Lock",
    "LockOperations",
    "MLClient",
    "Model",
    "ModelOperations",
    "MpiDistribution",
    "ODataV4Error",
    "Operation",
    "Output",
    "PrincipalOperations",
    "PyTorchDistribution",
    "Quota",
    "QuotaOperations",
    "ResourceExistsError",
    "ResourceNotFoundError",
    "RestClient",
    "ServiceRequestError",
    "SshSettings",
    "TensorFlowDistribution",
    "Usage",
    "VirtualMachineCompute",
    "VirtualMachineSshSettings",
    "VmSize",
    "Workspace",
    "WorkspaceOperations",
    "cloudlet_home",
    "command",
    "load_component",
    "load_config",
    "load_data",
    "load_environment",
    "load_job",
    "load_model",
    "ws_path",
]
