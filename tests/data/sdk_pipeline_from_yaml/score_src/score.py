"""The notebook's dummy scoring step (shortened): reads model.txt, writes score.txt."""

import argparse
from pathlib import Path

parser = argparse.ArgumentParser("score")
parser.add_argument("--model_input", type=str)
parser.add_argument("--test_data", type=str)
parser.add_argument("--score_output", type=str)
args = parser.parse_args()
print("hello scoring world...")
model = (Path(args.model_input) / "model.txt").read_text()
(Path(args.score_output) / "score.txt").write_text(f"Scored with the following model:\n{model}")
