"""A trainer package as AI Platform Training's PyTorch guide sets one up: plain torch, no crosstrain.

The platform sets WORLD_SIZE, RANK, MASTER_ADDR and MASTER_PORT on every node of a distributed PyTorch job;
`init_process_group(init_method="env://")` reads them. A single process (no WORLD_SIZE) trains alone.
"""

from __future__ import annotations

import argparse
import gc
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    cuda = torch.cuda.is_available()
    if distributed:
        dist.init_process_group(backend="nccl" if cuda else "gloo", init_method="env://")
    rank = dist.get_rank() if distributed else 0
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")

    generator = torch.Generator().manual_seed(0)
    features = torch.randn(2048, 8, generator=generator)
    data = TensorDataset(features, features.sum(dim=1, keepdim=True))
    sampler = DistributedSampler(data) if distributed else None
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, shuffle=sampler is None)

    model: torch.nn.Module = torch.nn.Linear(8, 1).to(device)
    if distributed:
        model = DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs}: loss {loss.item():.5f}", flush=True)
    print(f"rank {rank} done", flush=True)
    if distributed:
        # DDP holds the process group in a reference cycle: free it (and its threads) while the interpreter is
        # whole, or the collector may do it during shutdown and abort the process (SIGABRT) after the work is done.
        del model, optimizer
        gc.collect()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
