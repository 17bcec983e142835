"""A tiny DDP training program for the runtime's multi-process tests (run as a script, not collected).

Writes `<RESULT_DIR>/pid-<pid>` as soon as it starts (so a test can check that no process outlives the job) and
`<RESULT_DIR>/rank-<rank>.json` at the end: what `init()` saw, the all_reduce sum of the ranks, and whether DDP
kept the parameters identical across ranks. `CRASH_RANK=r` makes rank r exit 3 after the first step.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from pathlib import Path

RESULTS = Path(os.environ["RESULT_DIR"])
(RESULTS / f"pid-{os.getpid()}").touch()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from crosstrain import runtime  # noqa: E402

STEPS = 3


def main() -> int:
    torch.set_num_threads(1)
    with runtime.init(timeout=timedelta(seconds=float(os.environ.get("INIT_TIMEOUT", "120")))) as env:
        assert env.rank is not None
        assert env.world_size is not None
        total = torch.tensor([float(env.rank)])
        dist.all_reduce(total)

        torch.manual_seed(1000 + env.rank)  # different initial weights per rank: DDP must broadcast rank 0's
        model = runtime.wrap(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)))
        start = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1))  # differs per rank too
        loader = torch.utils.data.DataLoader(data, batch_size=8, sampler=runtime.sampler(data))
        for step, (x, y) in zip(range(STEPS), loader, strict=False):
            optimizer.zero_grad()
            torch.autograd.backward(torch.nn.functional.mse_loss(model(x), y))
            optimizer.step()
            if step == 0 and os.environ.get("CRASH_RANK") == str(env.rank):
                print(f"rank {env.rank}: crashing on purpose", file=sys.stderr, flush=True)
                os._exit(3)
            if os.environ.get("CRASH_RANK"):
                for _ in range(200):  # keep talking, so the survivors notice the crashed rank
                    dist.all_reduce(torch.zeros(1))
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        gathered = [torch.empty_like(flat) for _ in range(env.world_size)]
        dist.all_gather(gathered, flat)
        runtime.barrier()
        result = {
            "platform": env.platform,
            "rank": env.rank,
            "world_size": env.world_size,
            "local_rank": env.local_rank,
            "node_rank": env.node_rank,
            "nnodes": env.nnodes,
            "sum": total.item(),
            "params_identical": all(torch.equal(g, gathered[0]) for g in gathered),
            "params_changed": not torch.equal(start, flat),
            "primary": runtime.is_primary(),
        }
        (RESULTS / f"rank-{env.rank}.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
