"""A Docker build context the azure-ai-ml SDK uploaded (``Environment(build=BuildContext(path=…))``)
read from the workspace's datastore and built as the CLI builds a local one (``domain.assets.build_context``).

The SDK uploads the folder through the Blob service (``api/blob.py``) and sends its URI as
``properties.build.contextUri``: a Blob URL, which it joins (``urljoin``) from the datastore's
account URL and so without the account, ``…/blob/<datastore>/<path>/`` (the PUT's workspace is the
one), or with it, ``…/blob/ws<id>/<datastore>/<path>/``; or a datastore URI
(``azureml://datastores/<d>/paths/<p>``, short or long). Files are read beneath the datastore
without following links (``storage.read_beneath``).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote, urlsplit

from cloudlet.domain.assets import build_context
from cloudlet.domain.assets.asset_refs import short_datastore_uri
from cloudlet.domain.errors import validation_error
from cloudlet.domain.paths import relative_parts
from cloudlet.services.assets import blob_sas
from cloudlet.services.core.storage import DataRoot, read_beneath, stat_beneath

FIELD = "build.contextUri"  # as the ARM body names it: properties.build.contextUri
MAX_FILE = 1 << 20  # a requirements.txt, conda file or Dockerfile larger than this is not one
_BLOB_PATH = re.compile(r"^/blob/(?:(?P<account>ws[0-9]+)/)?(?P<datastore>[^/]+)/(?P<path>.+)$")


def _located(uri: str, workspace_id: int) -> tuple[str, tuple[str, ...]]:
    """The datastore and the folder in it that URI names, or a 400 saying what it must be."""
    short = short_datastore_uri(uri)
    if short.startswith("azureml://datastores/"):
        datastore, _, path = short.removeprefix("azureml://datastores/").partition("/paths/")
        return datastore, relative_parts(path, FIELD, "a folder of the datastore")
    found = (
        _BLOB_PATH.search(unquote(urlsplit(uri).path)) if uri.startswith(("http://", "https://")) else None
    )
    account = found["account"] if found else None
    if found is None or (account is not None and blob_sas.workspace_of(account) != workspace_id):
        raise validation_error(
            FIELD,
            f"build context {uri!r} is not in this workspace's datastore; give a local folder as "
            "BuildContext(path=…), which the SDK uploads there",
        )
    return found["datastore"], relative_parts(found["path"], FIELD, "a folder of the datastore")


def inline(doc: dict[str, Any], data: DataRoot, workspace_id: int) -> dict[str, Any]:
    """DOC (an environment document from ARM, ``build: {contextUri, dockerfilePath}``) as the CLI
    would have sent it: ``build`` read into ``image`` and ``pip`` (or ``conda_file``)."""
    build = doc.get("build")
    if not isinstance(build, dict) or not isinstance(build.get("contextUri"), str):
        raise validation_error(FIELD, "build needs contextUri: the uploaded build context's folder")
    uri = str(build["contextUri"])
    datastore, parts = _located(uri, workspace_id)
    base = data.datastore(workspace_id, datastore)
    if stat_beneath(base, parts) is None:
        raise validation_error(FIELD, f"nothing at build context {uri!r}: upload the folder first")

    def read(name: str) -> str | None:
        text = read_beneath(base, (*parts, *relative_parts(name, FIELD)), limit=MAX_FILE)
        return text.decode("utf-8", errors="replace") if text is not None else None

    out = {k: v for k, v in doc.items() if k != "build"}
    dockerfile = build.get("dockerfilePath")
    build_context.from_context(out, read, str(dockerfile) if dockerfile else None, uri, FIELD)
    return out
