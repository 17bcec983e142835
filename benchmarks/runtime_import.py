"""Cold `import crosstrain.runtime` against a bare `import torch`, as fresh processes interleaved in one run.

The runtime is imported by every training process (and the launcher, once per node) before anything else, so it
must cost next to nothing: it loads only its own `__init__.py`, each name on first use. The result is the import's
cost beyond Python's own start-up (goal: at most +25 ms), and its ratio to `import torch`'s. Needs torch
(`pip install 'crosstrain[runtime]'`) for the comparison side.

    python benchmarks/runtime_import.py [--rounds 15] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys

from interleaved import medians_with_cpu, with_source_path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    if importlib.util.find_spec("torch") is None:
        print("torch is not installed: pip install 'crosstrain[runtime]'", file=sys.stderr)
        return 2

    runtime, torch, baseline = "import crosstrain.runtime", "import torch", "pass"
    python = [sys.executable, "-c"]
    both = medians_with_cpu(
        {code: [*python, code] for code in (runtime, torch, baseline)}, args.rounds, env=with_source_path()
    )
    measured = {code: wall for code, (wall, _) in both.items()}
    cpu = {code: used for code, (_, used) in both.items()}
    # Subtract the interpreter's own start-up, which both pay: what is left is what each import costs.
    own = max(measured[runtime] - measured[baseline], 0.0)
    torch_cost = measured[torch] - measured[baseline]
    result = {
        "rounds": args.rounds,
        "python_startup_median_s": round(measured[baseline], 4),
        "runtime_import_median_s": round(own, 4),
        "torch_import_median_s": round(torch_cost, 4),
        "ratio": round(own / torch_cost, 4),
        "runtime_import_cpu_median_s": round(max(cpu[runtime] - cpu[baseline], 0.0), 4),
        "goal_ms": 25,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"python start-up:            median {measured[baseline] * 1000:.0f} ms over {args.rounds} runs")
        print(f"import crosstrain.runtime:  +{own * 1000:.0f} ms (goal <= +{result['goal_ms']} ms)")
        print(f"  in CPU time:              +{result['runtime_import_cpu_median_s'] * 1000:.0f} ms")
        print(f"import torch:               +{torch_cost * 1000:.0f} ms")
        print(f"ratio to torch's {result['ratio']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
