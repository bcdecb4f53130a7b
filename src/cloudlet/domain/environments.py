"""A job's ``environment`` resolved to what a node must prepare (pure).

Curated names (``azureml://registries/azureml/environments/<name>/labels/latest`` or
``azureml:AzureML-<name>@latest``) map to built-in pip specs; an inline ``pip`` list or a
``conda_file``'s pip dependencies become a venv; ``image`` is kept (nodes without a container
runtime warn and use their Python). Equal specs hash alike, so they share one cached venv.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

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


CURATED_ENVIRONMENTS: dict[str, CuratedEnvironment] = {
    env.name: env
    for env in (
        CuratedEnvironment(
            "sklearn-1.5",
            ("scikit-learn~=1.5.0", "pandas~=2.2", "numpy<2.1", "scipy", "joblib"),
            "scikit-learn 1.5 with pandas and numpy (Azure: Ubuntu 22.04, Python 3.9, CPU)",
        ),
        CuratedEnvironment(
            "lightgbm-3.3",
            ("lightgbm~=3.3.0", "scikit-learn", "pandas", "numpy<2"),
            "LightGBM 3.3 with scikit-learn and pandas (CPU)",
        ),
        CuratedEnvironment(
            "acpt-pytorch-2.2-cuda12.1",
            ("torch~=2.2.0", "torchvision~=0.17.0", "numpy<2"),
            "PyTorch 2.2 (Azure Container for PyTorch, CUDA 12.1)",
        ),
        CuratedEnvironment(
            "tensorflow-2.16-cuda12",
            ("tensorflow~=2.16.0",),
            "TensorFlow 2.16 (CUDA 12)",
        ),
    )
}

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
