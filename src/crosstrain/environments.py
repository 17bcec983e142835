"""The portable `environment: pytorch[:MAJOR.MINOR]`, resolved to each platform's managed PyTorch runtime.

Each backend owns its table (`Runtimes`, newest first, each entry with its source), and `pick` resolves the
job's request against it: the newest release when no version is asked for, the GPU or CPU flavour by the
job's machines, and a refusal naming what the platform offers when it has no such runtime. A target's own
runtime name (`targets.<target>.environment`) bypasses the table.
"""

from __future__ import annotations

from crosstrain.errors import Problem
from crosstrain.frozen import frozen


@frozen
class Runtime:
    """One managed PyTorch runtime of a platform."""

    torch: str  # MAJOR.MINOR
    gpu: str | None  # the platform's name for its GPU flavour (an image URI, an environment, a runtime version)
    cpu: str | None
    source: str  # where the name and its torch version are documented


@frozen
class Runtimes:
    platform: str
    entries: tuple[Runtime, ...]  # newest first
    setting: str  # the target setting that names a runtime directly, for the fix

    def pick(self, requested: str, gpu: bool, field: str = "environment") -> str | Problem:
        """The runtime for `pytorch` / `pytorch:X.Y`, or the problem that says why there is none."""
        _, _, version = requested.partition(":")
        flavour = "GPU" if gpu else "CPU"
        for runtime in self.entries:
            if version and runtime.torch != version:
                continue
            name = runtime.gpu if gpu else runtime.cpu
            if name:
                return name
        offered = ", ".join(f"pytorch:{r.torch}" for r in self.entries if (r.gpu if gpu else r.cpu)) or "none"
        return Problem(
            field,
            f"{self.platform} has no managed {flavour} runtime for {requested} (it offers: {offered})",
            f"ask for one of those, or name a runtime in {self.setting}, or use your own `image`",
        )
