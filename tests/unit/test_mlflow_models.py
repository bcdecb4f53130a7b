"""No-code MLflow deployments (pure): which models may go without a scoring script, the
environment from the model's own files, and the scorer's request shapes."""

from __future__ import annotations

import pytest

from cloudlet.domain.endpoints import mlflow_models
from cloudlet.domain.errors import CloudletError
from cloudlet.scoring import mlflow_scorer

MLMODEL = """
flavors:
  python_function:
    env: {conda: conda.yaml, virtualenv: python_env.yaml}
    loader_module: mlflow.sklearn
    model_path: model.pkl
  sklearn: {pickled_model: model.pkl}
"""


def test_only_an_mlflow_model_goes_without_code() -> None:
    mlflow_models.check_scoring(True, None, "an online deployment")
    mlflow_models.check_scoring(False, "mlflow_model", "an online deployment")
    with pytest.raises(CloudletError) as refused:
        mlflow_models.check_scoring(False, "custom_model", "an online deployment")
    assert refused.value.target == "code_configuration" and "mlflow_model" in refused.value.message


def test_the_environment_comes_from_the_models_files() -> None:
    assert mlflow_models.env_files(MLMODEL) == ("conda.yaml", "requirements.txt")
    assert mlflow_models.env_files("flavors: {python_function: {env: my.yaml}}") == (
        "my.yaml",
        "requirements.txt",
    )
    with pytest.raises(CloudletError) as no_pyfunc:
        mlflow_models.env_files("flavors: {sklearn: {}}")
    assert "python_function" in no_pyfunc.value.message
    conda = "name: mlflow-env\ndependencies:\n- python=3.8.5\n- pip\n- pip:\n  - mlflow\n  - scikit-learn\n"
    env = mlflow_models.environment_for(conda, "mlflow\n")
    assert env["conda_file"]["name"] == "mlflow-env" and "pip" not in env
    env = mlflow_models.environment_for(None, "# pinned\nscikit-learn==1.5\n-r other.txt\n")
    assert env["pip"] == ["scikit-learn==1.5", "mlflow-skinny", "pandas"]


def test_the_scorers_request_shapes() -> None:
    split = {"columns": ["a"], "index": [0], "data": [[1]]}
    assert mlflow_scorer.request_data({"input_data": split}) == ({"dataframe_split": split}, True)
    assert mlflow_scorer.request_data({"input_data": [[1, 2]]}) == ({"inputs": [[1, 2]]}, True)
    assert mlflow_scorer.request_data({"instances": [[1]]}) == ({"instances": [[1]]}, False)
    with pytest.raises(ValueError, match="input_data"):
        mlflow_scorer.request_data({"rows": []})
    with pytest.raises(ValueError, match="input_data"):
        mlflow_scorer.request_data({"instances": [], "inputs": []})
