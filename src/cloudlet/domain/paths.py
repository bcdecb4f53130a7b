"""Paths taken from requests (pure): split and checked before anything is opened beneath a base."""

from __future__ import annotations

from pathlib import PurePosixPath

from cloudlet.domain.errors import CloudletError

MAX_PATH_CHARS = 1024


def relative_parts(relative: str, field: str, what: str = "a path") -> tuple[str, ...]:
    """The segments of a path taken from a request, or a 400: no absolute path, no '..', no NUL,
    nothing empty. What it names is resolved later, beneath its base, without following links."""
    if "\x00" in relative or len(relative) > MAX_PATH_CHARS:
        raise CloudletError("ValidationError", f"{field} is not {what}", field)
    if relative.startswith("/"):
        raise CloudletError(
            "ValidationError", f"{field} must be relative (got '{relative}'); drop the leading '/'", field
        )
    parts = tuple(p for p in PurePosixPath(relative).parts if p not in ("", "."))
    if ".." in parts:
        raise CloudletError("ValidationError", f"{field} must not contain '..' (got '{relative}')", field)
    return parts


def parse_datastore_uri(uri: str) -> tuple[str, str] | None:
    """``azureml://datastores/<datastore>/paths/<path>`` as (datastore, path); None for any other URI."""
    prefix = "azureml://datastores/"
    if not uri.startswith(prefix):
        return None
    rest = uri[len(prefix) :]
    datastore, sep, path = rest.partition("/paths/")
    return (datastore, path) if sep else None
