import json
import logging
import os

import joblib


def init():
    global model
    # As Azure lays it out: the deployment's model folder ("model") lies under AZUREML_MODEL_DIR.
    model_path = os.path.join(os.getenv("AZUREML_MODEL_DIR"), "model/sklearn_regression_model.pkl")
    model = joblib.load(model_path)
    logging.info("Init complete")


def run(raw_data):
    data = json.loads(raw_data)["data"]
    return model.predict(data).tolist()
