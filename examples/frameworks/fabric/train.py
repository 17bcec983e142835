"""Lightning Fabric (DDP, CPU, gloo), unchanged: Fabric reads the cluster from the environment itself.

`--devices` and `--num-nodes` are what the job runs (Fabric checks them against the environment). It trains a
small model a few steps and prints a digest of its final parameters: every rank prints the same one.
"""

from __future__ import annotations

import argparse
import hashlib

import torch
from lightning_fabric import Fabric


def digest(model: torch.nn.Module) -> str:
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return hashlib.sha256(repr(flat.tolist()).encode()).hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--num-nodes", type=int, default=2)
    args = parser.parse_args()
    fabric = Fabric(accelerator="cpu", strategy="ddp", devices=args.devices, num_nodes=args.num_nodes)
    fabric.launch()
    torch.manual_seed(fabric.global_rank)  # a different start on every rank: DDP broadcasts rank 0's weights
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    data = torch.Generator().manual_seed(100 + fabric.global_rank)
    for _ in range(5):
        features = torch.randn(16, 8, generator=data)
        optimizer.zero_grad()
        fabric.backward(torch.nn.functional.mse_loss(model(features), features.sum(1, keepdim=True)))
        optimizer.step()
    print(f"rank {fabric.global_rank}/{fabric.world_size} node {fabric.node_rank} params {digest(model)}", flush=True)
    fabric.barrier()


if __name__ == "__main__":
    main()
