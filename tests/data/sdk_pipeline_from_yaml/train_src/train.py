"""The notebook's dummy training step (shortened): reads its data folder, writes model.txt."""

import argparse
import os
from pathlib import Path

parser = argparse.ArgumentParser("train")
parser.add_argument("--training_data", type=str)
parser.add_argument("--max_epochs", type=int)
parser.add_argument("--learning_rate", type=float)
parser.add_argument("--learning_rate_schedule", type=str)
parser.add_argument("--model_output", type=str)
args = parser.parse_args()
files = sorted(os.listdir(args.training_data))
print("hello training world...", files)
model = f"model epochs={args.max_epochs} lr={args.learning_rate}"
model += f" schedule={args.learning_rate_schedule} data={files}\n"
(Path(args.model_output) / "model.txt").write_text(model)
