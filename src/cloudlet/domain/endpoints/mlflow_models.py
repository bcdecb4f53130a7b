"""MLflow models deployed without a scoring script (no-code deployments, online and batch), as
Azure ML documents them (pure).

Azure scores such a model with its own flavor and builds its environment from the model's own
dependencies (``MLmodel``'s ``python_function.env``: ``conda.yaml``, else ``requirements.txt``).
cloudlet does the same: ``SCRIPT_NAME`` (``scoring/mlflow_scorer.py``) is the scoring script the
server puts beside the replica's code or the batch child's driver, and ``environment_for`` the
inline environment a deployment without one gets.
"""

from __future__ import annotations

from typing import Any

import yaml

from cloudlet.domain.errors import validation_error

MLFLOW_MODEL = "mlflow_model"
SCRIPT_NAME = "_cloudlet_mlflow_score.py"  # scoring/mlflow_scorer.py, copied under this name
MLMODEL = "MLmodel"
# What the scorer imports beyond the model's own packages, when the model names no mlflow.
SCORER_PACKAGES = ("mlflow-skinny", "pandas")


def check_scoring(has_code: bool, model_type: str | None, what: str) -> None:
    """A deployment without ``code_configuration`` needs an MLflow model (Azure's rule)."""
    if has_code or model_type == MLFLOW_MODEL:
        return
    raise validation_error(
        "code_configuration",
        f"{what} needs code_configuration (code and scoring_script), unless its model is an MLflow "
        f"model (type: mlflow_model, with an MLmodel file), which is scored with its own flavor; "
        f"this model is a {model_type or 'custom_model'}",
    )


def env_files(mlmodel_text: str) -> tuple[str | None, str | None]:
    """(conda file, requirements file) an MLmodel names for its ``python_function`` flavor
    (``env: conda.yaml`` or ``env: {conda: …, virtualenv: …}``); Azure's defaults otherwise."""
    try:
        doc = yaml.safe_load(mlmodel_text) or {}
    except yaml.YAMLError as exc:
        raise validation_error("model", f"the model's MLmodel file is not YAML: {exc}") from None
    flavors = doc.get("flavors") if isinstance(doc, dict) else None
    if not isinstance(flavors, dict) or "python_function" not in flavors:
        raise validation_error(
            "model",
            "the model's MLmodel has no python_function flavor, so it cannot be scored without a "
            "scoring script: give code_configuration (code and scoring_script)",
        )
    env = (flavors.get("python_function") or {}).get("env")
    if isinstance(env, str):
        return env, "requirements.txt"
    if isinstance(env, dict):
        return str(env.get("conda") or "conda.yaml"), "requirements.txt"
    return "conda.yaml", "requirements.txt"


def environment_for(conda_text: str | None, requirements_text: str | None) -> dict[str, Any]:
    """The inline environment of a no-code deployment: the model's conda file (its pip and conda
    packages), else its requirements.txt; with mlflow and pandas when the model names no mlflow."""
    env: dict[str, Any] = {"name": "mlflow-model-env"}
    packages: list[str] = []
    if conda_text:
        try:
            conda = yaml.safe_load(conda_text)
        except yaml.YAMLError as exc:
            raise validation_error("model", f"the model's conda file is not YAML: {exc}") from None
        if not isinstance(conda, dict):
            raise validation_error("model", "the model's conda file is not a mapping")
        env["conda_file"] = conda
        for dep in conda.get("dependencies") or []:
            packages += [str(p) for p in dep.get("pip") or []] if isinstance(dep, dict) else [str(dep)]
    elif requirements_text:
        lines = [line.split("#", 1)[0].strip() for line in requirements_text.splitlines()]
        packages = [line for line in lines if line and not line.startswith("-")]
        env["pip"] = list(packages)
    if not any(p.strip().lower().startswith("mlflow") for p in packages):
        env["pip"] = [*env.get("pip", []), *SCORER_PACKAGES]
    return env
