"""What every benchmark here shares: fresh processes, interleaved in one run, compared by their medians.

Interleaving makes machine noise hit every command alike; one warm-up run each writes the bytecode caches, so the
measured runs are cold processes, not a cold disk.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections.abc import Mapping, Sequence


def timed(argv: Sequence[str], env: Mapping[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def medians(
    commands: Mapping[str, Sequence[str]], rounds: int, env: Mapping[str, str] | None = None
) -> dict[str, float]:
    """The median wall time of each named command over `rounds` interleaved runs."""
    for argv in commands.values():
        timed(argv, env)
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, argv in commands.items():
            samples[name].append(timed(argv, env))
    return {name: statistics.median(times) for name, times in samples.items()}


def with_source_path() -> dict[str, str]:
    """This checkout's `src/` first on the path, so the benchmark measures the code beside it."""
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
