"""In-process renders per second of an example, for each cloud target it names: the slowest is the result.

The job is loaded once and each target's backend made once, as a program that renders many jobs would; each
render is the whole of `backend.render(job)`: settings, checks, plan, the probe and the real render, the
fingerprint (the code folder's listing checked, and the folder listed and digested again where it changed).
Goal: the slowest cloud target renders at least 5,000 times a second. Each rate is given per second of wall time
and per second of this process's CPU time (on a machine other work shares, the wall rate counts theirs too).

    python benchmarks/render_throughput.py [--seconds 2] [--example examples/ddp-quickstart/job.yaml] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src")]  # this checkout

from crosstrain.loader import load_job  # noqa: E402
from crosstrain.registry import create_backend  # noqa: E402

LOCAL_TARGETS = {"local", "fake"}  # not clouds: the fake is a test double, local runs here


def renders_per_second(backend: object, job: object, seconds: float) -> tuple[float, float]:
    """Renders per second of wall time, and per second of this process's CPU time: on a machine that other
    work shares, the second is what the render costs, the first also what the others took."""
    render = backend.render  # type: ignore[attr-defined]
    render(job)  # warm: the backend's own first-use work is not what a steady stream of renders pays
    count, started, cpu = 0, time.perf_counter(), time.process_time()
    deadline = started + seconds
    while True:
        for _ in range(20):
            render(job)
        count += 20
        now = time.perf_counter()
        if now >= deadline:
            return count / (now - started), count / max(time.process_time() - cpu, 1e-9)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0, help="how long each target renders")
    parser.add_argument("--example", default=str(ROOT / "examples" / "ddp-quickstart" / "job.yaml"))
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    job = load_job(args.example)
    targets = sorted(name for name in job.targets if name not in LOCAL_TARGETS)
    measured = {name: renders_per_second(create_backend(name), job, args.seconds) for name in targets}
    rates = {name: wall for name, (wall, _) in measured.items()}
    per_cpu = {name: cpu for name, (_, cpu) in measured.items()}
    slowest = min(rates, key=rates.__getitem__)
    slowest_cpu = min(per_cpu, key=per_cpu.__getitem__)
    result = {
        "renders_per_second": {name: round(rate) for name, rate in rates.items()},
        "renders_per_cpu_second": {name: round(rate) for name, rate in per_cpu.items()},
        "slowest": slowest,
        "slowest_renders_per_second": round(rates[slowest]),
        "slowest_renders_per_cpu_second": round(per_cpu[slowest_cpu]),
        "goal": 5000,
    }
    if args.json:
        print(json.dumps(result))
    else:
        for name in targets:
            print(f"{name:12} {rates[name]:8,.0f} renders/s  {per_cpu[name]:8,.0f} per CPU second")
        print(
            f"slowest: {slowest}, {rates[slowest]:,.0f} renders/s; per CPU second {slowest_cpu}, "
            f"{per_cpu[slowest_cpu]:,.0f} (goal >= {result['goal']:,})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
