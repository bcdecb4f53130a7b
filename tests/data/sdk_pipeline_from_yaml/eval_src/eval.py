"""The notebook's dummy evaluation step (shortened): reads score.txt, writes eval_result.txt."""

import argparse
from pathlib import Path

parser = argparse.ArgumentParser("eval")
parser.add_argument("--scoring_result", type=str)
parser.add_argument("--eval_output", type=str)
args = parser.parse_args()
print("hello evaluation world...")
score = (Path(args.scoring_result) / "score.txt").read_text()
(Path(args.eval_output) / "eval_result.txt").write_text(f"Eval done of:\n{score}")
