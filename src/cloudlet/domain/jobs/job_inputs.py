"""Where a job's data inputs may come from (pure): datastore URIs, which nodes see by path, and
http(s) URLs, which nodes download before the process starts; Azure Storage's own schemes
(``wasbs://``, ``abfss://``) name public blobs that are read over HTTPS the same way; other clouds'
storage is refused.

``check_scheme`` is submission's rule; ``downloads`` is what a run spec lists for the node
(docs/agent-protocol.md, ``downloads``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from cloudlet.domain.errors import CloudletError

URI_TYPES = ("uri_file", "uri_folder")
# Schemes of other clouds' storage: a node cannot read them (no credentials, no client).
CLOUD_SCHEMES = ("wasb", "wasbs", "abfs", "abfss", "adl", "s3", "s3a", "gs", "gcs", "hdfs", "dbfs")
SUPPORTED = (
    "azureml://datastores/<datastore>/paths/<path>, an http(s):// URL (downloaded by the node "
    "before the job starts) or a local path (uploaded by the CLI/client)"
)


def blob_https_url(path: str) -> str | None:
    """``wasb[s]://container@account.blob.core.windows.net/p`` and ``abfs[s]://container@account.dfs.
    core.windows.net/p`` as the HTTPS URL of the same blob (a public container answers it without
    credentials, as Azure's sample data does); None for any other path."""
    parsed = urlsplit(path)
    if parsed.scheme.lower() not in ("wasb", "wasbs", "abfs", "abfss") or "@" not in parsed.netloc:
        return None
    container, _, host = parsed.netloc.partition("@")
    account, dot, suffix = host.partition(".")
    if not container or not account or not dot or not suffix.startswith(("blob.", "dfs.")):
        return None
    blob_host = f"{account}.blob.{suffix.split('.', 1)[1]}"  # the dfs endpoint's blobs, by the blob API
    return f"https://{blob_host}/{container}/{parsed.path.lstrip('/')}"


def with_blob_urls(doc: dict[str, Any]) -> dict[str, Any]:
    """The job's ``wasbs://``/``abfss://`` input paths as the https:// URLs nodes download."""
    for value in (doc.get("inputs") or {}).values():
        if isinstance(value, dict) and isinstance(value.get("path"), str):
            url = blob_https_url(value["path"])
            if url is not None:
                value["path"] = url
    return doc


def is_http_url(path: str) -> bool:
    parsed = urlsplit(path)
    return parsed.scheme.lower() in ("http", "https") and bool(parsed.netloc)


def check_scheme(name: str, path: str) -> bool:
    """True for an http(s) URL (the node downloads it); False for what the datastore check takes
    (``azureml://…`` and scheme-less paths); a 400 naming what is supported for anything else."""
    scheme = urlsplit(path).scheme.lower() if "://" in path else ""
    if scheme in ("http", "https"):
        if not is_http_url(path):
            raise CloudletError(
                "InvalidInput", f"input '{name}': '{path}' names no host", f"inputs.{name}.path"
            )
        return True
    if scheme and scheme != "azureml":
        kind = "cloud storage" if scheme in CLOUD_SCHEMES else "a URI scheme"
        raise CloudletError(
            "UnsupportedInputScheme",
            f"input '{name}': {scheme}:// is {kind} that cloudlet's nodes cannot read; use {SUPPORTED}",
            f"inputs.{name}.path",
        )
    return False


def is_download(value: Any) -> bool:
    """A declared ``uri_file``/``uri_folder`` input whose path is an http(s) URL."""
    return (
        isinstance(value, dict) and value.get("type") in URI_TYPES and is_http_url(str(value.get("path", "")))
    )


def downloads(doc: dict[str, Any]) -> list[dict[str, str]]:
    """The job's http(s) inputs as the run spec lists them: the command and environment carry
    each one's placeholder until the agent puts the downloaded path in its place."""
    return [
        {
            "input": name,
            "url": str(value["path"]),
            "type": str(value["type"]),
            "placeholder": f"@@cloudlet-download:{name}@@",
        }
        for name, value in (doc.get("inputs") or {}).items()
        if is_download(value)
    ]
