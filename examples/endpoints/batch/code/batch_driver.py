"""A batch scoring script in the shape of Azure's: init() once per process, run() per mini-batch
(a list of file paths), one row per file."""

import glob
import json
import os
from os.path import basename


def init():
    global threshold
    # AZUREML_MODEL_DIR holds the model folder by its name, as on Azure ML.
    model_file = glob.glob(os.path.join(os.environ["AZUREML_MODEL_DIR"], "*", "threshold.json"))[0]
    with open(model_file) as f:
        threshold = json.load(f)["threshold"]


def run(mini_batch):
    rows = []
    for path in mini_batch:
        with open(path) as f:
            values = [float(line) for line in f if line.strip()]
        mean = sum(values) / len(values)
        rows.append([basename(path), round(mean, 3), int(mean > threshold)])
    return rows
