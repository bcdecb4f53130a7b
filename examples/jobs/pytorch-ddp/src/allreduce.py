"""torch.distributed smoke test: each rank contributes rank+1; all_reduce sums them over gloo.

Reads MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK (set per process for `distribution: pytorch`).
"""

from __future__ import annotations

import datetime
import os
import socket

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    tensor = torch.tensor([float(rank + 1)])
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    expected = world * (world + 1) / 2
    print(
        f"rank {rank}/{world} (node {os.environ.get('NODE_RANK')}, local {os.environ.get('LOCAL_RANK')}) "
        f"on {socket.gethostname()}: all_reduce sum = {tensor.item():g} (expected {expected:g})",
        flush=True,
    )
    if tensor.item() != expected:
        raise SystemExit(f"all_reduce gave {tensor.item()}, expected {expected}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
