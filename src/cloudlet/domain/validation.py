"""Pydantic's validation errors turned into cloudlet's: each problem names the field path (as the
YAML writes it: ``resources.instance_count``, ``inputs.data.path``, ``schedules[0]``) and says how
to fix it. Shared by the compute and job specs.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from pydantic import BaseModel, BeforeValidator, ValidationError

from cloudlet.domain.errors import CloudletError, problems_error


def _integral(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


# ``Annotated[StrictInt, Field(ge=…, le=…), WHOLE_FLOAT]``: a whole number as JSON Schema's
# ``integer`` means it: 5.0 is 5 (what a client holding numbers as floats sends); 5.5, "5" and true
# are not (StrictInt: a string never becomes a number). Last, so the schema keeps the bounds.
WHOLE_FLOAT = BeforeValidator(_integral)


# Parts of pydantic's error locations that are not fields: union member and model names.
_NOT_FIELDS = frozenset({"str", "int", "float", "bool", "InlineEnvironment", "InputSpec", "dict[str,any]"})
_BOUNDS = {
    "greater_than_equal": ("ge", "greater than or equal to", "≥"),
    "less_than_equal": ("le", "less than or equal to", "≤"),
    "greater_than": ("gt", "greater than", ">"),
    "less_than": ("lt", "less than", "<"),
}


class FieldProblem(ValueError):
    """Raised inside validators to point at a specific field rather than the whole model."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def translate(
    exc: ValidationError,
    model: type[BaseModel],
    what: str,
    prefix: str = "",
    tagged_unions: Collection[tuple[str, str]] = (),
) -> CloudletError:
    """``what`` names the document ("type amlcompute", "a command job"); ``prefix`` is where the
    model sits in a larger document; ``tagged_unions`` are (field, tag) location parts to drop
    (``distribution.pytorch.x`` is written ``distribution.x``)."""
    problems: list[dict[str, Any]] = []
    for err in exc.errors():
        inner = (err.get("ctx") or {}).get("error")
        if isinstance(inner, FieldProblem):
            problems.append({"target": join(prefix, inner.field), "message": inner.message})
            continue
        path = field_path(err["loc"], tagged_unions)
        full = join(prefix, path)
        problems.append({"target": full, "message": describe(err, full, path, model, what)})
    return problems_error(problems)


def join(prefix: str, path: str) -> str:
    if not prefix:
        return path
    return prefix if path == "$" else f"{prefix}.{path}"


def field_path(loc: tuple[Any, ...], tagged_unions: Collection[tuple[str, str]] = ()) -> str:
    out = ""
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and not part.startswith(("function-", "literal[")):
            if part in _NOT_FIELDS or (i > 0 and (loc[i - 1], part) in tagged_unions):
                continue
            out += ("." if out else "") + part
    return out or "$"


def describe(err: Any, full: str, path: str, model: type[BaseModel], what: str) -> str:
    kind = err["type"]
    value = err.get("input")
    if kind == "extra_forbidden":
        field = path.rsplit(".", 1)[-1]
        if "." in path:
            return f"unknown field '{field}' at '{full}'; remove it (check the spelling)"
        allowed = sorted(f.alias or n for n, f in model.model_fields.items())
        return f"unknown field '{field}' for {what}; remove it. Allowed fields: {', '.join(allowed)}"
    if kind == "missing":
        return f"'{full}' is required for {what}"
    if kind in _BOUNDS:
        key, words, sign = _BOUNDS[kind]
        bound = err.get("ctx", {}).get(key)
        return f"'{full}' must be {words} {bound} ({sign} {bound}), got {value!r}"
    expected = {
        "dict_type": "a mapping",
        "model_type": "a mapping",
        "model_attributes_type": "a mapping",
        "list_type": "a list",
        "string_type": "a string",
    }
    if kind in expected:
        return f"'{full}' must be {expected[kind]}, got {value!r}"
    if kind.startswith("int_"):
        return f"'{full}' must be a whole number, got {value!r}"
    if kind.startswith("bool"):
        return f"'{full}' must be true or false, got {value!r}"
    if kind == "literal_error":
        return f"'{full}' must be one of {err.get('ctx', {}).get('expected', '')}, got {value!r}"
    return str(err["msg"]).removeprefix("Value error, ")
