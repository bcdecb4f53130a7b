import argparse
import pathlib

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--prepared", required=True)
args = parser.parse_args()
for path in sorted(pathlib.Path(args.data).glob("*.csv")):
    rows = [line.strip().lower() for line in path.read_text().splitlines() if line.strip()]
    (pathlib.Path(args.prepared) / path.name).write_text("\n".join(rows) + "\n")
print("prepared", args.prepared)
