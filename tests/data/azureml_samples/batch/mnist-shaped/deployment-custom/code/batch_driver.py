import glob
import json
import os
from os.path import basename


def init():
    global threshold
    # As on Azure: AZUREML_MODEL_DIR holds the model's folder by its name.
    model_file = glob.glob(f"{os.environ['AZUREML_MODEL_DIR']}/*/*.json")[-1]
    with open(model_file) as f:
        threshold = json.load(f)["threshold"]


def run(mini_batch):
    results = []
    for path in mini_batch:
        with open(path) as f:
            value = float(f.read().strip())
        results.append([basename(path), int(value > threshold)])
    return results
