"""Fit y = 3x + 1 with DDP; the data and the model come from the `trainer` package beside this file.

Runs from the shipped folder (crosstrain changes into it on every node), under TorchDistributor's torchrun on
GPUs with NCCL or on CPUs with gloo. It reads only RANK, WORLD_SIZE and LOCAL_RANK.
"""

from __future__ import annotations

import argparse
import gc

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler
from trainer.data import line_dataset
from trainer.model import device, make_model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()

    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    on = device()
    data = line_dataset()
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=32, sampler=sampler)
    model = make_model(on)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    losses = []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for features, target in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(features.to(on)), target.to(on))
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    print(f"rank {rank}/{world}: loss {losses[0]:.4f} -> {losses[-1]:.4f}", flush=True)
    # DDP holds the process group in a reference cycle: free it (and its threads) while the interpreter is whole,
    # or the collector may do it during shutdown and abort the process (SIGABRT) after the work is done.
    del model, optimizer
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
