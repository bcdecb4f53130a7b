"""A linear model's scoring script in the shape of Azure's samples: init() once, run() per request."""

import json
import logging
import os

import numpy


def init():
    global intercept, coefficients
    # AZUREML_MODEL_DIR holds the model folder by its name (model/), as on Azure ML.
    with open(os.path.join(os.environ["AZUREML_MODEL_DIR"], "model", "model.json")) as f:
        model = json.load(f)
    intercept, coefficients = model["intercept"], numpy.array(model["coefficients"])
    logging.info("Init complete")


def run(raw_data):
    data = numpy.array(json.loads(raw_data)["data"], dtype=float)
    return (data @ coefficients + intercept).tolist()
