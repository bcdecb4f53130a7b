"""Thin httpx wrapper for the cloudlet REST API: auth header, JSON, error mapping, LRO polling."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import httpx

from cloudlet import __version__

API_PREFIX = "/api/v1"
TERMINAL_STATUSES = frozenset({"Succeeded", "Failed", "Canceled"})


class CloudletClientError(Exception):
    """Base class of every error the client raises."""


class ServiceRequestError(CloudletClientError):
    """The request never got an HTTP answer (server down, DNS, refused connection, timeout)."""


class ODataV4Error:
    """The ``error`` object of an error response: ``code``, ``message``, ``target``, ``details``."""

    def __init__(self, code: str, message: str, target: str | None = None, details: Any = None) -> None:
        self.code = code
        self.message = message
        self.target = target
        self.details: list[Any] = list(details or [])

    def __str__(self) -> str:
        return f"({self.code}) {self.message}"

    def __repr__(self) -> str:
        return f"ODataV4Error(code={self.code!r}, message={self.message!r}, target={self.target!r})"


class HttpResponseError(CloudletClientError):
    """The server answered with an error, or a long-running operation ended ``Failed``.

    ``status_code`` is ``None`` for a failed operation (the HTTP calls themselves succeeded).
    """

    def __init__(
        self,
        message: str | None = None,
        *,
        status_code: int | None = None,
        error: ODataV4Error | None = None,
        response: httpx.Response | None = None,
    ) -> None:
        self.status_code = status_code
        self.error = error or ODataV4Error(code="UnknownError", message=message or "request failed")
        self.response = response
        self.message = message or str(self.error)
        super().__init__(self.message)

    @property
    def target(self) -> str | None:
        return self.error.target

    @property
    def reason(self) -> str | None:
        return self.response.reason_phrase if self.response is not None else None


class ClientAuthenticationError(HttpResponseError):
    """401: missing, unknown or expired key/token."""


class ResourceNotFoundError(HttpResponseError):
    """404."""


class ResourceExistsError(HttpResponseError):
    """409."""


_STATUS_ERRORS: dict[int, type[HttpResponseError]] = {
    401: ClientAuthenticationError,
    404: ResourceNotFoundError,
    409: ResourceExistsError,
}


def error_from_body(body: Any, status_code: int | None, fallback: str) -> ODataV4Error:
    """Build the ``error`` object from a response body (or operation) shaped ``{"error": {...}}``."""
    raw = body.get("error") if isinstance(body, dict) else None
    if isinstance(raw, dict):
        return ODataV4Error(
            code=str(raw.get("code") or "UnknownError"),
            message=str(raw.get("message") or fallback),
            target=raw.get("target"),
            details=raw.get("details"),
        )
    if isinstance(body, dict) and "detail" in body:  # FastAPI default errors
        return ODataV4Error(code=f"Http{status_code}", message=str(body["detail"]))
    return ODataV4Error(code=f"Http{status_code}" if status_code else "UnknownError", message=fallback)


def raise_for_response(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    fallback = response.text.strip() or response.reason_phrase or f"HTTP {response.status_code}"
    error = error_from_body(body, response.status_code, fallback)
    cls = _STATUS_ERRORS.get(response.status_code, HttpResponseError)
    raise cls(str(error), status_code=response.status_code, error=error, response=response)


def quote_segment(value: str) -> str:
    """Percent-encode one path segment."""
    return quote(value, safe="")


_seg = quote_segment


def rg_path(sub: str, rg: str) -> str:
    return f"{API_PREFIX}/subscriptions/{_seg(sub)}/resourceGroups/{_seg(rg)}"


def ws_path(sub: str, rg: str, ws: str) -> str:
    """``/api/v1/subscriptions/{sub}/resourceGroups/{rg}/workspaces/{ws}``."""
    return f"{rg_path(sub, rg)}/workspaces/{_seg(ws)}"


def compute_path(sub: str, rg: str, ws: str, name: str) -> str:
    return f"{ws_path(sub, rg, ws)}/computes/{_seg(name)}"


def location_path(sub: str, location: str) -> str:
    return f"{API_PREFIX}/subscriptions/{_seg(sub)}/locations/{_seg(location)}"


def operation_id_from(response: httpx.Response) -> str | None:
    """The operation id of an LRO answer: the ``Operation-Location`` header, else a 202 body's ``id``."""
    header = response.headers.get("Operation-Location") or response.headers.get("Azure-AsyncOperation")
    if header:
        path = httpx.URL(header).path.rstrip("/")
        return path.rsplit("/", 1)[-1] or None
    if response.status_code == 202:
        try:
            body = response.json()
        except ValueError:
            return None
        if isinstance(body, dict) and body.get("id") and "status" in body:
            return str(body["id"])
    return None


BUSY_ATTEMPTS = 4
MAX_RETRY_AFTER_S = 5.0


def _retry_after(response: httpx.Response) -> float:
    try:
        return min(MAX_RETRY_AFTER_S, max(0.0, float(response.headers.get("retry-after", "1"))))
    except ValueError:
        return 1.0


class RestClient:
    """Blocking JSON client bound to one server endpoint and one credential."""

    def __init__(
        self,
        endpoint: str,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        token_provider: Callable[[], str] | None = None,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self._api_key = api_key
        self._token_provider = token_provider
        self._http = httpx.Client(base_url=self.endpoint, timeout=timeout, transport=transport)
        self.poll_interval = 0.5
        self.max_poll_interval = 2.0

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RestClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _headers(self) -> dict[str, str]:
        # A fresh id per request, as Azure clients send it: the server records it with the audit
        # entries the request writes, so a change can be traced to the command that made it.
        headers = {
            "Accept": "application/json",
            "x-ms-client-request-id": str(uuid.uuid4()),
            # The server's audit log records changes made through the client (and CLI) as such.
            "User-Agent": f"cloudlet-client/{__version__}",
        }
        token = self._token_provider() if self._token_provider else self._api_key
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def send(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
    ) -> httpx.Response:
        """Send a request and raise :class:`HttpResponseError` for 4xx/5xx answers."""
        clean_params = {k: v for k, v in (params or {}).items() if v is not None}
        for attempt in range(1, BUSY_ATTEMPTS + 1):
            try:
                response = self._http.request(
                    method,
                    path,
                    json=json,
                    params=clean_params or None,
                    headers=self._headers(),
                )
            except httpx.TimeoutException as exc:
                raise ServiceRequestError(f"request to {self.endpoint} timed out: {exc}") from exc
            except httpx.TransportError as exc:
                raise ServiceRequestError(
                    f"cannot reach the cloudlet server at {self.endpoint} ({exc}); "
                    "is `cloudlet server` running?"
                ) from exc
            # 503 means busy and nothing applied (the server rolled back): wait as told, again.
            if response.status_code != 503 or attempt == BUSY_ATTEMPTS:
                break
            time.sleep(_retry_after(response))
        raise_for_response(response)
        return response

    def request(
        self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None
    ) -> Any:
        """Send a request; return the decoded JSON body (``None`` for an empty body)."""
        response = self.send(method, path, json=json, params=params)
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            return response.text

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.request("GET", path, params=params)

    def stream_lines(
        self, path: str, params: dict[str, Any] | None = None, headers: dict[str, str] | None = None
    ) -> Iterator[str]:
        """A streamed GET's lines (server-sent events), read as they come; no read timeout (a
        watched stream sends a heartbeat, and a dead server ends the connection)."""
        clean_params = {k: v for k, v in (params or {}).items() if v is not None}
        all_headers = {**self._headers(), "Accept": "text/event-stream", **(headers or {})}
        timeout = httpx.Timeout(self._http.timeout.connect, read=None)
        try:
            with self._http.stream(
                "GET", path, params=clean_params, headers=all_headers, timeout=timeout
            ) as response:
                if response.is_error:
                    response.read()
                    raise_for_response(response)
                yield from response.iter_lines()
        except httpx.TransportError as exc:
            raise ServiceRequestError(f"the stream from {self.endpoint} broke: {exc}") from exc

    def put(self, path: str, body: Any) -> Any:
        return self.request("PUT", path, json=body)

    def patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, json=body)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, json=body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def list_values(
        self, path: str, params: dict[str, Any] | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """GET a ``{"value": [...]}`` collection, following ``nextLink`` page after page (as
        Azure's ItemPaged does), up to ``limit`` items."""
        body = self.get(path, params=params)
        items: list[dict[str, Any]] = []
        while True:
            if not isinstance(body, dict):
                return [*items, *(body or [])]
            items += list(body.get("value") or [])
            link = body.get("nextLink")
            if not link or (limit is not None and len(items) >= limit):
                return items[:limit] if limit is not None else items
            # The server's own link, re-based on this client's endpoint: the credential goes to
            # the origin it was configured for, whatever host the link names.
            parts = httpx.URL(str(link))
            body = self.get(parts.raw_path.decode())

    def get_operation(self, op_id: str) -> dict[str, Any]:
        body = self.get(f"{API_PREFIX}/operations/{_seg(op_id)}")
        return body if isinstance(body, dict) else {}

    def wait_operation(
        self,
        op_id: str,
        timeout: float | None = None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Poll ``GET /api/v1/operations/{id}`` until it leaves ``InProgress``; return it.

        A ``Failed`` operation is returned, not raised. ``TimeoutError`` when ``timeout`` seconds pass.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        interval = self.poll_interval
        while True:
            op = self.get_operation(op_id)
            if on_progress is not None:
                on_progress(op)
            if op.get("status") in TERMINAL_STATUSES:
                return op
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"operation {op_id} still {op.get('status')} after {timeout}s")
                time.sleep(min(interval, remaining))
            else:
                time.sleep(interval)
            interval = min(interval * 1.5, self.max_poll_interval)


def operation_error(op: dict[str, Any]) -> HttpResponseError:
    """The error a ``Failed`` operation carries, as an exception."""
    error = error_from_body(op, None, f"operation {op.get('id')} {op.get('status', 'failed')}")
    if error.target is None:
        error.target = op.get("target_name") or op.get("target")
    return HttpResponseError(str(error), status_code=None, error=error)
