"""A small DDP job for the Databricks example: fit y = 3x + 1 on every rank's shard of synthetic data.

Runs unchanged under TorchDistributor (which starts it through torchrun) on GPUs with NCCL or on CPUs with gloo.
It reads only RANK, WORLD_SIZE and LOCAL_RANK, as TorchDistributor sets them in both local and distributed mode.
With --output-dir, rank 0 writes metrics.json (first and last loss) and the model's weights there.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--output-dir", default=os.environ.get("CROSSTRAIN_OUTPUT_DIR"))
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank = dist.get_rank()
    device = torch.device(f"cuda:{os.environ['LOCAL_RANK']}" if use_cuda else "cpu")

    generator = torch.Generator().manual_seed(0)
    x = torch.rand(512, 1, generator=generator)
    data = TensorDataset(x, 3 * x + 1)
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=32, sampler=sampler)

    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(1, 1).to(device), device_ids=[device.index] if use_cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    losses = []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for features, target in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(features.to(device)), target.to(device))
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    print(f"rank {rank}: loss {losses[0]:.4f} -> {losses[-1]:.4f}", flush=True)

    if rank == 0 and args.output_dir:
        out = Path(args.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        torch.save(model.module.state_dict(), out / "model.pt")
        world = dist.get_world_size()
        (out / "metrics.json").write_text(
            json.dumps({"first_loss": losses[0], "last_loss": losses[-1], "world_size": world})
        )
    # DDP holds the process group in a reference cycle: free it (and its threads) while the interpreter is whole,
    # or the collector may do it during shutdown and abort the process (SIGABRT) after the work is done.
    del model, optimizer
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
