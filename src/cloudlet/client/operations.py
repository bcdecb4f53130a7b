"""Operation groups of :class:`cloudlet.client.MLClient` and the ``LROPoller`` they return."""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from cloudlet.client._config import CloudletConfig
from cloudlet.client._rest import (
    API_PREFIX,
    TERMINAL_STATUSES,
    RestClient,
    compute_path,
    location_path,
    operation_error,
    operation_id_from,
    quote_segment,
    rg_path,
    ws_path,
)
from cloudlet.client.entities import Compute, Lock, Operation, Quota, Usage, VmSize, Workspace

T = TypeVar("T")


class LROPoller(Generic[T]):
    """Handle on a long-running operation (``GET /api/v1/operations/{id}``).

    ``result()`` blocks until the operation ends, raises ``HttpResponseError`` if it ``Failed`` and
    ``TimeoutError`` if ``timeout`` seconds pass first; ``wait()`` blocks without raising.
    """

    def __init__(
        self,
        rest: RestClient,
        operation_id: str | None,
        result_fn: Callable[[], T] | None = None,
        initial: T | None = None,
    ) -> None:
        self._rest = rest
        self._operation_id = operation_id
        self._result_fn = result_fn
        self._result: T | None = initial
        self._have_result = operation_id is None
        self._operation: dict[str, Any] | None = None

    @property
    def operation_id(self) -> str | None:
        return self._operation_id

    @property
    def operation(self) -> Operation | None:
        """The operation as last polled (``None`` before the first poll)."""
        return Operation(self._operation) if self._operation is not None else None

    def continuation_token(self) -> str | None:
        return self._operation_id

    def _terminal(self) -> bool:
        return self._operation_id is None or (
            self._operation is not None and self._operation.get("status") in TERMINAL_STATUSES
        )

    def _refresh(self) -> None:
        if self._operation_id is not None and not self._terminal():
            self._operation = self._rest.get_operation(self._operation_id)

    def status(self) -> str:
        """``InProgress``, ``Succeeded`` or ``Failed`` (polls once if not finished)."""
        self._refresh()
        if self._operation_id is None:
            return "Succeeded"
        return str((self._operation or {}).get("status", "InProgress"))

    def done(self) -> bool:
        self._refresh()
        return self._terminal()

    def wait(self, timeout: float | None = None) -> None:
        if self._terminal():
            return
        assert self._operation_id is not None
        try:
            self._operation = self._rest.wait_operation(self._operation_id, timeout)
        except TimeoutError:
            return

    def result(self, timeout: float | None = None) -> T:
        if not self._terminal():
            assert self._operation_id is not None
            self._operation = self._rest.wait_operation(self._operation_id, timeout)
        if self._operation is not None and self._operation.get("status") != "Succeeded":
            raise operation_error(self._operation)
        if not self._have_result:
            self._result = self._result_fn() if self._result_fn is not None else None
            self._have_result = True
        return self._result  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"LROPoller(operation_id={self._operation_id!r})"


class _Scope:
    """Resolves the subscription / resource group / workspace / location a client addresses."""

    def __init__(self, config: CloudletConfig) -> None:
        self.config = config

    @property
    def sub(self) -> str:
        return self.config.require_subscription()

    @property
    def rg(self) -> str:
        return self.config.require_resource_group()

    @property
    def ws(self) -> str:
        return self.config.require_workspace()

    def location(self, location: str | None) -> str:
        return location or self.config.location or "local"

    def ws_path(self, workspace: str | None = None) -> str:
        return ws_path(self.sub, self.rg, workspace or self.ws)

    def compute_path(self, name: str) -> str:
        return compute_path(self.sub, self.rg, self.ws, name)

    def lock_scope(self, scope: str, compute_name: str | None) -> str:
        if compute_name:
            return self.compute_path(compute_name)
        normalised = scope.replace("-", "_").lower()
        if normalised in ("resource_group", "resourcegroup", "rg"):
            return rg_path(self.sub, self.rg)
        if normalised == "workspace":
            return self.ws_path()
        raise ValueError(f"unknown lock scope {scope!r}: use resource_group, workspace or compute_name=...")


class _Operations:
    def __init__(self, rest: RestClient, scope: _Scope) -> None:
        self._rest = rest
        self._scope = scope


class ComputeOperations(_Operations):
    """``client.compute``: create, read, update, delete, start/stop/restart computes."""

    def get(self, name: str) -> Compute:
        return Compute._from_rest(self._rest.get(self._scope.compute_path(name)))

    def list(self, compute_type: str | None = None) -> builtins.list[Compute]:
        items = self._rest.list_values(f"{self._scope.ws_path()}/computes")
        computes = [Compute._from_rest(item) for item in items]
        if compute_type:
            computes = [c for c in computes if (c.type or "").lower() == compute_type.lower()]
        return computes

    def _lro(
        self, response: Any, result_fn: Callable[[], T] | None, initial: T | None = None
    ) -> LROPoller[T]:
        return LROPoller(self._rest, operation_id_from(response), result_fn, initial)

    def begin_create_or_update(self, compute: Compute) -> LROPoller[Compute]:
        """``PUT`` the compute; ``.result()`` returns it once provisioning ends."""
        path = self._scope.compute_path(compute.name)
        response = self._rest.send("PUT", path, json=compute._to_rest())
        initial = Compute._from_rest(response.json())
        return self._lro(response, lambda: self.get(compute.name), initial)

    begin_attach = begin_create_or_update

    def begin_update(self, compute: Compute) -> LROPoller[Compute]:
        """``PATCH`` the mutable fields (scale settings, idle times, description, tags)."""
        mutable = (
            "min_instances",
            "max_instances",
            "idle_time_before_scale_down",
            "idle_time_before_shutdown_minutes",
            "description",
            "tags",
        )
        body = {k: getattr(compute, k) for k in mutable if getattr(compute, k, None) is not None}
        response = self._rest.send("PATCH", self._scope.compute_path(compute.name), json=body)
        initial = Compute._from_rest(response.json())
        return self._lro(response, lambda: self.get(compute.name), initial)

    def begin_delete(self, name: str) -> LROPoller[None]:
        response = self._rest.send("DELETE", self._scope.compute_path(name))
        return self._lro(response, None)

    def _action(self, name: str, action: str) -> LROPoller[None]:
        response = self._rest.send("POST", f"{self._scope.compute_path(name)}/{action}")
        return self._lro(response, None)

    def begin_start(self, name: str) -> LROPoller[None]:
        return self._action(name, "start")

    def begin_stop(self, name: str) -> LROPoller[None]:
        return self._action(name, "stop")

    def begin_restart(self, name: str) -> LROPoller[None]:
        return self._action(name, "restart")

    def list_sizes(
        self, location: str | None = None, compute_type: str | None = None, include_retired: bool = False
    ) -> builtins.list[VmSize]:
        params = {
            "location": location,
            "compute_type": compute_type,
            "include_retired": "true" if include_retired else None,
        }
        return [VmSize(s) for s in self._rest.list_values(f"{API_PREFIX}/sizes", params=params)]

    def list_usage(self, location: str | None = None) -> builtins.list[Usage]:
        path = f"{location_path(self._scope.sub, self._scope.location(location))}/usages"
        return [Usage(u) for u in self._rest.list_values(path)]


class WorkspaceOperations(_Operations):
    """``client.workspaces``."""

    def get(self, name: str | None = None) -> Workspace:
        return Workspace._from_rest(self._rest.get(self._scope.ws_path(name)))

    def list(self) -> builtins.list[Workspace]:
        return [Workspace._from_rest(w) for w in self._rest.list_values(f"{API_PREFIX}/workspaces")]

    def begin_create(self, workspace: Workspace) -> LROPoller[Workspace]:
        """``PUT`` the workspace (admin only); completes synchronously."""
        rg = workspace.resource_group or self._scope.rg
        path = ws_path(self._scope.sub, rg, workspace.name)
        body = workspace._to_rest()
        body.setdefault("location", self._scope.location(None))
        created = Workspace._from_rest(self._rest.put(path, body))
        return LROPoller(self._rest, None, None, created)

    begin_create_or_update = begin_create


class LockOperations(_Operations):
    """``client.locks``: management locks at resource-group, workspace or compute scope."""

    def create_or_update(
        self,
        name: str,
        level: str = "CanNotDelete",
        *,
        notes: str | None = None,
        scope: str = "workspace",
        compute_name: str | None = None,
    ) -> Lock:
        body: dict[str, Any] = {"level": level}
        if notes is not None:
            body["notes"] = notes
        path = f"{self._scope.lock_scope(scope, compute_name)}/locks/{quote_segment(name)}"
        return Lock(self._rest.put(path, body))

    create = create_or_update

    def list(self, *, scope: str = "workspace", compute_name: str | None = None) -> builtins.list[Lock]:
        path = f"{self._scope.lock_scope(scope, compute_name)}/locks"
        return [Lock(item) for item in self._rest.list_values(path)]

    def delete(self, name: str, *, scope: str = "workspace", compute_name: str | None = None) -> None:
        self._rest.delete(f"{self._scope.lock_scope(scope, compute_name)}/locks/{quote_segment(name)}")


class QuotaOperations(_Operations):
    """``client.quotas``: per-location core quotas (``set`` needs an admin key)."""

    def list(self, location: str | None = None) -> builtins.list[Quota]:
        path = f"{location_path(self._scope.sub, self._scope.location(location))}/quotas"
        return [Quota(q) for q in self._rest.list_values(path)]

    def set(self, name: str, limit: int, location: str | None = None) -> Quota:
        path = (
            f"{location_path(self._scope.sub, self._scope.location(location))}/quotas/{quote_segment(name)}"
        )
        return Quota(self._rest.put(path, {"limit": int(limit)}))

    def list_usage(self, location: str | None = None) -> builtins.list[Usage]:
        path = f"{location_path(self._scope.sub, self._scope.location(location))}/usages"
        return [Usage(u) for u in self._rest.list_values(path)]
