"""In-process renders per second of an example, for each cloud target it names: the slowest is the result.

The job is loaded once and each target's backend made once, as a program that renders many jobs would; each
render is the whole of `backend.render(job)`: settings, checks, plan, the probe and the real render, the
fingerprint (the code folder listed and digested as on every render). Goal: the slowest cloud target renders at
least 5,000 times a second.

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


def renders_per_second(backend: object, job: object, seconds: float) -> float:
    render = backend.render  # type: ignore[attr-defined]
    render(job)  # warm: the backend's own first-use work is not what a steady stream of renders pays
    count, started = 0, time.perf_counter()
    deadline = started + seconds
    while True:
        for _ in range(20):
            render(job)
        count += 20
        now = time.perf_counter()
        if now >= deadline:
            return count / (now - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0, help="how long each target renders")
    parser.add_argument("--example", default=str(ROOT / "examples" / "ddp-quickstart" / "job.yaml"))
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    job = load_job(args.example)
    targets = sorted(name for name in job.targets if name not in LOCAL_TARGETS)
    rates = {name: renders_per_second(create_backend(name), job, args.seconds) for name in targets}
    slowest = min(rates, key=rates.__getitem__)
    result = {
        "renders_per_second": {name: round(rate) for name, rate in rates.items()},
        "slowest": slowest,
        "slowest_renders_per_second": round(rates[slowest]),
        "goal": 5000,
    }
    if args.json:
        print(json.dumps(result))
    else:
        for name, rate in rates.items():
            print(f"{name:12} {rate:8,.0f} renders/s")
        print(f"slowest: {slowest}, {rates[slowest]:,.0f} renders/s (goal >= {result['goal']:,})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
