"""A job's ``environment`` resolved to what a node must prepare (pure).

Curated names (``azureml://registries/azureml/environments/<name>/labels/latest`` or
``azureml:AzureML-<name>@latest``) map to the pip sets of a reviewed data file
(``data/curated_environments.yaml``); an inline ``pip`` list or a
``conda_file``'s dependencies (conda ones mapped to PyPI by ``domain/assets/conda.py``, plus pip,
setuptools and wheel as a conda environment has) become a venv; ``image`` is kept (nodes without a
container runtime warn and use their Python). ``python`` is the interpreter the environment pins
(``python=3.8``, a ``python:3.11`` image, a curated environment's): a node uses it when it has it.
Equal specs hash alike, so they share one cached venv. ``warnings`` say, at submission, what a
node will do differently from Azure (conda packages without a PyPI counterpart, a retired name).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal

import yaml
from pydantic import ValidationError

from cloudlet.domain.assets.asset_refs import parse_reference
from cloudlet.domain.assets.conda import conda_dependencies, image_python, python_minor, with_base_packages
from cloudlet.domain.errors import validation_error
from cloudlet.domain.jobs.job_models import InlineEnvironment, translate_error


@dataclass(frozen=True)
class CuratedEnvironment:
    name: str  # registry name, e.g. sklearn-1.5
    pip: tuple[str, ...]
    description: str
    python: str | None = None  # the Python of Azure's image, e.g. "3.10"

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
        python = entry.get("python")
        table[str(name).lower()] = CuratedEnvironment(
            str(name), tuple(pip), str(entry.get("description", "")), python_minor(str(python or ""))
        )
    return table


def load_retired(doc: Any, table: dict[str, CuratedEnvironment]) -> dict[str, str]:
    """Retired curated names (lower case) → the name of their successor in ``table``."""
    retired = doc.get("retired") if isinstance(doc, dict) else None
    if retired is None:
        return {}
    if not isinstance(retired, dict):
        raise ValueError(f"{CURATED_FILE}: 'retired' must map retired names to their successors")
    out: dict[str, str] = {}
    for old, new in retired.items():
        if str(new).lower() not in table:
            raise ValueError(f"{CURATED_FILE}: retired {old}: successor {new} is not a curated environment")
        out[str(old).lower()] = str(new).lower()
    return out


@functools.cache
def _curated_doc() -> Any:
    text = resources.files("cloudlet.domain").joinpath(CURATED_FILE).read_text(encoding="utf-8")
    return yaml.safe_load(text)


CURATED_ENVIRONMENTS: dict[str, CuratedEnvironment] = load_curated(_curated_doc())
RETIRED_ENVIRONMENTS: dict[str, str] = load_retired(_curated_doc(), CURATED_ENVIRONMENTS)


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
    python: str | None = None  # "3.8": the interpreter the environment pins (None: the node's)
    warnings: list[str] = field(default_factory=list)
    conda: dict[str, Any] | None = None  # the conda file, for a node with conda or micromamba


def curated_environment(reference: str) -> CuratedEnvironment | None:
    """Look up ``azureml://registries/azureml/environments/<n>/labels/latest`` (or ``/versions/<v>``),
    ``azureml:AzureML-<n>@latest``, ``azureml:AzureML-<n>:<version>``, ``AzureML-<n>`` or ``<n>``;
    a retired name gives its successor (``retired_environment`` says which)."""
    key = _curated_key(reference)
    return CURATED_ENVIRONMENTS.get(RETIRED_ENVIRONMENTS.get(key, key))


def retired_environment(reference: str) -> tuple[str, CuratedEnvironment] | None:
    """``(retired name, successor)`` when ``reference`` names a retired curated environment."""
    key = _curated_key(reference)
    successor = RETIRED_ENVIRONMENTS.get(key)
    return (key, CURATED_ENVIRONMENTS[successor]) if successor else None


def _curated_key(reference: str) -> str:
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
    return key.lower()


def _normalise_pip(pip: list[str]) -> list[str]:
    seen: dict[str, str] = {}
    for item in pip:
        text = " ".join(str(item).split())
        if text:
            seen.setdefault(text.lower(), text)
    return [seen[k] for k in sorted(seen)]


def _resolved(
    kind: Literal["python", "venv", "image"],
    pip: list[str],
    image: str | None,
    name: str | None,
    python: str | None = None,
    warnings: list[str] | None = None,
) -> ResolvedEnvironment:
    pip = _normalise_pip(pip)
    spec: dict[str, Any] = {"image": image, "kind": kind, "pip": pip}
    if python:  # only when pinned: unpinned specs keep the hashes (and cached venvs) they had
        spec["python"] = python
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    return ResolvedEnvironment(kind, pip, image, digest, name, python, list(warnings or []))


def check_environment_name(name: str) -> None:
    """A job's or component's ``environment`` given by name: a curated environment, an environment
    asset (``azureml:name:1``, resolved when it runs) or a name that resolves; an unknown name can
    never run, and resolving it raises the ``CloudletError`` that says so."""
    if curated_environment(name) is None and parse_reference(name) is None:
        resolve_environment(name)


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
        warnings = []
        retired = retired_environment(env)
        if retired is not None:
            warnings.append(
                f"environment '{env}' is retired in Azure ML; cloudlet uses its successor "
                f"'{curated.registry_uri}' instead (name that one to silence this warning)"
            )
        return _resolved("venv", list(curated.pip), None, curated.name, curated.python, warnings)
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
    if env.build is not None:
        raise validation_error(
            "environment.build",
            "a Docker build context is built only where a node has Docker or Podman, and no node "
            "here does: submit with the cloudlet CLI or client (they read the context's "
            "requirements.txt or conda file into the environment), or give 'image' and 'conda_file' "
            "(or register an environment asset from them) instead",
        )
    python, warnings = image_python(env.image), []
    if env.conda_file is not None:
        plan = conda_dependencies(env.conda_file)
        pip = with_base_packages([*plan.requirements, *pip])
        python = plan.python or python
        if plan.unmapped:
            warnings.append(
                "environment.conda_file: conda packages with no PyPI counterpart are not installed: "
                f"{', '.join(plan.unmapped)} (nodes without conda build conda files with pip; the "
                "PyPI wheels of the other packages bundle what they need)"
            )
    kind: Literal["image", "venv"] = "image" if env.image else "venv"
    resolved = _resolved(kind, pip, env.image, env.name, python, warnings)
    if isinstance(env.conda_file, dict):  # the same content either way: the hash is the pip set's
        resolved = dataclasses.replace(resolved, conda=env.conda_file)
    return resolved


def python_warning(resolved: ResolvedEnvironment, found: bool, own: str) -> str | None:
    """The submission warning for an environment whose pinned Python this host lacks (``found``
    False; ``own``: the Python nodes build on instead, e.g. "3.11"). None when nothing differs."""
    if not resolved.python or resolved.python == own or found:
        return None
    return (
        f"the environment pins Python {resolved.python}; nodes build it on python{resolved.python} "
        f"where they have one (on PATH or in CLOUDLET_PYTHONS), and this host has none: it is built "
        f"on Python {own} instead, where packages pinned for {resolved.python} may not install"
    )
