"""A job's outputs as run history and the data plane name them for azure-ai-ml's ``jobs.download``
(pure).

``POST {history}/rundata`` answers ``runMetadata.outputs: {name: {assetId, type}}``; the SDK then
resolves the data outputs' ids with ``POST /data/v1.0{ws}/dataversion/batchGetResolvedUris``
``{values: [id, …]}`` → ``{values: {id: {uri, type}}}`` and downloads each ``uri`` from its datastore.
The ids have Azure's form, ``azureml://locations/{loc}/workspaces/{ws}/data/
azureml_{job}_output_data_{output}/versions/1``; the uri is the long datastore form
``azureml://subscriptions/{sub}/resourcegroups/{rg}/workspaces/{ws}/datastores/{ds}/paths/{path}``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cloudlet.domain.errors import validation_error

# The output types the SDK resolves through the data plane (its ``DataType`` values).
DATA_TYPES = ("uri_file", "uri_folder", "mltable")
_ID = re.compile(r"^azureml://locations/[^/]+/workspaces/[^/]+/data/azureml_(?P<rest>.+)/versions/1$")
_SEPARATOR = "_output_data_"
_SHORT = "azureml://datastores/"


def asset_id(location: str, workspace: str, job: str, output: str) -> str:
    return f"azureml://locations/{location}/workspaces/{workspace}/data/azureml_{job}{_SEPARATOR}{output}/versions/1"


def run_outputs(
    outputs: Mapping[str, Mapping[str, Any]], location: str, workspace: str, job: str
) -> dict[str, dict[str, str]]:
    """``runMetadata.outputs`` for a job's outputs (name → ``{type, path}``): its data outputs."""
    return {
        name: {"assetId": asset_id(location, workspace, job, name), "type": str(value.get("type"))}
        for name, value in outputs.items()
        if str(value.get("type") or "uri_folder") in DATA_TYPES
    }


def candidates(value: str, field: str) -> list[tuple[str, str]]:
    """The (job, output) pairs an output's asset id may name (a job name may itself hold the
    separator: every split is a candidate, the longest job name first). 400 for another id."""
    found = _ID.fullmatch(value)
    if found is None or _SEPARATOR not in found["rest"]:
        raise validation_error(
            field,
            f"{value!r} is not a job output's data id (azureml://locations/…/data/"
            "azureml_<job>_output_data_<output>/versions/1, as run history's rundata names it)",
        )
    rest = found["rest"]
    starts = [m.start() for m in re.finditer(re.escape(_SEPARATOR), rest)]
    return [(rest[:at], rest[at + len(_SEPARATOR) :]) for at in reversed(starts) if at > 0]


def long_uri(path: str, sub: str, rg: str, workspace: str) -> str:
    """``azureml://datastores/{ds}/paths/{p}`` in the long form the data plane answers with; any
    other path (a web URL, an already long one) as it is."""
    if not path.startswith(_SHORT):
        return path
    return (
        f"azureml://subscriptions/{sub}/resourcegroups/{rg}/workspaces/{workspace}/datastores/"
        + path.removeprefix(_SHORT)
    )


def resolved(uri: str, kind: str) -> dict[str, str]:
    """One entry of ``batchGetResolvedUris``' answer."""
    return {"uri": uri, "type": kind}
