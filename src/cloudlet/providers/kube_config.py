"""A Kubernetes location's settings (closed: an unknown or malformed field is a 400 naming it) and
the factory that builds its provider (``providers/kube.py``)."""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from cloudlet.providers.base import NodeProvider, ProviderContext
from cloudlet.providers.kube import ClusterAccess, KubernetesProvider
from cloudlet.providers.kube_pods import PodSettings

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$")


def _check_selector(selector: dict[str, str]) -> dict[str, str]:
    for key, value in selector.items():
        prefix, _, name = key.rpartition("/")
        if (prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix))) or not (
            len(name) <= 63 and _LABEL_NAME.match(name)
        ):
            raise ValueError(f"'{key}' is not a Kubernetes label key (e.g. kubernetes.io/arch)")
        if len(value) > 63 or not _LABEL_VALUE.match(value):
            raise ValueError(
                f"'{value}' (for '{key}') is not a label value: 63 characters of A-Z a-z 0-9 . _ -"
            )
    return selector


class KubernetesConfig(BaseModel):
    """Nodes as pods on a Kubernetes cluster (``providers/kube.py``; docs/providers.md)."""

    model_config = ConfigDict(extra="forbid")
    in_cluster: bool = Field(
        default=False, description="use the service account of the pod the server runs in (no kubeconfig)"
    )
    kubeconfig: str | None = Field(
        default=None,
        max_length=4096,
        validate_default=True,
        description="absolute path of the kubeconfig file on the server's host (unless in_cluster)",
    )
    context: str | None = Field(
        default=None, max_length=253, description="the kubeconfig context (default: its current one)"
    )
    namespace: str = Field(
        max_length=63, description="the namespace the node pods and their Secrets are made in"
    )
    image: str = Field(
        max_length=512,
        description="the node agent's image (cloudlet[server] installed; bwrap for sandbox: bwrap)",
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    image_pull_secrets: list[str] = Field(
        default_factory=list, max_length=16, description="Secrets to pull the image with"
    )
    service_account: str | None = Field(default=None, max_length=253, description="the pods' service account")
    node_selector: dict[str, str] = Field(
        default_factory=dict,
        max_length=32,
        description="labels every node pod's Kubernetes node must carry (and capacity counts)",
    )
    size_node_selectors: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        max_length=256,
        description="per size name, labels its pods' nodes must carry as well",
    )
    node_dir: str = Field(
        default="/var/lib/cloudlet/node",
        max_length=4096,
        description="the node directory in the pod (an emptyDir)",
    )
    sandbox: Literal["bwrap", "none"] = Field(
        default="bwrap",
        description="run jobs in bubblewrap inside the pod (the image needs bwrap), or as the agent's user",
    )
    server_url: str | None = Field(
        default=None,
        max_length=2048,
        description="the control plane's URL as the pods reach it (default: the server's)",
    )
    request_timeout_s: float = Field(
        default=10.0, gt=0, le=120, description="timeout of each call to the API server"
    )

    @field_validator("kubeconfig")
    @classmethod
    def _kubeconfig(cls, value: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("in_cluster"):
            if value is not None:
                raise ValueError("give kubeconfig or in_cluster: true, not both")
            return None
        if value is None:
            raise ValueError("required: the path of a kubeconfig file (or set in_cluster: true)")
        if not os.path.isabs(value):
            raise ValueError("must be an absolute path")
        try:
            with open(value, encoding="utf-8") as f:
                loaded = yaml.safe_load(f)
        except (OSError, yaml.YAMLError) as exc:
            raise ValueError(f"cannot read {value}: {exc}") from None
        if not isinstance(loaded, dict) or not loaded.get("contexts"):
            raise ValueError(f"{value} is not a kubeconfig (no contexts)")
        return value

    @field_validator("context")
    @classmethod
    def _context(cls, value: str | None, info: ValidationInfo) -> str | None:
        path = info.data.get("kubeconfig")
        if value is None or not path:
            return value
        with open(path, encoding="utf-8") as f:
            contexts = [
                c.get("name") for c in (yaml.safe_load(f) or {}).get("contexts") or [] if isinstance(c, dict)
            ]
        if value not in contexts:
            raise ValueError(f"no context '{value}' in {path}; it has: {', '.join(map(str, contexts))}")
        return value

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        if not _DNS_LABEL.match(value):
            raise ValueError("must be a DNS label: lower-case letters, digits and '-' (e.g. cloudlet-nodes)")
        return value

    @field_validator("service_account")
    @classmethod
    def _service_account(cls, value: str | None) -> str | None:
        if value is not None and not _DNS_SUBDOMAIN.match(value):
            raise ValueError("must be a DNS subdomain name: lower-case letters, digits, '-' and '.'")
        return value

    @field_validator("image_pull_secrets")
    @classmethod
    def _pull_secrets(cls, value: list[str]) -> list[str]:
        for name in value:
            if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
                raise ValueError(f"'{name}' is not a Secret name: lower-case letters, digits, '-' and '.'")
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        if not _IMAGE.match(value):
            raise ValueError("must be an image reference, e.g. registry.example/cloudlet-agent:1.0")
        return value

    @field_validator("node_selector")
    @classmethod
    def _node_selector(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_selector(value)

    @field_validator("size_node_selectors")
    @classmethod
    def _size_node_selectors(cls, value: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        for size, selector in value.items():
            try:
                _check_selector(selector)
            except ValueError as exc:
                raise ValueError(f"size {size}: {exc}") from None
        return value

    @field_validator("node_dir")
    @classmethod
    def _node_dir(cls, value: str) -> str:
        if not os.path.isabs(value) or value.rstrip("/") in ("", "/tmp", "/etc", "/usr", "/bin"):
            raise ValueError("must be an absolute path of its own, e.g. /var/lib/cloudlet/node")
        return value

    @field_validator("server_url")
    @classmethod
    def _server_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^\s/]+(/\S*)?$", value):
            raise ValueError(
                "must be an http(s) URL the pods reach the server at, e.g. https://cloudlet.lab:8572"
            )
        return value.rstrip("/") if value else value


def server_addresses(config: Mapping[str, Any]) -> list[str]:
    """The host of an https ``server_url`` the pods dial (the server's TLS certificate must name
    it: ``cloudlet/tls.py``)."""
    parts = urllib.parse.urlsplit(str(config.get("server_url") or ""))
    return [parts.hostname] if parts.scheme == "https" and parts.hostname else []


def kubernetes_provider(config: KubernetesConfig, context: ProviderContext) -> NodeProvider:
    settings = PodSettings(
        namespace=config.namespace,
        image=config.image,
        node_dir=config.node_dir,
        service_account=config.service_account,
        image_pull_secrets=tuple(config.image_pull_secrets),
        node_selector=dict(config.node_selector),
        size_node_selectors={k: dict(v) for k, v in config.size_node_selectors.items()},
        image_pull_policy=config.image_pull_policy,
        sandbox=config.sandbox,
        server_url=config.server_url,
    )
    access = ClusterAccess(
        kubeconfig=config.kubeconfig,
        context=config.context,
        in_cluster=config.in_cluster,
        timeout_s=config.request_timeout_s,
    )
    return KubernetesProvider(settings, access, installation_id=context.installation_id)
