"""A conda file's dependencies as PyPI requirements (pure).

Nodes without conda or micromamba (conda's channels may be unreachable from them) build a conda
file's environment with pip/uv, so each conda package maps to its PyPI distribution: the same
name for most, a reviewed table (``CONDA_TO_PYPI``) for names that differ, and ``NO_PYPI`` for the
ones that have no PyPI counterpart (system libraries, CUDA toolkits: reported by name). Conda's
version syntax becomes PEP 440: ``numpy=1.21`` → ``numpy==1.21.*``, ``numpy==1.21.2``, ``>=``
ranges and ``~=`` unchanged; a build string (``numpy=1.21.2=py39h…``) is dropped. ``python=3.8``
is the interpreter pin, not a package; ``pip`` is always there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from cloudlet.domain.errors import validation_error

# conda-forge / defaults name → PyPI distribution, where they differ (reviewed against the
# conda-forge feedstocks' ``about.home`` / PyPI pages).
CONDA_TO_PYPI: dict[str, str] = {
    "pytorch": "torch",
    "pytorch-cpu": "torch",
    "pytorch-gpu": "torch",
    "py-xgboost": "xgboost",
    "py-xgboost-cpu": "xgboost",
    "py-xgboost-gpu": "xgboost",
    "xgboost": "xgboost",
    "tensorflow-gpu": "tensorflow",
    "tensorflow-cpu": "tensorflow-cpu",
    "pyyaml": "PyYAML",
    "yaml": "PyYAML",
    "python-dateutil": "python-dateutil",
    "dateutil": "python-dateutil",
    "pillow": "pillow",
    "opencv": "opencv-python",
    "py-opencv": "opencv-python",
    "libopencv": "opencv-python",
    "matplotlib-base": "matplotlib",
    "pytables": "tables",
    "msgpack-python": "msgpack",
    "protobuf": "protobuf",
    "libprotobuf": "protobuf",
    "lightgbm": "lightgbm",
    "py-lightgbm": "lightgbm",
    "arrow-cpp": "pyarrow",
    "pyarrow": "pyarrow",
    "scikit-learn": "scikit-learn",
    "sklearn": "scikit-learn",
    "beautifulsoup4": "beautifulsoup4",
    "pytorch-lightning": "pytorch-lightning",
    "ruamel_yaml": "ruamel.yaml",
    "ruamel.yaml": "ruamel.yaml",
    "typing_extensions": "typing-extensions",
    "importlib_metadata": "importlib-metadata",
    "jupyter_client": "jupyter-client",
    "prompt_toolkit": "prompt-toolkit",
    "huggingface_hub": "huggingface-hub",
    "graphviz": "graphviz",
    "python-graphviz": "graphviz",
    "pydot": "pydot",
    "numpy-base": "numpy",
}

# Conda packages with no PyPI distribution: native libraries and toolchains that PyPI wheels bundle
# (or that a node provides). Installing the rest of the file still makes sense: reported by name.
NO_PYPI: frozenset[str] = frozenset(
    {
        *("cudatoolkit", "cuda-toolkit", "cuda", "cudnn", "nccl", "cuda-nvcc", "cuda-runtime", "magma-cuda"),
        *("mkl", "mkl-service", "mkl_fft", "mkl_random", "mkl-include", "intel-openmp", "blas", "libblas"),
        *("openblas", "libopenblas", "liblapack", "libgcc-ng", "libstdcxx-ng", "_libgcc_mutex"),
        *("openmpi", "mpich", "gcc", "gxx", "gcc_linux-64", "gxx_linux-64", "make", "cmake-binary"),
        *("ca-certificates", "certifi-system", "openssl", "libffi", "zlib", "xz", "bzip2", "ncurses"),
        *("readline", "sqlite", "tk", "libuuid", "ld_impl_linux-64", "libgomp", "llvm-openmp", "git"),
        *("cpuonly", "pytorch-cuda", "pytorch-mutex", "nodejs", "r-base", "tbb", "icu", "libiconv"),
    }
)

# Packages a conda environment always has (conda's ``python`` depends on pip; pip on setuptools
# and wheel): an environment from a conda file gets them unless it names them itself.
# setuptools < 81: the last with ``pkg_resources``, which azureml-defaults and older packages import.
BASE_PACKAGES: tuple[str, ...] = ("pip", "setuptools<81", "wheel")


def with_base_packages(requirements: list[str]) -> list[str]:
    """``BASE_PACKAGES`` the requirements do not name already, then the requirements."""
    named = {requirement_name(r) for r in requirements}
    return [*(b for b in BASE_PACKAGES if requirement_name(b) not in named), *requirements]


def requirement_name(requirement: str) -> str:
    """The normalised distribution name of a requirement (PEP 503): ``PyYAML>=6`` → ``pyyaml``."""
    found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return re.sub(r"[-_.]+", "-", found.group(1)).lower() if found else requirement.strip().lower()


_SPEC = re.compile(
    r"""^(?:(?P<channel>[A-Za-z0-9_.\-/:]+)::)?      # conda-forge::numpy
        (?P<name>[A-Za-z0-9_][A-Za-z0-9_.\-]*)
        (?P<extras>\[[^\]]*\])?
        \s*(?P<version>[^\s#]*(?:\s*,\s*[^\s#]+)*)?\s*$""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class CondaPlan:
    """What a conda file's dependencies become on a node without conda."""

    requirements: list[str] = field(default_factory=list)  # PEP 508, conda ones first, then pip:
    python: str | None = None  # "3.8" from python=3.8 (major.minor)
    unmapped: list[str] = field(default_factory=list)  # conda packages with no PyPI counterpart
    renamed: dict[str, str] = field(default_factory=dict)  # conda name → PyPI name, where different


def conda_version(spec: str) -> str:
    """A conda version constraint as PEP 440: ``1.21`` / ``=1.21`` / ``1.21.*`` → ``==1.21.*``
    (conda's ``=`` is a prefix match), ``1.21.2=py39h…`` (with a build string) → ``==1.21.2``,
    ``==1.21.2``, ``>=1.2,<2`` and ``~=1.5.0`` unchanged; ``1.2|1.3`` (alternatives) → no constraint."""
    text = "".join(spec.split())
    if not text or text == "*" or "|" in text:
        return ""
    out = []
    for part in filter(None, text.split(",")):
        op = re.match(r"^(==|>=|<=|!=|~=|>|<)", part)
        if op:
            out.append(op.group(1) + part[op.end() :].split("=")[0])  # no build string
            continue
        version, build = part.lstrip("=").partition("=")[::2]
        version = version.rstrip("*").rstrip(".")
        if not version:
            continue
        out.append(f"=={version}" if build else f"=={version}.*")
    return ",".join(out)


def conda_dependencies(conda: dict[str, Any], field_name: str = "environment.conda_file") -> CondaPlan:
    """A conda file's mapping → its PyPI plan. Raises ``CloudletError`` naming ``field_name`` for a
    malformed file."""
    deps = conda.get("dependencies") or []
    if not isinstance(deps, list):
        raise validation_error(f"{field_name}.dependencies", "'dependencies' must be a list")
    conda_reqs: list[str] = []
    pip_reqs: list[str] = []
    python: str | None = None
    unmapped: list[str] = []
    renamed: dict[str, str] = {}
    for dep in deps:
        if isinstance(dep, dict):
            pip = dep.get("pip") or []
            if not isinstance(pip, list):
                raise validation_error(
                    f"{field_name}.dependencies", "the 'pip' entry of dependencies must be a list"
                )
            pip_reqs.extend(str(p).strip() for p in pip if str(p).strip())
            continue
        if not isinstance(dep, str) or not dep.strip():
            continue
        match = _SPEC.match(dep.strip())
        if match is None:
            raise validation_error(
                f"{field_name}.dependencies",
                f"cannot read the conda dependency {dep!r}: write it as name, name=1.2 or name>=1.2",
            )
        name = match.group("name").lower()
        version = conda_version(match.group("version") or "")
        if name == "python":
            python = python_minor(match.group("version") or "")
            continue
        if name == "pip":
            continue  # always there (BASE_PACKAGES)
        if name in NO_PYPI:
            unmapped.append(match.group("name"))
            continue
        pypi = CONDA_TO_PYPI.get(name, match.group("name"))
        if pypi.lower() != name:
            renamed[match.group("name")] = pypi
        conda_reqs.append(f"{pypi}{match.group('extras') or ''}{version}")
    return CondaPlan(conda_reqs + pip_reqs, python, unmapped, renamed)


def python_minor(spec: str) -> str | None:
    """``3.8``, ``=3.8``, ``3.8.13``, ``>=3.8`` (the lowest it allows), ``3.10.*`` → ``3.8``/``3.10``."""
    found = re.search(r"(\d+)\.(\d+)", spec)
    return f"{found.group(1)}.{found.group(2)}" if found else None


def image_python(image: str | None) -> str | None:
    """The Python a base image names: ``python:3.11.6``, ``library/python:3.9-slim``,
    ``docker.io/library/python:3.10``; Azure's own images (``…-py38-…``) → ``3.8``. None when the
    name says nothing."""
    if not image:
        return None
    repo, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "")
    if repo.rsplit("/", 1)[-1] == "python" and tag:
        return python_minor(tag)
    found = re.search(r"[-_]py(3)(\d{1,2})(?:[-_.:]|$)", image)
    return f"{found.group(1)}.{found.group(2)}" if found else None
