# The shape of azureml-examples sdk/python/jobs/parallel/1a_.../src/file_batch_inference.py (as of
# 2026-12): init() reads its program arguments, run(mini_batch) returns a row per file. Our own
# small script: each row is "<file name>,<its word>-<the --suffix argument>".
import argparse
import os


def init():
    global suffix
    parser = argparse.ArgumentParser(allow_abbrev=False, description="ParallelRunStep Agent")
    parser.add_argument("--suffix", type=str, default="")
    args, _ = parser.parse_known_args()
    suffix = args.suffix
    print(f"init: suffix={suffix} DATA_KIND={os.environ.get('DATA_KIND')}")


def run(mini_batch):
    print(f"run method start: {__file__}, run({len(mini_batch)} files)")
    rows = []
    for path in mini_batch:
        with open(path) as f:
            word = f.read().strip()
        rows.append(f"{os.path.basename(path)},{word}-{suffix}")
    return rows
