"""An environment's Docker build context (``build: {path, dockerfile_path}``) as cloudlet builds it
(pure): no node here runs Docker or Podman, so the context's ``requirements.txt`` (or conda file)
becomes the environment's ``pip`` (``conda_file``), on the Python of its Dockerfile's base image.
A context with neither can only be made by a Docker build: refused, saying so and what to do.

The CLI and client read a local context (``client/assets.py``); the server reads the one the SDK
uploaded to the workspace's datastore (``services/assets/build_contexts.py``). Both pass its files here as
READ (a file's name in the context → its text, or None when it is not there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml

from cloudlet.domain.errors import validation_error

CONDA_NAMES = ("conda.yaml", "conda.yml", "conda_dependencies.yaml", "environment.yml", "environment.yaml")
NEEDS_DOCKER = (
    "{where} has no requirements.txt or conda file ({names}): cloudlet builds a build context from "
    "those; its Dockerfile is not run, because a Docker build needs a node with Docker or Podman and "
    "none here has one. Put the packages in a requirements.txt or conda file beside the Dockerfile, "
    "or use 'image' with 'conda_file' instead"
)

Read = Callable[[str], str | None]


def requirements(text: str) -> list[str]:
    """A requirements.txt's requirements (comments and ``-r``/``--index-url`` options left out)."""
    lines = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    return [line for line in lines if line and not line.startswith("-")]


def dockerfile_base(text: str | None) -> str | None:
    """The last stage's ``FROM`` image of a Dockerfile (None: no such file, or a templated name)."""
    if text is None:
        return None
    froms = [line.split() for line in text.splitlines() if line.strip().upper().startswith("FROM ")]
    images = [words[1] for words in froms if len(words) > 1]
    image = images[-1] if images else None
    return image if image and "{" not in image and "$" not in image else None


def conda_mapping(text: str, where: str, field: str) -> dict[str, Any]:
    try:
        conda = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise validation_error(field, f"{where} is not YAML: {exc}") from None
    if not isinstance(conda, dict):
        raise validation_error(field, f"{where} must hold a conda YAML mapping")
    return conda


def from_context(
    body: dict[str, Any], read: Read, dockerfile_path: str | None, where: str, field: str
) -> None:
    """BODY (an environment document, its ``build`` taken out) given what the context READ holds:
    the Dockerfile's base image as ``image`` (unless given), then its requirements.txt as ``pip``,
    else its conda file as ``conda_file``. WHERE names the context in messages, FIELD in errors."""
    if not body.get("image"):  # the Dockerfile's base image names its Python (python:3.10 …)
        image = dockerfile_base(read(dockerfile_path or "Dockerfile"))
        if image:
            body["image"] = image
    text = read("requirements.txt")
    if text is not None:
        body["pip"] = [*(body.get("pip") or []), *requirements(text)]
        return
    found = next(((name, text) for name in CONDA_NAMES if (text := read(name)) is not None), None)
    if found is not None and "conda_file" not in body:
        body["conda_file"] = conda_mapping(found[1], f"{where}/{found[0]}", field)
        return
    raise validation_error(field, NEEDS_DOCKER.format(where=where, names=", ".join(CONDA_NAMES)))
