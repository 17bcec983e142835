"""Plain `torch.distributed` with `init_method="env://"`, as the platforms' guides show it: nothing crosstrain.

It reads `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT` (and `LOCAL_RANK`) from the environment, trains a
small DDP model a few steps on synthetic data and prints a digest of its final parameters: every rank prints the
same one when DDP kept them in step.
"""

from __future__ import annotations

import hashlib
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def digest(model: torch.nn.Module) -> str:
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return hashlib.sha256(repr(flat.tolist()).encode()).hexdigest()[:16]


def main() -> None:
    dist.init_process_group("gloo")  # init_method defaults to env://
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)  # a different start on every rank: DDP broadcasts rank 0's weights
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(100 + rank)  # each rank its own batches
    for _ in range(5):
        features = torch.randn(16, 8, generator=data)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(features), features.sum(1, keepdim=True)).backward()
        optimizer.step()
    print(f"rank {rank}/{world} local {os.environ.get('LOCAL_RANK')} params {digest(model.module)}", flush=True)
    dist.barrier()
    del model, optimizer  # free DDP's reducer before the group it holds
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
