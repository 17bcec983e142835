"""Cold `crosstrain render` of an example (a whole process) against a bare `import google.cloud.aiplatform`.

Both run as fresh processes, interleaved in one run so that machine noise hits both alike; the result is the
ratio of medians. Goal: at most 0.08, i.e. rendering a whole job in a twelfth of the time it takes just to
import the Vertex SDK. Needs `pip install 'crosstrain[vertex]'` for the SDK side.

    python benchmarks/render_vs_sdk_import.py [--rounds 15] [--example examples/ddp-quickstart/job.yaml]
        [--target vertex]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
from pathlib import Path

from interleaved import medians_with_cpu

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--example", default=str(ROOT / "examples" / "ddp-quickstart" / "job.yaml"))
    parser.add_argument(
        "--target", default="vertex", help="target to render (default: vertex, whose SDK is the yardstick)"
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()

    if importlib.util.find_spec("google.cloud.aiplatform") is None:
        print("google-cloud-aiplatform is not installed: pip install 'crosstrain[vertex]'", file=sys.stderr)
        return 2
    cli = shutil.which("crosstrain", path=str(Path(sys.executable).parent)) or shutil.which("crosstrain")
    render = [cli] if cli else [sys.executable, "-m", "crosstrain.cli"]
    render += ["render", args.example] + (["--target", args.target] if args.target else [])
    sdk = [sys.executable, "-c", "import google.cloud.aiplatform"]

    measured = medians_with_cpu({"render": render, "sdk": sdk}, args.rounds)
    (render_median, render_cpu), (import_median, import_cpu) = measured["render"], measured["sdk"]
    result = {
        "rounds": args.rounds,
        "render_median_s": round(render_median, 4),
        "sdk_import_median_s": round(import_median, 4),
        "ratio": round(render_median / import_median, 4),
        "render_cpu_median_s": round(render_cpu, 4),
        "sdk_import_cpu_median_s": round(import_cpu, 4),
        "cpu_ratio": round(render_cpu / import_cpu, 4),
        "goal": 0.08,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"crosstrain render (whole process): median {render_median * 1000:.0f} ms over {args.rounds} runs")
        print(f"import google.cloud.aiplatform:    median {import_median * 1000:.0f} ms")
        print(f"ratio {result['ratio']:.3f} (goal <= {result['goal']})")
        print(f"CPU time: {render_cpu * 1000:.0f} ms against {import_cpu * 1000:.0f} ms: {result['cpu_ratio']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
