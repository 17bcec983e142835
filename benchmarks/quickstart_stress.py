"""The quickstart, run again and again while other processes keep every core busy: how often does it fail?

A newcomer's first run must not fail at shutdown (a rank that finished its work once died with SIGABRT on a
loaded machine). This runs `crosstrain run examples/ddp-quickstart/job.yaml --local` N times in a row, with one
busy-looping process per core beside it, and reports the failures (goal: 0), what each failure said, and the
spread of wall times.

    python benchmarks/quickstart_stress.py [--runs 50] [--emulate vertex] [--json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from interleaved import with_source_path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "ddp-quickstart" / "job.yaml"


def _spin(stop: multiprocessing.synchronize.Event) -> None:
    while not stop.is_set():
        sum(range(10_000))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--emulate", default="torchrun", help="the local run's emulation (default: torchrun)")
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 2, help="busy processes beside the runs")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    stop = multiprocessing.Event()
    spinners = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(args.busy)]
    for spinner in spinners:
        spinner.start()
    walls: list[float] = []
    failures: list[str] = []
    command = [sys.executable, "-m", "crosstrain.cli", "run", str(EXAMPLE), "--local", "--emulate", args.emulate]
    try:
        for run in range(args.runs):
            started = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, env=with_source_path(), check=False)
            walls.append(time.perf_counter() - started)
            if done.returncode != 0:
                why = [line for line in done.stderr.splitlines() if "FAILED" in line or "terminate" in line]
                failures.append(f"run {run + 1}: exit {done.returncode}: {' | '.join(why[-2:])}")
            print(f"run {run + 1}/{args.runs}: exit {done.returncode} in {walls[-1]:.1f}s", file=sys.stderr)
    finally:
        stop.set()
        for spinner in spinners:
            spinner.join()
    result = {
        "runs": args.runs,
        "emulate": args.emulate,
        "failures": len(failures),
        "wall_median_s": round(statistics.median(walls), 2),
        "wall_min_s": round(min(walls), 2),
        "wall_max_s": round(max(walls), 2),
        "failed": failures,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.runs} runs ({args.emulate}) beside {args.busy} busy processes: {len(failures)} failed")
        print(f"wall: median {result['wall_median_s']}s, min {result['wall_min_s']}s, max {result['wall_max_s']}s")
        for line in failures:
            print(f"  {line}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
