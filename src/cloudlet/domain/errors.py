"""Typed errors shared by every layer.

Each error carries an Azure-style code, a message that names the problem and the fix, and the
``target`` (field path or resource) it concerns. The API renders them as
``{"error": {"code", "message", "target", "details"}}`` with ``status``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class CloudletError(Exception):
    code: str
    message: str
    target: str | None = None
    status: int = 400
    details: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def to_body(self) -> dict[str, Any]:
        return {
            "error": {
                "code": self.code,
                "message": self.message,
                "target": self.target,
                "details": self.details,
            }
        }


def validation_error(target: str, message: str, code: str = "ValidationError") -> CloudletError:
    return CloudletError(code=code, message=message, target=target, status=400)


def not_found(kind: str, name: str) -> CloudletError:
    return CloudletError(
        code="ResourceNotFound",
        message=f"{kind} '{name}' was not found.",
        target=name,
        status=404,
    )


def conflict(code: str, message: str, target: str | None = None) -> CloudletError:
    return CloudletError(code=code, message=message, target=target, status=409)


def forbidden(message: str, target: str | None = None) -> CloudletError:
    return CloudletError(code="AuthorizationFailed", message=message, target=target, status=403)


def document_for(doc: Any, name: str | None, what: str) -> dict[str, Any]:
    """A copy of a request document as a mapping, named by the URL when the body names nothing;
    a body that names something else is refused rather than silently renamed."""
    if not isinstance(doc, dict):
        raise validation_error("$", f"the {what} definition must be a mapping (YAML object)")
    doc = dict(doc)
    if name is not None:
        if doc.get("name") not in (None, name):
            raise validation_error(
                "name", f"the body names '{doc['name']}' but the request is for '{name}'; make them match"
            )
        doc["name"] = name
    return doc


def problems_error(problems: list[dict[str, Any]]) -> CloudletError:
    """Several ``{"target", "message"}`` problems of one document → one error naming the first
    target, every problem in the message and in ``details``."""
    first = problems[0]
    message = (
        first["message"]
        if len(problems) == 1
        else "; ".join(f"{p['target']}: {p['message']}" for p in problems)
    )
    error = validation_error(first["target"], message)
    error.details = [{"code": "ValidationError", **p} for p in problems]
    return error


def failure_text(exc: BaseException, limit: int = 500) -> str:
    """An exception as a line to record on what it broke: its kind and first line."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return (f"{type(exc).__name__}: {first}" if first else type(exc).__name__)[:limit]
