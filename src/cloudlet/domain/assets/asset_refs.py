"""How assets are named and referred to (pure): their kinds and REST collections, the name and
version rules, and ``parse_reference``, which reads the ways a job or component names an asset
version (``azureml:name:1``, ``azureml:name@latest``, ARM ids of a workspace's assets).

``domain/assets/assets.py`` (asset documents and versions) re-exports all of it; ``domain/jobs/job_spec.py``
and ``domain/assets/components.py`` import it from here, below the asset documents that embed them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from cloudlet.domain.errors import validation_error

AssetKind = Literal["data", "model", "environment", "component"]
KINDS: tuple[AssetKind, ...] = ("data", "model", "environment", "component")
# The REST collection of each kind (Azure ML's: .../workspaces/W/data|models|environments/...).
COLLECTIONS: dict[AssetKind, str] = {
    "data": "data",
    "model": "models",
    "environment": "environments",
    "component": "components",  # command components (domain/assets/components.py)
}
KIND_OF_COLLECTION: dict[str, AssetKind] = {v: k for k, v in COLLECTIONS.items()}
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}$")
VERSION_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
LATEST = "latest"
NAME_RULE = "1–255 letters, digits, '_', '-' or '.', starting with a letter or digit"
VERSION_RULE = "1–64 letters, digits, '_', '-' or '.', starting with a letter or digit (e.g. 1, 2, 1.0)"


@dataclass(frozen=True)
class AssetRef:
    kind: AssetKind | None  # None when the reference does not say (azureml:name:1)
    name: str
    version: str | None  # None: the label (latest)

    @property
    def text(self) -> str:
        return f"azureml:{self.name}:{self.version}" if self.version else f"azureml:{self.name}@latest"


_SHORT = re.compile(
    r"^azureml:(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*)(?::(?P<version>[^:/@]+)|@(?P<label>[^:/@]+))$"
)
_LONG = re.compile(
    r"^(?:azureml:)?(?:azureml:/)?/(?:subscriptions|locations)/.+?/workspaces/[^/]+/"
    r"(?P<collection>data|models|environments|components)/(?P<name>[^/]+)"
    r"(?:/versions/(?P<version>[^/]+)|/labels/(?P<label>[^/]+))?$",
    flags=re.IGNORECASE,
)


def parse_reference(text: str) -> AssetRef | None:
    """A workspace asset reference, or None when TEXT is something else (a datastore URI, a
    registry's asset, a local path). ``latest`` is the only label; an unknown one is a 400."""
    value = text.strip()
    match = _SHORT.fullmatch(value) or _LONG.fullmatch(value)
    if match is None:
        return None
    groups = match.groupdict()
    label = groups.get("label")
    version = groups.get("version")
    if label is not None and label.lower() != LATEST:
        raise validation_error("path", f"'{value}': the only label is 'latest' (azureml:<name>@latest)")
    if label is None and version is None:
        label = LATEST  # .../data/<name> alone names its latest version
    collection = groups.get("collection")
    kind = KIND_OF_COLLECTION[collection.lower()] if collection else None
    return AssetRef(kind, groups["name"], version)


# The long form azure-ai-ml writes for what it uploaded: the workspace's datastore, spelled out.
_LONG_DATASTORE = re.compile(
    r"^azureml://subscriptions/[^/]+/resource[gG]roups/[^/]+/(?:providers/Microsoft\.MachineLearningServices/)?"
    r"workspaces/[^/]+/datastores/(?P<datastore>[^/]+)/paths/(?P<path>.*)$"
)


def short_datastore_uri(path: str) -> str:
    """``azureml://subscriptions/…/workspaces/W/datastores/D/paths/P`` → ``azureml://datastores/D/paths/P``
    (other text unchanged). Which workspace it names is the caller's to check."""
    match = _LONG_DATASTORE.fullmatch(path.strip())
    return f"azureml://datastores/{match['datastore']}/paths/{match['path']}" if match else path
