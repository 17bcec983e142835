"""One adaptor per platform SDK, as SkyPilot's `sky/adaptors/`: each owns the SDK's lazy import, the install
hint, and the mapping of the SDK's exceptions and HTTP statuses to crosstrain's three kinds of failure:

* refused, retry: `TransientError(accepted=False)`: the call cannot have taken effect;
* outcome unknown, look first: `TransientError(accepted=None)`: it may have taken effect;
* final: `SubmitError`.

`crosstrain.retry.RetryPolicy` acts on those three and nothing else. Nothing here imports an SDK at import time.
"""

from __future__ import annotations

import importlib
from typing import Any

from crosstrain.errors import MissingDependency


def require(module: str, extra: str) -> Any:
    """Import an optional SDK inside a submit path, or say which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependency(f"{module} is not installed: pip install 'crosstrain[{extra}]'") from exc
