"""A job's ``environment`` resolved to what a node must prepare (pure).

Curated names (``azureml://registries/azureml/environments/<name>/labels/latest`` or
``azureml:AzureML-<name>@latest``) map to the pip sets of a reviewed data file
(``data/curated_environments.yaml``); an inline ``pip`` list or a
``conda_file``'s pip dependencies become a venv; ``image`` is kept (nodes without a container
runtime warn and use their Python). Equal specs hash alike, so they share one cached venv.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal

import yaml
from pydantic import ValidationError

from cloudlet.domain.errors import validation_error
from cloudlet.domain.job_spec import InlineEnvironment, translate_error


@dataclass(frozen=True)
class CuratedEnvironment:
    name: str  # registry name, e.g. sklearn-1.5
    pip: tuple[str, ...]
    description: str

    @property
    def registry_uri(self) -> str:
        return f"azureml://registries/azureml/environments/{self.name}/labels/latest"

    @property
    def workspace_name(self) -> str:
        return f"AzureML-{self.name}"


CURATED_FILE = "data/curated_environments.yaml"


def load_curated(doc: Any) -> dict[str, CuratedEnvironment]:
    """The curated table from its reviewed data file's document (``data/curated_environments.yaml``)."""
    entries = doc.get("environments") if isinstance(doc, dict) else None
    if not isinstance(entries, dict) or not entries:
        raise ValueError(f"{CURATED_FILE}: 'environments' must map names to package sets")
    table: dict[str, CuratedEnvironment] = {}
    for name, entry in entries.items():
        pip = entry.get("pip") if isinstance(entry, dict) else None
        if not isinstance(pip, list) or not pip or not all(isinstance(p, str) and p for p in pip):
            raise ValueError(f"{CURATED_FILE}: {name}: 'pip' must be a non-empty list of requirements")
        if entry.get("mlflow") and not any(p.lower().startswith("mlflow") for p in pip):
            raise ValueError(f"{CURATED_FILE}: {name}: says mlflow but its pip set has none")
        table[str(name).lower()] = CuratedEnvironment(
            str(name), tuple(pip), str(entry.get("description", ""))
        )
    return table


@functools.cache
def _curated() -> dict[str, CuratedEnvironment]:
    text = resources.files("cloudlet.domain").joinpath(CURATED_FILE).read_text(encoding="utf-8")
    return load_curated(yaml.safe_load(text))


CURATED_ENVIRONMENTS: dict[str, CuratedEnvironment] = _curated()

_CONDA_ONLY = frozenset({"python", "pip", "setuptools", "wheel", "cudatoolkit", "cudnn", "nccl"})


@dataclass(frozen=True)
class ResolvedEnvironment:
    """How a node prepares a job's Python: ``python`` (the node's own), ``venv`` or ``image``.

    ``hash`` is the SHA-256 of the normalised spec (kind, sorted pip list, image), so equal specs
    share one cached venv whatever their source (curated name, inline pip, conda file).
    """

    kind: Literal["python", "venv", "image"]
    pip: list[str] = field(default_factory=list)
    image: str | None = None
    hash: str = ""
    name: str | None = None


def curated_environment(reference: str) -> CuratedEnvironment | None:
    """Look up ``azureml://registries/azureml/environments/<n>/labels/latest`` (or ``/versions/<v>``),
    ``azureml:AzureML-<n>@latest``, ``azureml:AzureML-<n>:<version>``, ``AzureML-<n>`` or ``<n>``."""
    text = reference.strip()
    match = re.fullmatch(
        r"azureml://registries/[^/]+/environments/([^/]+)(?:/(?:labels|versions)/[^/]+)?", text
    )
    if match:
        key = match.group(1)
    else:
        key = text.removeprefix("azureml:")
        key = re.sub(r"(@[^@:/]+|:[^:/@]+)$", "", key)
        key = re.sub(r"^azureml-", "", key, flags=re.IGNORECASE)
    return CURATED_ENVIRONMENTS.get(key.lower())


def _conda_pip(conda: dict[str, Any]) -> list[str]:
    deps = conda.get("dependencies") or []
    if not isinstance(deps, list):
        raise validation_error("environment.conda_file.dependencies", "'dependencies' must be a list")
    out: list[str] = []
    for dep in deps:
        if isinstance(dep, dict):
            pip = dep.get("pip") or []
            if not isinstance(pip, list):
                raise validation_error(
                    "environment.conda_file.dependencies", "the 'pip' entry of dependencies must be a list"
                )
            out.extend(str(p) for p in pip)
        elif (
            isinstance(dep, str)
            and re.fullmatch(r"[A-Za-z0-9_.-]+", dep.strip())
            and dep.strip().lower() not in _CONDA_ONLY
        ):
            out.append(dep.strip())
    return out


def _normalise_pip(pip: list[str]) -> list[str]:
    seen: dict[str, str] = {}
    for item in pip:
        text = " ".join(str(item).split())
        if text:
            seen.setdefault(text.lower(), text)
    return [seen[k] for k in sorted(seen)]


def _resolved(
    kind: Literal["python", "venv", "image"], pip: list[str], image: str | None, name: str | None
) -> ResolvedEnvironment:
    pip = _normalise_pip(pip)
    canonical = json.dumps({"image": image, "kind": kind, "pip": pip}, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    return ResolvedEnvironment(kind=kind, pip=pip, image=image, hash=digest, name=name)


def resolve_environment(env: str | InlineEnvironment | dict[str, Any] | None) -> ResolvedEnvironment:
    """A job's ``environment`` → what a node must prepare. Unknown names raise ``CloudletError``."""
    if env is None:
        return _resolved("python", [], None, None)
    if isinstance(env, str):
        curated = curated_environment(env)
        if curated is None:
            known = ", ".join(e.registry_uri for e in CURATED_ENVIRONMENTS.values())
            raise validation_error(
                "environment",
                f"unknown environment '{env}'; use a curated one ({known}), an inline "
                "{image|conda_file|pip} environment, or omit 'environment' to use the node's Python",
                code="EnvironmentNotFound",
            )
        return _resolved("venv", list(curated.pip), None, curated.name)
    if isinstance(env, dict):
        try:
            env = InlineEnvironment.model_validate(env)
        except ValidationError as exc:
            raise translate_error(exc, InlineEnvironment, "environment", "an inline environment") from None
    pip = list(env.pip or [])
    if isinstance(env.conda_file, str):
        raise validation_error(
            "environment.conda_file",
            f"conda_file '{env.conda_file}' is a file path; submit with the cloudlet CLI/client "
            "(which inlines it) or give its contents as a mapping",
        )
    if env.conda_file is not None:
        pip.extend(_conda_pip(env.conda_file))
    if env.image:
        return _resolved("image", pip, env.image, env.name)
    return _resolved("venv", pip, None, env.name)
