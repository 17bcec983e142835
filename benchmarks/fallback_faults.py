"""Fallback with one live job, under faults: runs of a job with `fallback:` against the fake cloud with capacity.

The fake backend's real client talks to its loopback service (`tests/backends/capacity_cloud.py`), which answers
per GPU kind: refuse the create for quota, create and then fail for capacity before the job runs, hold it queued
until its `scheduling.max_wait` expires (the service fails it), or hold it until cancelled. Each scenario is
`--runs` runs (each its own run id) of one job whose primary asks for H100s, then A100s, then L4s:

* quota-at-create: the H100 create is refused for quota;
* stockout-after-create: H100 and A100 jobs are created and then fail for capacity before they run;
* dws-wait-expired: the H100 job waits for capacity (max_wait) and the service fails it when that expires;
* held-past-max-wait: the service never ends the wait: crosstrain cancels the job and reads it ended; lost answers
  and errors on the cancel (drop, error, refuse, late);
* faults-on-create: quota then stockout, with lost answers, errors, refusals, late creates and cut answers on the
  creates;
* two-submits-at-once: two submits of each run at the same moment (quota, then stockout).

Each run is submitted and followed until an attempt runs. Then, from the cloud's own records (when each job was
created, failed or cancelled), per run: the most jobs live at one moment. A run is lost when a live job of it is
not the one its submits follow; a false failure is a submit or wait that failed (every scenario has an
alternative that runs). Goal: max_live_per_run 1, 0 lost, 0 false failures.

    python benchmarks/fallback_faults.py [--runs 200] [--seed 1] [--json] [SCENARIO...]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]  # this checkout, and the platform fakes beside its tests

from tests.backends.capacity_cloud import CapacityCloud, most_live  # noqa: E402

from crosstrain import fallback  # noqa: E402
from crosstrain.backends.fake import FakeBackend  # noqa: E402
from crosstrain.errors import CrosstrainError  # noqa: E402
from crosstrain.loader import job_from_dict  # noqa: E402
from crosstrain.retry import RetryPolicy  # noqa: E402

CREATE_FAULTS = ("refuse", "rate-limit", "error", "drop", "late", "empty", "garbled")
CANCEL_FAULTS = ("drop", "error", "refuse", "late")


@dataclass(frozen=True)
class Scenario:
    name: str
    plans: dict[str, str]
    create_faults: tuple[str, ...] = ()
    cancel_faults: tuple[str, ...] = ()
    max_wait: int | None = None
    submits: int = 1


SCENARIOS = {
    s.name: s
    for s in (
        Scenario("quota-at-create", {"H100": "quota"}),
        Scenario("stockout-after-create", {"H100": "stockout", "A100": "stockout"}),
        Scenario("dws-wait-expired", {"H100": "dws"}, max_wait=1),
        Scenario("held-past-max-wait", {"H100": "held"}, cancel_faults=CANCEL_FAULTS, max_wait=1),
        Scenario("faults-on-create", {"H100": "quota", "A100": "stockout"}, create_faults=CREATE_FAULTS),
        Scenario("two-submits-at-once", {"H100": "quota", "A100": "stockout"}, submits=2),
    )
}


@dataclass
class Row:
    name: str
    runs: int
    max_live_per_run: int
    lost: int
    false_failures: int
    attempts_created: int
    faults_played: int
    seconds: float


def policy() -> RetryPolicy:
    """Real sleeps, short: a 429's Retry-After waits at most 10 x `maximum`."""
    return RetryPolicy(initial=0.01, maximum=0.02, jitter=0.01, settle=0.0, look_interval=0.01, call_timeout=5.0)


def run_scenario(scenario: Scenario, runs: int, seed: int, workers: int) -> Row:
    rng = random.Random(seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fallback-faults-") as tmp:
        root = Path(tmp) / "cloud"
        cloud = CapacityCloud(scenario.plans, fail_after=0.02, dws_scale=0.05)
        backend = FakeBackend(cloud=cloud, retry=policy())
        environ = {"CROSSTRAIN_STATE_DIR": str(Path(tmp) / "state")}

        def spec(index: int) -> Any:
            return job_from_dict(
                {
                    "name": "bench",
                    "run_id": f"run-{index}",
                    "image": "img",
                    "command": "python train.py",
                    "primary": {"machine": "H100:8"},
                    "fallback": [{"machine": "A100:8"}, {"machine": "L4:1"}],
                    "targets": {"fake": {"root": str(root)}},
                    **({"scheduling": {"max_wait": scenario.max_wait}} if scenario.max_wait else {}),
                }
            )

        def one_submit(index: int) -> str | None:
            run = fallback.Run(spec(index), "fake", backend=lambda _: backend, environ=environ, watch=0.0)
            try:
                run.submit()
                run.wait(timeout=60, poll_interval=0.02, max_interval=0.2, until_running=True)
            except CrosstrainError as error:
                print(f"{scenario.name} run-{index}: {str(error)[:300]}", file=sys.stderr)
                return None
            return run.identity

        def one_run(index: int) -> list[str | None]:
            for operation, faults in (("create", scenario.create_faults), ("cancel", scenario.cancel_faults)):
                for _ in range(2):  # up to two faults per run, landing on whichever calls come next
                    if faults and rng.random() < 0.6:
                        cloud.inject(operation, rng.choice(faults))
            if scenario.submits == 1:
                return [one_submit(index)]
            with ThreadPoolExecutor(scenario.submits) as both:
                return list(both.map(one_submit, [index] * scenario.submits))

        with ThreadPoolExecutor(workers) as pool:
            followed = list(pool.map(one_run, range(runs)))
        cloud.faults.clear()
        cloud.settle()  # late creates land before the count
        time.sleep(0.1)
        intervals = cloud.live_intervals(root)
        by_run = {f"run-{i}": followed[i] for i in range(runs)}
        max_live = lost = false_failures = 0
        for name, seen in by_run.items():
            jobs = intervals.get(name, [])
            max_live = max(max_live, most_live(jobs))
            live = {identity for _, end, identity in jobs if end == float("inf")}
            if any(identity is None for identity in seen) or not live:
                false_failures += 1
            if live - {identity for identity in seen if identity is not None}:
                lost += 1
        return Row(
            scenario.name,
            runs,
            max_live,
            lost,
            false_failures,
            sum(len(jobs) for jobs in intervals.values()),
            sum(cloud.played.values()),
            round(time.monotonic() - started, 1),
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("scenarios", nargs="*", help=f"default: every one of {', '.join(SCENARIOS)}")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=32, help="runs at a time")
    parser.add_argument("--json", action="store_true", help="a list of rows")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.scenarios) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenarios {unknown}; known: {', '.join(SCENARIOS)}")
    args.scenarios = args.scenarios or list(SCENARIOS)
    rows = [run_scenario(SCENARIOS[name], args.runs, args.seed, args.workers) for name in args.scenarios]
    if args.json:
        print(json.dumps([asdict(row) for row in rows], indent=2))
    else:
        head = ("scenario", "runs", "max live/run", "lost", "false failures", "jobs created", "faults", "s")
        table = [head, *((r.name, *map(str, list(asdict(r).values())[1:])) for r in rows)]
        widths = [max(len(str(line[i])) for line in table) for i in range(len(head))]
        for line in table:
            print("  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)))
    ok = all(r.max_live_per_run <= 1 and r.lost == 0 and r.false_failures == 0 for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
