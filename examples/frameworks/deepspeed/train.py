"""DeepSpeed as its own examples write it: `deepspeed.add_config_arguments` reads `--deepspeed` and
`--deepspeed_config` from the command line, `deepspeed.initialize` builds the engine from that config.

Nothing here knows crosstrain or the platform: the ranks find each other through torch's env:// variables, which
every platform's start (and crosstrain's launcher) gives them. Each rank prints what it was given and a digest of its
final parameters: every rank prints the same one when the engine kept them in step.
"""

from __future__ import annotations

import argparse
import hashlib
import os

import deepspeed
import torch


def digest(model: torch.nn.Module) -> str:
    flat = torch.cat([p.detach().reshape(-1).float() for p in model.parameters()])
    return hashlib.sha256(repr(flat.tolist()).encode()).hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--local_rank", type=int, default=-1)  # DeepSpeed's launcher passes it; torchrun does not
    args = deepspeed.add_config_arguments(parser).parse_args()
    deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo")
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    torch.manual_seed(rank)  # a different start on every rank: the engine broadcasts rank 0's weights
    model = torch.nn.Linear(8, 1)
    engine, _, _, _ = deepspeed.initialize(args=args, model=model, model_parameters=model.parameters())
    data = torch.Generator().manual_seed(100 + rank)  # each rank its own batches
    for _ in range(args.steps):
        features = torch.randn(4, 8, generator=data).to(engine.device)
        loss = torch.nn.functional.mse_loss(engine(features), features.sum(1, keepdim=True))
        engine.backward(loss)
        engine.step()
    given = f"deepspeed={args.deepspeed} config={args.deepspeed_config} zero={engine.zero_optimization_stage()}"
    local = os.environ.get("LOCAL_RANK")
    print(f"rank {rank}/{world} local {local} {given} params {digest(engine.module)}", flush=True)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
