import argparse
import os


def init():
    global upper
    parser = argparse.ArgumentParser(allow_abbrev=False, description="ParallelRunStep Agent")
    parser.add_argument("--model", type=str, default=None)
    args, _ = parser.parse_known_args()
    with open(os.path.join(args.model, "mapping.txt")) as f:
        upper = f.read().strip() == "upper"
    print(f"init: AZUREML_PARALLEL_EXAMPLE={os.environ.get('AZUREML_PARALLEL_EXAMPLE')}")


def run(mini_batch):
    print(f"run method start: {__file__}, run({len(mini_batch)} files)")
    rows = []
    for path in mini_batch:
        with open(path) as f:
            letter = f.read().strip()
        rows.append(f"{os.path.basename(path)}: {letter.upper() if upper else letter}")
    return rows
