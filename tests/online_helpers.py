"""An online deployment as a studio user makes one: a scoring script and a model folder, each as
the .zip the deployment form uploads (issue 28 item 1). The script reads ``AZUREML_MODEL_DIR/model``
as Azure's samples do, answers hostile text on request (XSS tests) and prints a hostile line into its
log at start."""

from __future__ import annotations

import io
import json
import tarfile
import textwrap
import zipfile

HOSTILE = "<img src=x onerror=console.error(1)></script><script>console.error(2)</script>"
SCORE = textwrap.dedent(
    """
    import json, os

    HOSTILE = {hostile!r}

    def init():
        global model
        with open(os.path.join(os.environ["AZUREML_MODEL_DIR"], "model", "model.json")) as f:
            model = json.load(f)
        print("init done " + HOSTILE, flush=True)

    def run(raw_data):
        data = json.loads(raw_data)["data"]
        if data == "hostile":
            return {{"echo": HOSTILE}}
        if data == "boom":
            raise ValueError("boom " + HOSTILE)
        return {{"who": os.environ.get("WHO"), "sums": [sum(row) * model["scale"] for row in data]}}
    """
).format(hostile=HOSTILE)
REQUEST = {"data": [[1, 2, 3]]}


def zipped(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return buffer.getvalue()


def tar_gz(files: dict[str, str]) -> bytes:
    """FILES (name: text) as a .tar.gz, as a user's archive of a folder."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def code_zip() -> bytes:
    return zipped({"score.py": SCORE})


def model_zip() -> bytes:
    """The model folder itself (``model/model.json``): its contents become AZUREML_MODEL_DIR."""
    return zipped({"model/model.json": json.dumps({"scale": 2})})


def deployment_yaml(endpoint: str, name: str, who: str) -> str:
    return textwrap.dedent(
        f"""\
        $schema: https://azuremlschemas.azureedge.net/latest/managedOnlineDeployment.schema.json
        name: {name}
        endpoint_name: {endpoint}
        model:
          path: ./model
        code_configuration:
          code: ./onlinescoring
          scoring_script: score.py
        environment: sklearn-inference
        instance_type: Standard_DS3_v2
        instance_count: 1
        environment_variables:
          WHO: {who}
        description: "{HOSTILE.replace('"', "'")}"
        tags:
          note: "{HOSTILE.replace('"', "'")}"
        readiness_probe:
          initial_delay: 1
          period: 1
          failure_threshold: 90
        """
    )
