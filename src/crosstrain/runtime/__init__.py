"""In-container runtime: find out where this process stands in a distributed job, on any platform.

    from crosstrain import runtime

    with runtime.init() as env:            # detect the platform, init_process_group (nccl or gloo), bind the GPU
        model = runtime.wrap(model)        # DDP with the right device ids
        loader = DataLoader(data, sampler=runtime.sampler(data))
        ...
        if runtime.is_primary():
            save(model)
                                           # the process group is destroyed on the way out, on error too

In a sweep's trial, `runtime.params()` are the trial's values, `runtime.trial_id()` its id, and
`runtime.report({"val_loss": loss}, step=epoch)` tells the platform's tuning service how it went.

`runtime.detect()` only reads the environment. Where the platform starts one process per node (Vertex AI,
AI Platform Training), run the command under `python -m crosstrain.launch -- CMD ...`. Importing this package
loads only the standard library; torch loads when `init()` and friends are called.
"""

from __future__ import annotations

from crosstrain.runtime.dist import DEFAULT_TIMEOUT, barrier, current, init, is_primary, sampler, shutdown, wrap
from crosstrain.runtime.env import PLATFORMS, ClusterEnv, ClusterEnvError, Platform, detect
from crosstrain.runtime.join import JoinTimeout
from crosstrain.runtime.sweep import params, report, trial_id

__all__ = [
    "DEFAULT_TIMEOUT",
    "PLATFORMS",
    "ClusterEnv",
    "ClusterEnvError",
    "JoinTimeout",
    "Platform",
    "barrier",
    "current",
    "detect",
    "init",
    "is_primary",
    "params",
    "report",
    "sampler",
    "shutdown",
    "trial_id",
    "wrap",
]
