import argparse
import pathlib

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--score_mode", required=True)
parser.add_argument("--scores", required=True)
args = parser.parse_args()
rows = []
for path in sorted(pathlib.Path(args.data).glob("*.csv")):
    rows += [f"{line},{len(line)},{args.score_mode}" for line in path.read_text().split()]
(pathlib.Path(args.scores) / "scores.csv").write_text("\n".join(rows) + "\n")
print(f"scored {len(rows)} rows")
