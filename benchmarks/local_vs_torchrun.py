"""`crosstrain run --local` of the quickstart against the same script under plain `torchrun`, in one run.

Both start the same number of training processes (2 nodes x 2 by default: 4), interleaved, as fresh processes;
the result is the ratio of median wall times (goal: at most 1.08). crosstrain's side pays for its CLI, one
torchrun agent per emulated node instead of one, and the supervisor; the training itself is the same.

    python benchmarks/local_vs_torchrun.py [--rounds 5] [--emulate torchrun] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

from interleaved import medians_with_cpu, with_source_path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "ddp-quickstart"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--emulate", default="torchrun", help="the local run's emulation (default: torchrun)")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--nproc-per-node", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    if importlib.util.find_spec("torch") is None:
        print("torch is not installed: pip install 'crosstrain[runtime]'", file=sys.stderr)
        return 2

    processes = args.nodes * args.nproc_per_node
    script_args = ["--epochs", "5", "--batch-size", "64"]  # as in job.yaml
    local = [sys.executable, "-m", "crosstrain.cli", "run", str(EXAMPLE / "job.yaml"), "--local"]
    local += ["--emulate", args.emulate, "--nodes", str(args.nodes), "--nproc-per-node", str(args.nproc_per_node)]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
    torchrun += [str(EXAMPLE / "train.py"), *script_args]
    both = medians_with_cpu({"local": local, "torchrun": torchrun}, args.rounds, env=with_source_path())
    measured = {name: wall for name, (wall, _) in both.items()}
    result = {
        "rounds": args.rounds,
        "processes": processes,
        "emulate": args.emulate,
        "crosstrain_run_local_median_s": round(measured["local"], 3),
        "torchrun_median_s": round(measured["torchrun"], 3),
        "ratio": round(measured["local"] / measured["torchrun"], 3),
        "cpu_ratio": round(both["local"][1] / both["torchrun"][1], 3),
        "goal": 1.08,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"crosstrain run --local ({args.nodes} x {args.nproc_per_node}, {args.emulate}): "
            f"{result['crosstrain_run_local_median_s']} s; torchrun --nproc_per_node={processes}: "
            f"{result['torchrun_median_s']} s; ratio {result['ratio']} (goal <= {result['goal']}); "
            f"CPU time ratio {result['cpu_ratio']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
