# Stands for the workload's `command`: per-node setup (pip installs, kernels built from source), then
# `python -m torch.distributed.run --nproc_per_node=8 ... train.py` (the corpus compares requests, not code).
