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

#: True only for type checkers (mypy and ruff read the name as `typing.TYPE_CHECKING`): importing `typing` would
#: cost a process more than the rest of this package.
TYPE_CHECKING = False
if TYPE_CHECKING:
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

_FROM_ENV = ("PLATFORMS", "ClusterEnv", "ClusterEnvError", "Platform", "detect")
_FROM_SWEEP = ("params", "report", "trial_id")


def __getattr__(name: str) -> object:
    """Each public name, imported on first use: `import crosstrain.runtime` loads nothing but this file, and a
    training script pays for the rest (the platforms, torch's wrappers) when it first calls them."""
    if name == "JoinTimeout":
        from crosstrain.runtime import join

        value: object = join.JoinTimeout
    elif name in _FROM_ENV:
        from crosstrain.runtime import env

        value = getattr(env, name)
    elif name in _FROM_SWEEP:
        from crosstrain.runtime import sweep

        value = getattr(sweep, name)
    elif name in __all__:
        from crosstrain.runtime import dist

        value = getattr(dist, name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*__all__, *globals()})
