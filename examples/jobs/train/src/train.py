"""Softmax regression on the CSV files of a folder, standard library only.

python train.py --data <folder of CSVs> --lr 0.01 --out <folder>  →  <folder>/model.json
The last column of each CSV is the label; the others are numeric features.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import socket
from pathlib import Path


def load(folder: Path) -> tuple[list[str], list[list[float]], list[str]]:
    files = sorted(folder.rglob("*.csv")) if folder.is_dir() else [folder]
    if not files:
        raise SystemExit(f"no CSV files under {folder}")
    header: list[str] = []
    rows: list[list[float]] = []
    labels: list[str] = []
    for path in files:
        with path.open(newline="") as handle:
            reader = csv.reader(handle)
            header = next(reader)
            for record in reader:
                if record:
                    rows.append([float(v) for v in record[:-1]])
                    labels.append(record[-1])
        print(f"read {path.name}: {len(rows)} rows so far")
    return header[:-1], rows, labels


def standardise(rows: list[list[float]]) -> tuple[list[float], list[float], list[list[float]]]:
    n, d = len(rows), len(rows[0])
    mean = [sum(r[j] for r in rows) / n for j in range(d)]
    std = [math.sqrt(sum((r[j] - mean[j]) ** 2 for r in rows) / n) or 1.0 for j in range(d)]
    return mean, std, [[(r[j] - mean[j]) / std[j] for j in range(d)] for r in rows]


def softmax(z: list[float]) -> list[float]:
    top = max(z)
    e = [math.exp(v - top) for v in z]
    total = sum(e)
    return [v / total for v in e]


def train(x: list[list[float]], y: list[int], k: int, lr: float, epochs: int) -> list[list[float]]:
    d = len(x[0]) + 1  # + bias
    w = [[0.0] * d for _ in range(k)]
    for epoch in range(1, epochs + 1):
        grad = [[0.0] * d for _ in range(k)]
        loss = 0.0
        for features, label in zip(x, y, strict=True):
            xb = [*features, 1.0]
            p = softmax([sum(wc[j] * xb[j] for j in range(d)) for wc in w])
            loss -= math.log(max(p[label], 1e-12))
            for c in range(k):
                err = p[c] - (1.0 if c == label else 0.0)
                for j in range(d):
                    grad[c][j] += err * xb[j]
        for c in range(k):
            for j in range(d):
                w[c][j] -= lr * grad[c][j]
        if epoch == 1 or epoch % 50 == 0:
            print(f"epoch {epoch:4d}  loss {loss / len(x):.4f}")
    return w


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    print(f"training on {socket.gethostname()} with lr={args.lr}")

    names, rows, labels = load(Path(args.data))
    classes = sorted(set(labels))
    mean, std, x = standardise(rows)
    y = [classes.index(label) for label in labels]
    w = train(x, y, len(classes), args.lr, args.epochs)

    correct = 0
    for features, label in zip(x, y, strict=True):
        scores = [sum(wc[j] * v for j, v in enumerate([*features, 1.0])) for wc in w]
        correct += int(scores.index(max(scores)) == label)
    accuracy = correct / len(x)
    print(f"training accuracy {accuracy:.3f} on {len(x)} rows")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = {
        "kind": "softmax_regression",
        "features": names,
        "classes": classes,
        "mean": mean,
        "std": std,
        "weights": w,
        "learning_rate": args.lr,
        "epochs": args.epochs,
        "train_accuracy": accuracy,
    }
    (out / "model.json").write_text(json.dumps(model, indent=2))
    print(f"wrote {out / 'model.json'}")


if __name__ == "__main__":
    main()
