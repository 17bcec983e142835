"""The quickstart's training script, swept: each trial trains with its learning rate and reports its final loss.

`crosstrain.runtime` finds where this process stands in the job (torchrun, Vertex AI, AI Platform, Azure ML,
MPI, Databricks) and starts the process group: nccl on GPUs, gloo on CPUs. Nothing is downloaded: the data is
drawn from a fixed "teacher" network, so the loss can fall close to zero.

The trial's learning rate arrives as `--lr` (the job's args say `--lr ${sweep.lr}`); `runtime.report` tells the
platform's tuning service the loss after each epoch (Vertex AI and AI Platform read the hypertune file, Azure ML
MLflow, the local target and Databricks crosstrain's results file).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

from crosstrain import runtime


def synthetic_data(samples: int) -> TensorDataset:
    """The same data on every rank (fixed seed); the sampler gives each rank its own share."""
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(samples, 16, generator=generator)
    teacher = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    for parameter in teacher.parameters():
        parameter.data = torch.randn(parameter.shape, generator=generator) / 4
    with torch.no_grad():
        return TensorDataset(features, teacher(features))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--samples", type=int, default=4096)
    args = parser.parse_args()

    started = time.monotonic()
    with runtime.init() as env:
        device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
        data = synthetic_data(args.samples)
        sampler = runtime.sampler(data)
        loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)

        torch.manual_seed(env.rank)  # a different start on every rank: DDP broadcasts rank 0's weights
        model = runtime.wrap(torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
        if runtime.is_primary():
            print(f"{env.describe()}; {len(data)} samples, {args.epochs} epochs", flush=True)
        for epoch in range(args.epochs):
            sampler.set_epoch(epoch)
            total = torch.zeros(2, device=device)
            for features, target in loader:
                features, target = features.to(device), target.to(device)
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(model(features), target)
                loss.backward()
                optimizer.step()
                total += torch.stack([loss.detach() * len(features), torch.tensor(len(features), device=device)])
            dist.all_reduce(total)  # the mean loss over every rank's share
            loss_value = (total[0] / total[1]).item()
            if runtime.is_primary():
                print(f"epoch {epoch + 1}/{args.epochs}: loss {loss_value:.5f}", flush=True)
                runtime.report({"loss": loss_value if loss_value == loss_value else 1e30}, step=epoch + 1)

        print(
            f"rank {env.rank}/{env.world_size}, trial {runtime.trial_id()} {runtime.params()}: done in "
            f"{time.monotonic() - started:.1f}s",
            flush=True,
        )
        runtime.barrier()


if __name__ == "__main__":
    main()
