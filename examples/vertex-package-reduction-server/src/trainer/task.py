"""A trainer package for Vertex AI: crosstrain's runtime (shipped in the package) places the process in the job
and starts the process group, whatever started it (Vertex's one process per node, crosstrain's launcher,
torchrun here). The all-reduce goes through the Reduction Server where Vertex runs one (NCCL on GPUs).
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

from crosstrain import runtime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    with runtime.init() as env:
        device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
        generator = torch.Generator().manual_seed(0)
        features = torch.randn(2048, 8, generator=generator)
        data = TensorDataset(features, features.sum(dim=1, keepdim=True))
        sampler = runtime.sampler(data)
        loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
        model = runtime.wrap(torch.nn.Linear(8, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        for epoch in range(args.epochs):
            sampler.set_epoch(epoch)
            for x, y in loader:
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
                loss.backward()
                optimizer.step()
            if runtime.is_primary():
                print(f"epoch {epoch + 1}/{args.epochs}: loss {loss.item():.5f}", flush=True)
        print(f"rank {env.rank}/{env.world_size} done", flush=True)
        runtime.barrier()


if __name__ == "__main__":
    main()
