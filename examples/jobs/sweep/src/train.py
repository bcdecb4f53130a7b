"""A toy training loop for the sweep example: no data, no framework, a loss that depends on the
hyperparameters the way real ones often do (too small or too large a learning rate is worse, one
optimizer is better), logged with MLflow once per epoch like a real training script would."""

from __future__ import annotations

import argparse
import math
import time

import mlflow


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--optimizer", choices=["sgd", "adam"], required=True)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--epoch-seconds", type=float, default=0.5)
    args = parser.parse_args()
    # Best near lr = 0.03; adam converges to a lower floor than sgd.
    distance = abs(math.log10(args.lr) - math.log10(0.03))
    floor = (0.05 if args.optimizer == "adam" else 0.25) + distance
    mlflow.log_params({"lr": args.lr, "optimizer": args.optimizer})
    for epoch in range(1, args.epochs + 1):
        time.sleep(args.epoch_seconds)
        loss = floor + 2.0 * math.exp(-epoch / 2)
        mlflow.log_metric("loss", loss, step=epoch)
        print(f"epoch {epoch}: loss {loss:.4f}", flush=True)


if __name__ == "__main__":
    main()
