"""A notebook's training function, shipped to every rank of a Databricks AI Runtime run with crosstrain.

`crosstrain.run(train, "job.yaml")` runs it here as two local nodes with AI Runtime's node environment
(`NUM_NODES`, `NODE_RANK`, `MASTER_ADDR`, ...) and returns rank 0's result;
`crosstrain.submit_function(train, "job.yaml", "databricks-air")` ships the same function to a workspace, where
rank 0 writes its result under the job's output_dir, a Unity Catalog volume (`handle.result()` reads it back).
"""

from __future__ import annotations

from pathlib import Path

import crosstrain

JOB = Path(__file__).with_name("job.yaml")


def train(steps: int) -> dict[str, float]:
    import torch
    import torch.distributed as dist

    from crosstrain import runtime

    env = runtime.init()
    model = runtime.wrap(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(env.rank or 0)
    for _ in range(steps):
        features = torch.randn(32, 4, generator=generator)
        loss = ((model(features) - features.sum(dim=1, keepdim=True)) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    total = torch.tensor([loss.item()])
    dist.all_reduce(total)
    return {"mean_loss": total.item() / (env.world_size or 1), "world_size": float(env.world_size or 1)}


if __name__ == "__main__":
    print(crosstrain.run(train, JOB, args=(20,)))
