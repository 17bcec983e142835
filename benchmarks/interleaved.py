"""What every benchmark here shares: fresh processes, interleaved in one run, compared by their medians.

Interleaving makes machine noise hit every command alike; one warm-up run each writes the bytecode caches, so the
measured runs are cold processes, not a cold disk. Each run's CPU time (user + system, its children's included) is
kept beside its wall time: on a machine other work shares, the wall time counts waiting for the CPU too.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import time
from collections.abc import Mapping, Sequence


def timed(argv: Sequence[str], env: Mapping[str, str] | None = None) -> float:
    return measured(argv, env)[0]


def measured(argv: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[float, float]:
    """The wall time and the CPU time (user + system, with its children's) of one run of `argv`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def medians(
    commands: Mapping[str, Sequence[str]], rounds: int, env: Mapping[str, str] | None = None
) -> dict[str, float]:
    """The median wall time of each named command over `rounds` interleaved runs."""
    return {name: wall for name, (wall, _) in medians_with_cpu(commands, rounds, env).items()}


def medians_with_cpu(
    commands: Mapping[str, Sequence[str]], rounds: int, env: Mapping[str, str] | None = None
) -> dict[str, tuple[float, float]]:
    """The median wall time and median CPU time of each named command over `rounds` interleaved runs."""
    for argv in commands.values():
        timed(argv, env)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, argv in commands.items():
            samples[name].append(measured(argv, env))
    return {
        name: (statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs))
        for name, runs in samples.items()
    }


def with_source_path() -> dict[str, str]:
    """This checkout's `src/` first on the path, so the benchmark measures the code beside it."""
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
