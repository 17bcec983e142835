"""Hugging Face Accelerate, unchanged: `Accelerator()` reads the cluster from the environment itself.

It trains a small model a few steps on the CPU and prints a digest of its final parameters: every rank prints the
same one.
"""

from __future__ import annotations

import hashlib

import torch
from accelerate import Accelerator


def digest(model: torch.nn.Module) -> str:
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return hashlib.sha256(repr(flat.tolist()).encode()).hexdigest()[:16]


def main() -> None:
    accelerator = Accelerator(cpu=True)
    rank = accelerator.process_index
    torch.manual_seed(rank)  # a different start on every rank: DDP broadcasts rank 0's weights
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    data = torch.Generator().manual_seed(100 + rank)
    for _ in range(5):
        features = torch.randn(16, 8, generator=data)
        optimizer.zero_grad()
        accelerator.backward(torch.nn.functional.mse_loss(model(features), features.sum(1, keepdim=True)))
        optimizer.step()
    params = digest(accelerator.unwrap_model(model))
    where = f"{rank}/{accelerator.num_processes} local {accelerator.local_process_index}"
    print(f"rank {where} params {params}", flush=True)
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()
