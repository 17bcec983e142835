"""crosstrain: one job spec, many clouds.

    import crosstrain
    job = crosstrain.load_job("job.yaml")
    request = crosstrain.render(job, "vertex", project="my-proj")   # what submit would send; sends nothing
    handle = crosstrain.submit(job, "vertex", project="my-proj")
    handle.wait()
    handle = crosstrain.send(request)               # a rendered (perhaps edited) request, as it is
    handle = crosstrain.submit_function(train, job, "vertex", args=(0.1,))
    handle.result()                                 # what rank 0's train(0.1) returned

Names are imported on first use, so `import crosstrain` stays cheap and imports no cloud SDK and no torch.
"""

from __future__ import annotations

import importlib

#: True only for type checkers (mypy and ruff read the name as `typing.TYPE_CHECKING`): `typing` is not imported,
#: so that `import crosstrain.runtime` on a training node loads next to nothing.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from crosstrain.api import (
        fallback_run,
        render,
        render_function,
        run,
        send,
        submit,
        submit_function,
        validate,
    )
    from crosstrain.backends.base import Backend
    from crosstrain.errors import (
        CrosstrainError,
        FunctionFailed,
        IdentityConflict,
        JobFailed,
        MissingDependency,
        Problem,
        SpecError,
        SubmitError,
        Unsupported,
    )
    from crosstrain.loader import load_job
    from crosstrain.records import HttpCall, JobHandle, JobState, JobStatus, Request
    from crosstrain.registry import create_backend
    from crosstrain.spec import TrainingJob

_LAZY = {
    "TrainingJob": "crosstrain.spec",
    "load_job": "crosstrain.loader",
    "render": "crosstrain.api",
    "submit": "crosstrain.api",
    "run": "crosstrain.api",
    "send": "crosstrain.api",
    "render_function": "crosstrain.api",
    "submit_function": "crosstrain.api",
    "validate": "crosstrain.api",
    "fallback_run": "crosstrain.api",
    "create_backend": "crosstrain.registry",
    "Backend": "crosstrain.backends.base",
    "HttpCall": "crosstrain.records",
    "Request": "crosstrain.records",
    "JobHandle": "crosstrain.records",
    "JobState": "crosstrain.records",
    "JobStatus": "crosstrain.records",
    "CrosstrainError": "crosstrain.errors",
    "SpecError": "crosstrain.errors",
    "Unsupported": "crosstrain.errors",
    "SubmitError": "crosstrain.errors",
    "IdentityConflict": "crosstrain.errors",
    "JobFailed": "crosstrain.errors",
    "FunctionFailed": "crosstrain.errors",
    "MissingDependency": "crosstrain.errors",
    "Problem": "crosstrain.errors",
}

__all__ = [
    "Backend",
    "CrosstrainError",
    "FunctionFailed",
    "HttpCall",
    "IdentityConflict",
    "JobFailed",
    "JobHandle",
    "JobState",
    "JobStatus",
    "MissingDependency",
    "Problem",
    "Request",
    "SpecError",
    "SubmitError",
    "TrainingJob",
    "Unsupported",
    "create_backend",
    "fallback_run",
    "load_job",
    "render",
    "render_function",
    "run",
    "send",
    "submit",
    "submit_function",
    "validate",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'crosstrain' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names, each once (not the helpers this module imports, nor the submodules loaded so far)."""
    return sorted({*__all__, "__version__"})
