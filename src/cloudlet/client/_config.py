"""Client-side configuration: ``$CLOUDLET_HOME/config.json``, ``credentials`` and env overrides.

The server writes both files on first start (see docs/api.md). ``CLOUDLET_ENDPOINT`` and
``CLOUDLET_API_KEY`` override the files; explicit arguments (CLI flags, ``MLClient`` parameters)
override everything.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

NO_SERVER_MESSAGE = "no cloudlet server configured: start one with `cloudlet server` or set CLOUDLET_ENDPOINT"
NO_SUBSCRIPTION_MESSAGE = (
    "no subscription configured: pass --subscription (subscription_id=...) or start a server with "
    "`cloudlet server`, which writes $CLOUDLET_HOME/config.json"
)


class ConfigurationError(Exception):
    """The client cannot work out where the server is, or which resource to address."""


def cloudlet_home(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    raw = env.get("CLOUDLET_HOME")
    return Path(raw).expanduser() if raw else Path.home() / ".cloudlet"


def _read_json(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc}") from exc
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigurationError(f"{path} must hold a JSON object")
    return data


def _str_or_none(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return str(value)


@dataclass(frozen=True)
class CloudletConfig:
    """Resolved client settings. Any field may be ``None`` when nothing configures it."""

    home: Path
    endpoint: str | None = None
    api_key: str | None = None
    subscription_id: str | None = None
    resource_group: str | None = "default"
    workspace: str | None = "default"
    location: str | None = "local"
    https_endpoint: str | None = None  # the server's TLS listener (the Azure ML facade)
    ca_file: str | None = None  # the CA that signed its certificate

    def with_overrides(self, **overrides: str | None) -> CloudletConfig:
        """A copy with every non-``None`` override applied."""
        changes: dict[str, Any] = {k: v for k, v in overrides.items() if v is not None}
        return replace(self, **changes) if changes else self

    def require_endpoint(self) -> str:
        if not self.endpoint:
            raise ConfigurationError(NO_SERVER_MESSAGE)
        return self.endpoint.rstrip("/")

    def require_subscription(self) -> str:
        if not self.subscription_id:
            raise ConfigurationError(NO_SUBSCRIPTION_MESSAGE)
        return self.subscription_id

    def require_resource_group(self) -> str:
        if not self.resource_group:
            raise ConfigurationError("no resource group configured: pass -g/--resource-group")
        return self.resource_group

    def require_workspace(self) -> str:
        if not self.workspace:
            raise ConfigurationError("no workspace configured: pass -w/--workspace")
        return self.workspace


def load_config(home: str | Path | None = None, env: Mapping[str, str] | None = None) -> CloudletConfig:
    """Read ``config.json`` and ``credentials`` under ``home`` (default ``$CLOUDLET_HOME``), then env."""
    env = os.environ if env is None else env
    root = Path(home).expanduser() if home is not None else cloudlet_home(env)
    cfg = _read_json(root / "config.json")
    creds = _read_json(root / "credentials")
    endpoint = _str_or_none(env.get("CLOUDLET_ENDPOINT")) or _str_or_none(cfg.get("endpoint"))
    api_key = _str_or_none(env.get("CLOUDLET_API_KEY")) or _str_or_none(creds.get("api_key"))
    return CloudletConfig(
        home=root,
        endpoint=endpoint.rstrip("/") if endpoint else None,
        api_key=api_key,
        subscription_id=_str_or_none(cfg.get("subscription_id")),
        resource_group=_str_or_none(cfg.get("resource_group")) or "default",
        workspace=_str_or_none(cfg.get("workspace")) or "default",
        location=_str_or_none(cfg.get("location")) or "local",
        https_endpoint=_str_or_none(env.get("CLOUDLET_HTTPS_ENDPOINT"))
        or _str_or_none(cfg.get("https_endpoint")),
        ca_file=_str_or_none(env.get("CLOUDLET_CA_FILE")) or _str_or_none(cfg.get("ca_file")),
    )
