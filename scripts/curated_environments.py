#!/usr/bin/env python3
"""Regenerate src/cloudlet/domain/data/curated_environments.yaml from Azure's published definitions.

    .venv/bin/python scripts/curated_environments.py GIT_DIR [COMMIT] \
        > src/cloudlet/domain/data/curated_environments.yaml

GIT_DIR is a clone (or bare mirror) of https://github.com/Azure/azureml-assets; each
``assets/training/general/environments/<name>/context/`` there is read at COMMIT (default HEAD):
its conda file (conda packages mapped to PyPI by ``cloudlet.domain.assets.conda``, as a job's conda file
is) or its requirements.txt, and its Dockerfile (the base image's Python; the torch pins of the
ACPT images). The reviewed choices below (``OMIT``, ``SUBSTITUTE``, ``KEEP_PINS``) turn Azure's
image contents into a set that installs with pip on the node's Python:

- Azure's platform packages (azureml-core, azureml-defaults, telemetry, profilers, debuggers) and
  the pins Azure adds only to patch transitive CVEs are left out, and listed as ``omitted``;
- azureml-mlflow becomes mlflow-skinny (cloudlet's tracking server speaks MLflow's REST API);
- the packages that define the environment keep Azure's version specifiers (``KEEP_PINS``); the
  others (pandas, numpy, matplotlib, pyarrow …) are unpinned, so they resolve for the node's
  Python: Azure's pins (numpy~=1.22 for Python 3.10) have no wheels for newer interpreters.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cloudlet.domain.assets.conda import conda_dependencies, image_python

ROOT = "assets/training/general/environments"
SKIP = {"acpt-tests"}
OMIT = {
    *("azureml-core", "azureml-defaults", "azureml-telemetry", "azureml-dataset-runtime", "azure-ml"),
    *("azure-ml-component", "azureml-contrib-services", "azureml-inference-server-http"),
    *("azure-monitor-opentelemetry-exporter", "scikit-learn-intelex", "py-spy", "debugpy"),
    *("torch-tb-profiler", "py-cpuinfo", "horovod", "pip", "setuptools", "wheel"),
    # pinned by Azure only to patch CVEs of transitive dependencies
    *("cryptography", "starlette", "idna", "certifi", "requests", "urllib3", "aiohttp", "filelock"),
    *("jaraco.context", "pytest", "onnx", "markupsafe", "flask-cors", "distributed", "adlfs"),
}
SUBSTITUTE = {"azureml-mlflow": "mlflow-skinny~=2.16"}  # the client part of mlflow, as before
KEEP_PINS = {
    *("scikit-learn", "lightgbm", "xgboost", "torch", "torchvision", "torchaudio"),
    *("tensorflow", "keras", "tf-keras", "tensorflow-datasets", "transformers"),
}
# Retired curated names (Azure's samples still name some) → their successors. Reviewed by hand:
# the successor is the newest environment of the same framework.
RETIRED = {
    "sklearn-0.24-ubuntu18.04-py37-cpu": "sklearn-1.5",
    "sklearn-1.0-ubuntu20.04-py38-cpu": "sklearn-1.5",
    "lightgbm-3.2-ubuntu18.04-py37-cpu": "lightgbm-3.3",
    "pytorch-1.9-ubuntu18.04-py37-cuda11-gpu": "acpt-pytorch-2.8-cuda12.6",
    "pytorch-1.10-ubuntu18.04-py37-cuda11-gpu": "acpt-pytorch-2.8-cuda12.6",
    "acpt-pytorch-2.1-cuda12.1": "acpt-pytorch-2.2-cuda12.1",
    "tensorflow-2.7-ubuntu20.04-py38-cuda11-gpu": "tensorflow-2.16-cuda12",
    "tensorflow-2.12-cuda11": "tensorflow-2.16-cuda11",
}
NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9_.\-]*)(\[[^\]]*\])?\s*(.*)$")


def show(git_dir: str, commit: str, path: str) -> str | None:
    done = subprocess.run(
        ["git", "-C", git_dir, "show", f"{commit}:{path}"], capture_output=True, text=True, check=False
    )
    return done.stdout if done.returncode == 0 else None


def requirement(spec: str) -> tuple[str, str] | None:
    """(PyPI name, the requirement to install) for one of Azure's lines; None to leave it out."""
    spec = spec.split("#", 1)[0].strip()
    match = NAME.match(spec)
    if not spec or spec.startswith("-") or match is None:
        return None
    name, extras, version = match.group(1), match.group(2) or "", match.group(3).replace(" ", "")
    key = name.lower()
    if key in SUBSTITUTE:
        substitute = NAME.match(SUBSTITUTE[key])
        assert substitute is not None
        return substitute.group(1).lower(), SUBSTITUTE[key]
    if key in OMIT:
        return None
    version = re.sub(r"\+[A-Za-z0-9.]+", "", version)  # torch==2.10.0+cu126: PyPI's has no local tag
    if "{{" in version or key not in KEEP_PINS:
        version = ""
    return key, f"{name}{extras}{version}"


def environment(git_dir: str, commit: str, name: str) -> dict[str, Any]:
    context = f"{ROOT}/{name}/context"
    dockerfile = show(git_dir, commit, f"{context}/Dockerfile") or ""
    images = [line.split()[1] for line in dockerfile.splitlines() if line.upper().startswith("FROM ")]
    python = image_python(images[-1]) if images else None
    lines: list[str] = []
    conda_text = show(git_dir, commit, f"{context}/conda_dependencies.yaml")
    if conda_text is not None:
        plan = conda_dependencies(yaml.safe_load(conda_text), "conda_dependencies.yaml")
        python = plan.python or python
        lines += plan.requirements
        source = f"{context}/conda_dependencies.yaml"
    else:
        lines += (show(git_dir, commit, f"{context}/requirements.txt") or "").splitlines()
        source = f"{context}/requirements.txt"
        # ACPT images: torch comes from the base image (its tag: torch280) or the Dockerfile's upgrade
        pinned = re.findall(r"'(torch(?:vision|audio)?==[^']+)'", dockerfile)
        tagged = re.search(r"-torch(\d)(\d+)(\d)\b", images[-1] if images else "")
        if pinned:
            lines += pinned
        elif tagged:
            lines.append(f"torch~={tagged.group(1)}.{tagged.group(2)}.{tagged.group(3)}")
    pip: dict[str, str] = {}
    omitted: list[str] = []
    for line in lines:
        found = requirement(line)
        if found is None:
            if line.split("#", 1)[0].strip():
                omitted.append(NAME.match(line.strip()).group(1) if NAME.match(line.strip()) else line)  # type: ignore[union-attr]
            continue
        pip.setdefault(found[0], found[1])
    entry: dict[str, Any] = {
        "description": f"Azure ML's {name}: {', '.join(v for k, v in sorted(pip.items()) if k in KEEP_PINS)}",
        "python": python,
        "mlflow": any(k.startswith("mlflow") for k in pip),
        "pip": sorted(pip.values(), key=str.lower),
        "omitted": sorted(set(omitted), key=str.lower),
        "source": source,
    }
    return entry


def main(argv: list[str]) -> int:
    if not 2 <= len(argv) <= 3:
        print(__doc__, file=sys.stderr)
        return 2
    git_dir = argv[1]
    commit = subprocess.run(
        ["git", "-C", git_dir, "rev-parse", argv[2] if len(argv) > 2 else "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    listed = subprocess.run(
        ["git", "-C", git_dir, "ls-tree", "--name-only", f"{commit}:{ROOT}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    table = {name: environment(git_dir, commit, name) for name in sorted(listed) if name not in SKIP}
    header = f"""\
# Curated environments: the names Azure ML users write, each mapped to the pip set a node installs
# (domain/assets/environments.py loads this file; tests/unit check its shape and the samples' imports).
#
# GENERATED by scripts/curated_environments.py from Azure's published definitions:
#   https://github.com/Azure/azureml-assets  commit {commit}
#   {ROOT}/<name>/context/ (conda file or requirements.txt, and Dockerfile)
# Edit the script's reviewed tables (OMIT, SUBSTITUTE, KEEP_PINS, RETIRED), not this file.
#
# A job names one as  azureml://registries/azureml/environments/<name>/labels/latest
#                 or  azureml:AzureML-<name>@latest  (also /versions/<v>, :<v>, AzureML-<name>).
# Fields: python (Azure's image's Python: used where a node has it), pip (what is installed),
# omitted (Azure's platform packages and CVE-only pins, not installed), source (the file read).
"""
    doc = {"source": {"repository": "Azure/azureml-assets", "commit": commit}, "environments": table}
    doc["retired"] = RETIRED
    sys.stdout.write(header + yaml.safe_dump(doc, sort_keys=False, width=110))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
