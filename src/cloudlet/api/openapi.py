"""The OpenAPI document says what the API really takes and answers: typed request bodies, the
error codes each route sends (never FastAPI's 422, which cloudlet does not send: invalid input is
a 400 naming the field), one schema for every error body."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Response
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, Field

ERROR_DESCRIPTIONS = {
    400: "Invalid input: the error names the field (`target`) and the fix",
    401: "No credential, or an unknown, expired or revoked one",
    403: "Authenticated, but not allowed (role, lock, policy)",
    404: "Not found, or not visible to this caller",
    405: "Method not allowed on this path (see the `Allow` header)",
    409: "Conflicts with the resource's current state",
    413: "Body too large",
    503: "The server is busy; retry after `Retry-After` seconds",
}


class ErrorDetail(BaseModel):
    code: str
    message: str
    target: str | None = None
    details: list[dict[str, Any]] = Field(default_factory=list)


class ErrorBody(BaseModel):
    """Every error: ``{"error": {"code", "message", "target", "details"}}``."""

    error: ErrorDetail


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries for these error codes, all with the error body."""
    return {code: {"model": ErrorBody, "description": ERROR_DESCRIPTIONS[code]} for code in codes}


def success(code: int, description: str) -> dict[int | str, dict[str, Any]]:
    """A second success code of a route (e.g. 201 beside 200 for create-or-update)."""
    return {code: {"description": description}}


def deleted(more: dict[int | str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Route arguments for an ARM DELETE that answers 200 with no body, as Azure's do (MORE: other
    responses, e.g. ``success(204, …)``)."""
    gone = {200: {"description": "Deleted (no body)", "content": {}}}
    return {"status_code": 200, "response_class": Response, "responses": {**gone, **(more or {})}}


def json_body(schema: dict[str, Any] | Callable[[], dict[str, Any]], required: bool = True) -> dict[str, Any]:
    """``openapi_extra`` for a route that takes a JSON document validated by the domain (so its
    model, not a copy of it, is the schema). SCHEMA may be a function that makes it: it is then
    called when the document is first built (``install``), not at import (``Deferred``)."""
    if callable(schema):
        return Deferred(schema, required)
    content = {"application/json": {"schema": schema}}
    return {"requestBody": {"required": required, "content": content}}


class Deferred(dict[str, Any]):
    """A route's ``openapi_extra`` made when the OpenAPI document is, not when the route is: a
    domain model's JSON schema (``schema_of``) at import was ~0.06 s of every server's start, for
    a document most servers never serve. Empty until ``install``'s document resolves it (once:
    the routes that share one share what it made, as they shared the dict before)."""

    def __init__(self, make: Callable[[], dict[str, Any]], required: bool) -> None:
        super().__init__()
        self.make, self.required = make, required
        self._made: dict[str, Any] | None = None

    def resolved(self) -> dict[str, Any]:
        if self._made is None:
            self._made = json_body(self.make(), self.required)
        return self._made


def named_by_url(schema: dict[str, Any]) -> dict[str, Any]:
    """SCHEMA (or each of its ``oneOf``/``anyOf`` members) with ``name`` optional: a PUT to
    ``…/{name}`` takes the name from the URL when the body leaves it out."""
    out = {**schema, "required": [k for k in schema.get("required", []) if k != "name"]}
    if "name" in schema.get("properties", {}):
        out["properties"] = {**schema["properties"], **nullable({"name": schema["properties"]["name"]})}
    for key in ("oneOf", "anyOf"):
        if key in schema:
            out[key] = [named_by_url(member) for member in schema[key]]
    return out


def nullable(properties: dict[str, Any]) -> dict[str, Any]:
    """PROPERTIES, each of which may also be null (a YAML document's field left empty)."""
    return {name: {"anyOf": [schema, {"type": "null"}]} for name, schema in properties.items()}


def binary_body(media_type: str, description: str, required: bool = True) -> dict[str, Any]:
    content = {media_type: {"schema": {"type": "string", "format": "binary"}}}
    return {"requestBody": {"required": required, "description": description, "content": content}}


def schema_of(*models: type[BaseModel]) -> dict[str, Any]:
    """A JSON schema accepting any of MODELS; the models they use become components (``install``
    moves them there), so a domain model is documented as it validates."""
    schemas = [model.model_json_schema(ref_template="#/components/schemas/{model}") for model in models]
    defs: dict[str, Any] = {}
    for schema in schemas:
        defs.update(schema.pop("$defs", {}))
    out = schemas[0] if len(schemas) == 1 else {"oneOf": schemas}
    return {**out, "x-definitions": defs} if defs else out


INT64 = (-(2**63), 2**63 - 1)
BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _exact_bounds(node: Any) -> None:
    """Numeric bounds as the validators hold them: the generator writes some as floats, and
    ``le=2**63 - 1`` as 9.223372036854776e18, a bound the server refuses (2**63), so a client
    reading the document sends values it will be told are too large."""
    if isinstance(node, list):
        for item in node:
            _exact_bounds(item)
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key in BOUNDS and isinstance(value, float) and value.is_integer():
            node[key] = min(max(int(value), INT64[0]), INT64[1]) if abs(value) >= 2**53 else int(value)
        else:
            _exact_bounds(value)


def install(app: FastAPI) -> None:
    """Replace ``app.openapi`` with the generated document, post-processed once."""

    def build() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        for route in app.routes:
            extra = getattr(route, "openapi_extra", None)
            if isinstance(extra, Deferred):
                route.openapi_extra = extra.resolved()  # type: ignore[attr-defined]
        doc = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        for path_item in doc.get("paths", {}).values():
            for operation in path_item.values():
                operation.get("responses", {}).pop("422", None)
                body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
                # Inlined definitions of domain models (see ``one_of``) join the components.
                schemas.update(body.get("schema", {}).pop("x-definitions", {}))
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        _exact_bounds(doc)
        app.openapi_schema = doc
        return doc

    app.openapi = build  # type: ignore[method-assign]
