"""The model: one linear layer, wrapped for DDP on the device TorchDistributor gave this rank."""

from __future__ import annotations

import os

import torch
from torch.nn.parallel import DistributedDataParallel


def device() -> torch.device:
    return torch.device(f"cuda:{os.environ['LOCAL_RANK']}") if torch.cuda.is_available() else torch.device("cpu")


def make_model(on: torch.device) -> DistributedDataParallel:
    torch.manual_seed(0)
    return DistributedDataParallel(torch.nn.Linear(1, 1).to(on), device_ids=[on.index] if on.type == "cuda" else None)
