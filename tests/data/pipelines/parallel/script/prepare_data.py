import argparse
import os

parser = argparse.ArgumentParser()
parser.add_argument("--output", required=True)
args = parser.parse_args()
for index, letter in enumerate("abcdefg"):
    with open(os.path.join(args.output, f"{index}.txt"), "w") as out:
        out.write(letter)
print("wrote 7 files")
