"""Fuzzed job specs through every target: how many are accepted, refused, crashed, or accepted invalid.

Hypothesis draws N specs (tests/fuzzing.py: about half well-formed, every field with realistic values and
catalog machines and GPUs in every pairing; half malformed, a well-formed job with junk values, deleted and
unknown keys). Each goes through every case (a target with valid settings; `local` plain and emulating
vertex, azureml and databricks) the way `crosstrain render` goes: load, render, every output format. Per case it
prints:

* accepted: rendered, and the request passes the platform's own check (tests/backends/validators.py:
  Vertex's `CustomJob` and discovery document, AI Platform's discovery document, Azure ML's `load_job`, the
  Databricks SDK's classes, each with the fields the platform documents as required);
* refused: refused with a `SpecError` whose every problem names a field path and a fix;
* vague: refused with a problem lacking a path or a fix (or giving only the loader's generic pointer);
* crashed: any other exception, or a spec that takes longer than --limit seconds in one case;
* invalid: rendered, and the platform's check finds the request invalid;
* slowest: the longest load + render + format of one spec, in ms (the platform check not counted).

Then one line per distinct crash, invalid or vague reason, with the smallest spec that showed it.
Goal: 0 crashed, 0 invalid, 0 vague.

    python benchmarks/fuzz.py [--specs 10000] [--seed 1] [--case vertex ...] [--limit 10] [--json] [--real]
                              [--save specs.jsonl | --replay specs.jsonl]

`--real` mutates the jobs users wrote (every example and corpus job: whitespace, case, type swaps, extreme
numbers, unicode, patches of any shape) instead of drawing specs from scratch; they count as malformed.

`--save` keeps the drawn specs, so that `--replay` runs the very same specs through another checkout.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]  # this checkout, and the strategies and checks beside its tests

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tests import fuzzing  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--specs", type=int, default=10_000, help="specs to draw; each goes through every case")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--case", action="append", choices=sorted(fuzzing.CASES), help="only these cases")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--save", type=Path, help="write the drawn specs here (JSON lines), to replay them")
    parser.add_argument("--replay", type=Path, help="run the specs of a --save file instead of drawing")
    parser.add_argument(
        "--real",
        action="store_true",
        help="mutate the examples' and corpus' jobs (whitespace, case, types, extremes, unicode, patches) "
        "instead of drawing specs from scratch",
    )
    parser.add_argument(
        "--limit", type=float, default=10.0, help="seconds one spec may take in one case before it counts as crashed"
    )
    args = parser.parse_args()
    args.save, args.replay = (path.resolve() if path else None for path in (args.save, args.replay))
    cases = args.case or list(fuzzing.CASES)
    logging.disable(logging.WARNING)  # azure-ai-ml's "experimental class" notices
    signal.signal(signal.SIGALRM, _too_long)

    counts = {case: collections.Counter[str]() for case in cases}
    slowest = dict.fromkeys(cases, 0.0)
    kinds = collections.Counter[str]()
    reasons: dict[tuple[str, str, str], list[Any]] = {}  # (case, kind, reason) -> [count, smallest spec]
    folder = fuzzing.prepare(Path(tempfile.mkdtemp(prefix="crosstrain-fuzz-")))
    os.chdir(folder)  # a Databricks render uploads the train.py it names from here
    fuzzing.warm_up(folder)
    started = time.perf_counter()

    saved = args.save.open("w") if args.save else None

    drawing = (
        fuzzing.real_mutated(fuzzing.real_jobs()).map(lambda found: ("malformed", found[1], found[0]))
        if args.real
        else st.one_of(
            fuzzing.well_formed().map(lambda spec: ("well-formed", spec)),
            fuzzing.malformed().map(lambda spec: ("malformed", spec)),
        )
    )

    @seed(args.seed)
    @settings(
        max_examples=args.specs,
        phases=[Phase.generate],
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(drawn=drawing)
    def draw(drawn: tuple[Any, ...]) -> None:
        if saved is not None:
            saved.write(json.dumps(drawn) + "\n")
        run(drawn)

    def run(drawn: tuple[Any, ...]) -> None:
        kind, spec, *located = drawn  # a real job comes with its folder
        base = Path(located[0]) if located else None
        kinds[kind] += 1
        for case in cases:
            signal.setitimer(signal.ITIMER_REAL, args.limit)  # a render that runs away counts as a crash
            try:
                result = fuzzing.outcome(case, spec, folder, base)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            slowest[case] = max(slowest[case], result.seconds)
            counts[case][result.kind] += 1
            counts[case][f"{kind}:{result.kind}"] += 1
            if result.kind in ("crashed", "invalid", "vague"):
                lines = [line for line in result.detail.strip().splitlines() if line.strip()]
                key = (case, result.kind, fuzzing.short(lines[-1] if lines else "", 240))
                text = json.dumps(spec, default=repr)
                seen = reasons.setdefault(key, [0, text])
                seen[0] += 1
                if len(text) < len(seen[1]):
                    seen[1] = text

    if args.replay:
        with args.replay.open() as lines:
            for line in lines:
                run(tuple(json.loads(line)))
    else:
        draw()
    if saved is not None:
        saved.close()
    seconds = time.perf_counter() - started
    result = {
        "specs": sum(kinds.values()),
        "well_formed": kinds["well-formed"],
        "malformed": kinds["malformed"],
        "seed": args.seed,
        "seconds": round(seconds, 1),
        "cases": {
            case: {
                **{kind: counts[case][kind] for kind in fuzzing.KINDS},
                "well_formed": {kind: counts[case][f"well-formed:{kind}"] for kind in fuzzing.KINDS},
                "slowest_ms": round(slowest[case] * 1000, 1),
            }
            for case in cases
        },
        "reasons": [
            {"case": case, "kind": kind, "reason": reason, "count": count, "smallest_spec": spec}
            for (case, kind, reason), (count, spec) in sorted(reasons.items())
        ],
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)
    bad = sum(result["cases"][case][kind] for case in cases for kind in ("crashed", "invalid", "vague"))
    return 1 if bad else 0


def _too_long(signum: int, frame: Any) -> None:
    raise TimeoutError("one spec took longer than --limit seconds")


def _print(result: dict[str, Any]) -> None:
    print(
        f"{result['specs']:,} specs ({result['well_formed']:,} well-formed, {result['malformed']:,} malformed), "
        f"seed {result['seed']}, {result['seconds']} s"
    )
    header = f"{'case':<20}{'accepted':>9}{'refused':>9}{'crashed':>9}{'invalid':>9}{'vague':>7}{'slowest ms':>12}"
    print(header)
    for case, row in result["cases"].items():
        print(
            f"{case:<20}{row['accepted']:>9,}{row['refused']:>9,}{row['crashed']:>9,}{row['invalid']:>9,}"
            f"{row['vague']:>7,}{row['slowest_ms']:>12,.1f}"
        )
    print("well-formed specs only:")
    for case, row in result["cases"].items():
        wf = row["well_formed"]
        print(
            f"{case:<20}{wf['accepted']:>9,}{wf['refused']:>9,}{wf['crashed']:>9,}{wf['invalid']:>9,}{wf['vague']:>7,}"
        )
    for item in result["reasons"]:
        print(f"\n{item['case']}: {item['kind']} x{item['count']}: {item['reason']}")
        print(f"  smallest spec: {fuzzing.short(item['smallest_spec'], 600)}")


if __name__ == "__main__":
    sys.exit(main())
