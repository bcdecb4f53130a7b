"""cloudlet's scoring script for MLflow models deployed without one (no-code deployments, online
and batch), as Azure ML scores them: with the model's own flavor, loaded by ``mlflow.pyfunc``.

Standard library at import (mlflow and pandas come from the deployment's environment, which the
server derives from the model's own conda.yaml / requirements.txt); the server copies this file
beside the replica's code, or into a batch child's code, as ``_cloudlet_mlflow_score.py``.

- ``init()`` loads the model: the folder holding ``MLmodel`` at ``AZUREML_MODEL_DIR`` or one level
  below it (Azure puts the registered folder under its name there).
- ``run(raw_data)`` (online, the inference server hands it the request body): Azure's MLflow
  request ``{"input_data": {"columns": [...], "index": [...], "data": [...]}}`` (or a list, or
  named tensors) answers the predictions as a JSON list; MLflow's own ``dataframe_split``,
  ``dataframe_records``, ``instances`` and ``inputs`` answer ``{"predictions": [...]}``. A request
  of neither shape is a 400 that says which keys are expected.
- ``run(mini_batch)`` (batch, cloudlet's driver hands it file paths): each CSV (or Parquet) file
  is read with pandas and predicted; a row per input row, ``<row>,<prediction>,<file name>``, as
  Azure's MLflow batch deployments write ``predictions.csv``.
"""

from __future__ import annotations

import json
import os
from typing import Any

SCRIPT_NAME = "_cloudlet_mlflow_score.py"
MLFLOW_FORMATS = ("dataframe_split", "dataframe_records", "instances", "inputs")
_model: Any = None


def find_model(root: str) -> str:
    """The folder holding ``MLmodel``: ROOT itself, or the first (by name) folder below it that
    does; resolved, since the folder may be a link (mlflow refuses a path that leaves it)."""
    if os.path.isfile(os.path.join(root, "MLmodel")):
        return os.path.realpath(root)
    for name in sorted(os.listdir(root)):
        folder = os.path.join(root, name)
        if os.path.isfile(os.path.join(folder, "MLmodel")):
            return os.path.realpath(folder)
    raise FileNotFoundError(f"no MLflow model (a folder with an MLmodel file) in {root}")


def init() -> None:
    global _model
    import mlflow.pyfunc

    _model = mlflow.pyfunc.load_model(find_model(os.environ["AZUREML_MODEL_DIR"]))


def _schema() -> Any:
    signature = getattr(_model.metadata, "signature", None)
    return signature.inputs if signature is not None else None


def _jsonable(predictions: Any) -> Any:
    if hasattr(predictions, "to_dict") and hasattr(predictions, "columns"):  # a DataFrame
        return json.loads(predictions.to_json(orient="records"))
    if hasattr(predictions, "tolist"):  # a numpy array or a pandas Series
        return predictions.tolist()
    return predictions


def request_data(body: Any) -> tuple[dict[str, Any], bool]:
    """A request in one of MLflow's serving formats, and whether it came in Azure's ``input_data``
    shape (answered as a plain list). Raises ValueError naming the shapes it takes."""
    if not isinstance(body, dict):
        raise ValueError('the request is a JSON object: {"input_data": {"columns", "index", "data"}}')
    if "input_data" in body:
        data = body["input_data"]
        if isinstance(data, dict) and "data" in data:  # pandas' split orient
            return {"dataframe_split": data}, True
        return {"inputs": data}, True  # a list of rows, or named tensors
    found = [k for k in MLFLOW_FORMATS if k in body]
    if len(found) != 1:
        raise ValueError(
            "the request names its data with one key: input_data (Azure ML's shape: "
            '{"input_data": {"columns": [...], "index": [...], "data": [...]}}) or one of '
            f"{', '.join(MLFLOW_FORMATS)} (MLflow's); it has: {', '.join(sorted(body)) or 'none'}"
        )
    return {found[0]: body[found[0]]}, False


def _online(raw_data: str) -> Any:
    from mlflow.pyfunc.scoring_server import infer_and_parse_data

    try:
        data, azure_shape = request_data(json.loads(raw_data))
        frame = infer_and_parse_data(data, _schema())
    except Exception as exc:  # a request the model cannot take: the caller's to fix
        from azureml_inference_server_http.api.aml_response import AMLResponse

        return AMLResponse({"error": str(exc)}, 400, json_str=True)
    predictions = _jsonable(_model.predict(frame))
    return predictions if azure_shape else {"predictions": predictions}


def _read(path: str) -> Any:
    import pandas as pd

    if path.lower().endswith(".parquet"):
        return pd.read_parquet(path)
    return pd.read_csv(path)


def _batch(mini_batch: list[str]) -> list[str]:
    rows: list[str] = []
    for path in mini_batch:
        predictions = _jsonable(_model.predict(_read(path)))
        name = os.path.basename(path)
        for index, value in enumerate(predictions):
            shown = json.dumps(value) if isinstance(value, (dict, list)) else str(value)
            rows.append(f"{index},{shown},{name}")
    return rows


def run(data: Any) -> Any:
    """Online: DATA is the request body (a string); batch: a list of file paths."""
    if isinstance(data, list):
        return _batch(data)
    return _online(data if isinstance(data, str) else data.decode())
