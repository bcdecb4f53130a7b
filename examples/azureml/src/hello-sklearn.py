"""Fit a small classifier with the curated sklearn-1.5 environment and keep it in ./outputs."""

import argparse
import pickle

from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression

parser = argparse.ArgumentParser()
parser.add_argument("--n-samples", type=int, default=100)
args = parser.parse_args()

X, y = make_classification(n_samples=args.n_samples, random_state=0)
model = LogisticRegression(max_iter=200).fit(X, y)
print(f"training accuracy {model.score(X, y):.3f} on {args.n_samples} samples")
with open("outputs/model.pkl", "wb") as f:
    pickle.dump(model, f)
