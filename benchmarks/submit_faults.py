"""Exactly-once under faults: every cloud backend, through its real SDK client, against its loopback platform.

Per backend: 200 submits (each its own identity) with randomly scheduled faults on the create and on the read
inside submit; 20 rounds of two concurrent submits of one spec; 20 late creates (the service answers 504 and
creates the job 1-10 s later). Then, per identity, the jobs the platform holds. It prints, per backend:
submits, the most jobs alive for one identity, duplicates cancelled, false failures (submit failed although a
job exists), lost jobs (a job exists that submit neither returned nor said may exist), true failures (submit
failed and no job exists: every attempt was refused), and the faults the platform played.
Goal: at most one live job per identity, 0 false failures, 0 lost.

    python benchmarks/submit_faults.py [--submits 200] [--rounds 20] [--late 20] [--seed 1] [--json] [BACKEND...]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import random
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]  # this checkout, and the platform fakes beside its tests

from crosstrain.backends.loopback import LoopbackPlatform, LoopbackService  # noqa: E402
from crosstrain.errors import CrosstrainError, SubmitError  # noqa: E402
from crosstrain.loader import job_from_dict  # noqa: E402
from crosstrain.records import JobHandle  # noqa: E402
from crosstrain.retry import RetryPolicy  # noqa: E402
from crosstrain.testing.conformance import BASE_JOB, merge  # noqa: E402

#: backend -> (the module:class of its loopback platform, the job changes it needs, the faults its create plays)
PLATFORMS: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {
    "vertex": ("tests.backends.vertex_server:VertexPlatform", {}, ("refuse", "rate-limit", "error", "drop", "slow")),
    "aiplatform": (
        "tests.backends.aiplatform_server:AIPlatformPlatform",
        {},
        ("refuse", "rate-limit", "error", "drop", "slow"),
    ),
    "azureml": ("tests.backends.azureml_cloud:AzureMLPlatform", {}, ("refuse", "rate-limit", "error", "drop")),
    "databricks": (
        "tests.backends.databricks_workspace:DatabricksPlatform",
        {},
        ("refuse", "rate-limit", "error", "drop", "slow"),
    ),
}
READ_FAULTS = ("refuse", "rate-limit", "error")


@dataclasses.dataclass
class Outcome:
    identity: str
    handle: JobHandle | None = None
    error: CrosstrainError | None = None


@dataclasses.dataclass
class Tally:
    submits: int = 0
    max_live_per_identity: int = 0
    duplicates_cancelled: int = 0
    false_failures: int = 0
    lost: int = 0
    failures: int = 0
    faults_played: int = 0
    seconds: float = 0.0

    def count(self, platform: LoopbackPlatform, outcomes: list[Outcome]) -> None:
        for identity in {o.identity for o in outcomes}:
            live = platform.live_jobs(identity)
            self.max_live_per_identity = max(self.max_live_per_identity, len(live))
            self.duplicates_cancelled += len(platform.all_jobs(identity)) - len(live)
        for outcome in outcomes:
            self.submits += 1
            live = platform.live_jobs(outcome.identity)
            if outcome.handle is not None:
                self.lost += outcome.handle.job_id not in live
            elif live:
                self.false_failures += 1
                self.lost += not getattr(outcome.error, "job_may_exist", False)
            else:
                self.failures += 1


def policy(settle: float) -> RetryPolicy:
    """Real sleeps, short backoff: a late create must really be waited for."""
    return RetryPolicy(attempts=6, initial=0.05, maximum=0.5, jitter=0.05, call_timeout=1.0, settle=settle)


def submit(platform: LoopbackPlatform, job: dict[str, Any], settle: float) -> Outcome:
    backend = platform.backend()
    backend.retry = policy(settle)
    request = backend.render(job_from_dict(job), dict(platform.settings))
    try:
        return Outcome(request.identity, handle=backend.send(request))
    except SubmitError as error:
        return Outcome(request.identity, error=error)


def service_of(platform: LoopbackPlatform) -> LoopbackService:
    service = getattr(platform, "service", None)
    assert isinstance(service, LoopbackService), f"{type(platform).__name__} has no `service`"
    return service


def run_backend(name: str, args: argparse.Namespace) -> Tally:
    target, changes, create_faults = PLATFORMS[name]
    module, _, attr = target.partition(":")
    factory: Callable[[], contextlib.AbstractContextManager[LoopbackPlatform]] = getattr(
        importlib.import_module(module), attr
    )
    rng = random.Random(f"{args.seed}:{name}")
    job = merge(BASE_JOB, changes)
    tally = Tally()
    started = time.monotonic()
    with factory() as platform:
        service = service_of(platform)
        service.slow_seconds = 2.0  # above the client's timeout: the client gives up and resends

        # 1. Faulted submits, a few at a time; faults are drawn per submit and land on whichever calls come next.
        def faulted(index: int) -> Outcome:
            if rng.random() < args.fault_rate:
                platform.inject("create", rng.choice(create_faults))
            if rng.random() < args.fault_rate / 2:
                platform.inject("create", rng.choice(create_faults))
            if rng.random() < args.fault_rate:
                platform.inject("submit-read", rng.choice(READ_FAULTS))
            return submit(platform, merge(job, {"run_id": f"faulted-{index}"}), settle=2.0)

        with ThreadPoolExecutor(4) as pool:
            outcomes = list(pool.map(faulted, range(args.submits)))

        service.faults.clear()  # faults that no call met are not carried into the next part

        # 2. Two concurrent submits of one spec, round after round.
        for round_ in range(args.rounds):
            spec = merge(job, {"run_id": f"pair-{round_}"})
            with ThreadPoolExecutor(2) as pool:
                outcomes += list(pool.map(lambda same: submit(platform, same, settle=2.0), [spec, spec]))

        # 3. Late creates: 504 now, the job 1-10 s later; all at once, each its own identity.
        service.faults.clear()
        service.late_seconds = lambda: rng.uniform(1.0, 10.0)
        for _ in range(args.late):
            platform.inject("create", "late")
        with ThreadPoolExecutor(args.late or 1) as pool:
            late = [merge(job, {"run_id": f"late-{i}"}) for i in range(args.late)]
            outcomes += list(pool.map(lambda spec: submit(platform, spec, settle=12.0), late))
        platform.settle()
        tally.count(platform, outcomes)
        tally.faults_played = sum(service.played.values())
    tally.seconds = round(time.monotonic() - started, 1)
    return tally


@contextlib.contextmanager
def quiet_sdk_logs() -> Iterator[None]:
    import logging

    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(previous)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("backends", nargs="*", default=list(PLATFORMS), help="default: every cloud backend")
    parser.add_argument("--submits", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--late", type=int, default=20)
    parser.add_argument("--fault-rate", type=float, default=0.4, help="chance of each kind of fault per submit")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="one JSON object per backend")
    args = parser.parse_args()
    results: dict[str, Tally] = {}
    with quiet_sdk_logs():
        for name in args.backends:
            results[name] = run_backend(name, args)
            if not args.json:
                print(f"{name}: done in {results[name].seconds}s", file=sys.stderr)
    if args.json:
        for name, tally in results.items():
            print(json.dumps({"backend": name, **dataclasses.asdict(tally)}))
    else:
        keys = [f.name for f in dataclasses.fields(Tally)]
        print(" | ".join(["backend", *keys]))
        print(" | ".join(["---"] * (len(keys) + 1)))
        for name, tally in results.items():
            print(" | ".join([name, *(str(getattr(tally, key)) for key in keys)]))
    ok = all(t.max_live_per_identity <= 1 and not t.false_failures and not t.lost for t in results.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
