"""Environments as Azure builds them (issue 25, cause 1), the pure part: a conda file's conda
packages mapped to PyPI, the pinned Python, curated sets derived from Azure's definitions, retired
curated names, and an inline Docker build context."""

from __future__ import annotations

import pytest

from cloudlet.domain.assets.conda import (
    CONDA_TO_PYPI,
    NO_PYPI,
    conda_dependencies,
    conda_version,
    image_python,
    requirement_name,
)
from cloudlet.domain.assets.environments import (
    CURATED_ENVIRONMENTS,
    RETIRED_ENVIRONMENTS,
    curated_environment,
    python_warning,
    resolve_environment,
)
from cloudlet.domain.errors import CloudletError

# The shape of azureml-examples' cli/jobs/single-step/scikit-learn/iris/environment conda file:
# conda packages outside `pip:`, a python pin, a pip list.
SKLEARN_CONDA = {
    "name": "sklearn-env",
    "channels": ["conda-forge"],
    "dependencies": [
        "python=3.8",
        "pip=21.2.4",
        "scikit-learn=0.24.2",
        "scipy=1.7.1",
        {"pip": ["mlflow==1.26.1", "azureml-mlflow==1.42.0", "azureml-defaults"]},
    ],
}


@pytest.mark.parametrize(
    ("conda", "pep440"),
    [
        ("", ""),
        ("*", ""),
        ("=1.21", "==1.21.*"),
        ("1.21", "==1.21.*"),
        ("1.21.*", "==1.21.*"),
        ("=1.21.2", "==1.21.2.*"),
        ("==1.21.2", "==1.21.2"),
        ("=1.21.2=py39h5d0ccc0_0", "==1.21.2"),
        (">=1.2,<2", ">=1.2,<2"),
        (">=1.2, <2", ">=1.2,<2"),
        ("~=1.5.3", "~=1.5.3"),
        ("1.2|1.3", ""),
    ],
)
def test_conda_versions_become_pep440(conda: str, pep440: str) -> None:
    assert conda_version(conda) == pep440


def test_conda_packages_outside_pip_are_kept_mapped_and_versioned() -> None:
    plan = conda_dependencies(SKLEARN_CONDA)
    assert plan.python == "3.8"
    assert plan.requirements == [
        "scikit-learn==0.24.2.*",
        "scipy==1.7.1.*",
        "mlflow==1.26.1",
        "azureml-mlflow==1.42.0",
        "azureml-defaults",
    ]
    assert plan.unmapped == []


def test_names_that_differ_on_pypi_are_mapped_and_channels_stripped() -> None:
    plan = conda_dependencies(
        {
            "dependencies": [
                "conda-forge::pytorch=1.13",
                "py-xgboost>=1.5",
                "tensorflow-gpu",
                "pyyaml",
                "python-dateutil",
                "conda-forge/label/main::numpy 1.23.*",
                "matplotlib-base",
            ]
        }
    )
    assert plan.requirements == [
        "torch==1.13.*",
        "xgboost>=1.5",
        "tensorflow",
        "PyYAML",
        "python-dateutil",
        "numpy==1.23.*",
        "matplotlib",
    ]
    assert plan.renamed == {
        "pytorch": "torch",
        "py-xgboost": "xgboost",
        "tensorflow-gpu": "tensorflow",
        "matplotlib-base": "matplotlib",
    }
    assert all(v == v.strip() and v for v in CONDA_TO_PYPI.values())


def test_conda_only_packages_are_named_in_a_submission_warning() -> None:
    env = {
        "image": "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu20.04",
        "conda_file": {"dependencies": ["python=3.9", "cudatoolkit=11.3", "mkl", "numpy", {"pip": ["six"]}]},
    }
    resolved = resolve_environment(env)
    assert "cudatoolkit" in NO_PYPI and "mkl" in NO_PYPI
    assert resolved.pip == ["numpy", "pip", "setuptools<81", "six", "wheel"]
    assert resolved.python == "3.9"
    assert len(resolved.warnings) == 1
    assert "no PyPI counterpart" in resolved.warnings[0] and "cudatoolkit, mkl" in resolved.warnings[0]


def test_an_environment_from_a_conda_file_has_pip_setuptools_and_wheel() -> None:
    resolved = resolve_environment({"conda_file": SKLEARN_CONDA})
    names = {requirement_name(p) for p in resolved.pip}
    assert {"pip", "setuptools", "wheel", "scikit-learn", "scipy", "azureml-defaults"} <= names
    assert "setuptools<81" in resolved.pip  # pkg_resources, which azureml-defaults imports
    # A file that names setuptools itself keeps its own.
    own = resolve_environment({"conda_file": {"dependencies": [{"pip": ["setuptools>=82.0.1"]}]}})
    assert [p for p in own.pip if requirement_name(p) == "setuptools"] == ["setuptools>=82.0.1"]
    # A pinned Python is part of the hash (another interpreter: another venv); none keeps old hashes.
    assert (
        resolved.hash
        != resolve_environment(
            {
                "conda_file": {
                    **SKLEARN_CONDA,
                    "dependencies": [d for d in SKLEARN_CONDA["dependencies"] if d != "python=3.8"],
                }
            }
        ).hash
    )


@pytest.mark.parametrize(
    ("image", "python"),
    [
        ("library/python:3.11.6", "3.11"),
        ("python:3.9-slim", "3.9"),
        ("docker.io/library/python:3.10", "3.10"),
        ("mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu20.04", None),
        ("mcr.microsoft.com/aifx/acpt/stable-ubuntu2204-cu126-py310-torch280:biweekly", "3.10"),
        ("python", None),
        (None, None),
    ],
)
def test_a_base_images_python(image: str | None, python: str | None) -> None:
    assert image_python(image) == python


def test_a_pinned_python_the_host_lacks_is_a_warning_naming_the_one_used() -> None:
    resolved = resolve_environment({"conda_file": SKLEARN_CONDA})
    said = python_warning(resolved, found=False, own="3.11")
    assert said is not None and "pins Python 3.8" in said and "Python 3.11 instead" in said
    assert python_warning(resolved, found=True, own="3.11") is None
    assert python_warning(resolve_environment({"pip": ["six"]}), found=False, own="3.11") is None


# What the samples import in each curated environment (azureml-examples: cli/jobs/single-step/
# scikit-learn, lightgbm/iris; sdk/python/jobs/single-step/...): module → its PyPI distribution.
SAMPLE_IMPORTS = {
    "sklearn-1.5": {
        "sklearn": "scikit-learn",
        "pandas": "pandas",
        "numpy": "numpy",
        "mlflow": "mlflow-skinny",
        "matplotlib": "matplotlib",
        "pyarrow": "pyarrow",
        "scipy": "scipy",
        "joblib": "joblib",
    },
    "lightgbm-3.3": {
        "lightgbm": "lightgbm",
        "sklearn": "scikit-learn",
        "pandas": "pandas",
        "mlflow": "mlflow-skinny",
        "matplotlib": "matplotlib",
        "pyarrow": "pyarrow",
    },
}


@pytest.mark.parametrize("name", sorted(SAMPLE_IMPORTS))
def test_curated_sets_hold_what_the_samples_import(name: str) -> None:
    resolved = resolve_environment(f"azureml://registries/azureml/environments/{name}/labels/latest")
    names = {requirement_name(p) for p in resolved.pip}
    missing = {m: d for m, d in SAMPLE_IMPORTS[name].items() if d not in names}
    assert not missing, f"{name} lacks {missing}: {resolved.pip}"
    assert resolved.python == "3.10"  # Azure's image's Python, used where a node has it


def test_curated_sets_keep_azures_framework_pins_and_leave_out_its_platform_packages() -> None:
    sklearn = CURATED_ENVIRONMENTS["sklearn-1.5"]
    assert "scikit-learn~=1.5.0" in sklearn.pip
    assert not any(
        p.startswith(("azureml-core", "azureml-defaults", "scikit-learn-intelex")) for p in sklearn.pip
    )
    assert "lightgbm>=4.6.0" in CURATED_ENVIRONMENTS["lightgbm-3.3"].pip  # as Azure's image has it
    assert "acpt-pytorch-2.8-cuda12.6" in CURATED_ENVIRONMENTS  # the samples' PyTorch environment


@pytest.mark.parametrize(
    ("retired", "successor"),
    [
        ("azureml:AzureML-lightgbm-3.2-ubuntu18.04-py37-cpu:1", "lightgbm-3.3"),
        ("AzureML-sklearn-0.24-ubuntu18.04-py37-cpu@latest", "sklearn-1.5"),
        (
            "azureml://registries/azureml/environments/tensorflow-2.12-cuda11/labels/latest",
            "tensorflow-2.16-cuda11",
        ),
    ],
)
def test_retired_curated_names_resolve_to_their_successor_with_a_warning(
    retired: str, successor: str
) -> None:
    assert curated_environment(retired) is CURATED_ENVIRONMENTS[successor]
    resolved = resolve_environment(retired)
    assert resolved.name == successor and resolved.pip == sorted(
        CURATED_ENVIRONMENTS[successor].pip, key=str.lower
    )
    assert len(resolved.warnings) == 1 and "retired" in resolved.warnings[0]
    assert successor in resolved.warnings[0]
    assert all(new in CURATED_ENVIRONMENTS for new in RETIRED_ENVIRONMENTS.values())


def test_an_inline_build_context_is_accepted_and_refused_with_what_to_do() -> None:
    with pytest.raises(CloudletError) as info:
        resolve_environment({"build": {"path": "docker-context"}})
    assert info.value.target == "environment.build"
    assert "Docker or Podman" in info.value.message and "conda_file" in info.value.message


def test_a_malformed_conda_dependency_names_the_field() -> None:
    with pytest.raises(CloudletError) as info:
        conda_dependencies({"dependencies": ["numpy ≥ 1"]})
    assert info.value.target == "environment.conda_file.dependencies"
    with pytest.raises(CloudletError):
        conda_dependencies({"dependencies": [{"pip": "six"}]})
