"""All-reduce bus bandwidth through `crosstrain.runtime` against raw `torch.distributed`, same sizes, one run.

torchrun starts `--nproc` ranks on this machine (gloo on CPUs; nccl where CUDA is); each rank alternates, round
after round, between a process group made by `torch.distributed.init_process_group("env://")` and one made by
`crosstrain.runtime.init()`, and times `all_reduce` of float32 tensors of each size. Bus bandwidth is
`bytes * 2 (n - 1) / n / seconds` (the NCCL tests' definition). It prints, per size, both bandwidths (median
over rounds) and their ratio (goal: at least 0.98: the runtime adds nothing to the collective itself).

    python benchmarks/allreduce.py [--nproc 2] [--rounds 5] [--sizes 4K,256K,4M,64M] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse_size(text: str) -> int:
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    text = text.strip().upper()
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def bench(sizes: list[int], iterations: int, device: str) -> dict[int, float]:
    """Seconds per all_reduce of each size (best of a few warm-up-then-timed loops)."""
    import torch
    import torch.distributed as dist

    out = {}
    for size in sizes:
        tensor = torch.ones(size // 4, dtype=torch.float32, device=device)
        for _ in range(2):
            dist.all_reduce(tensor)
        if device != "cpu":
            torch.cuda.synchronize()
        dist.barrier()
        count = max(5, iterations * 4 * 1024 * 1024 // max(size, 64 * 1024))  # more of the small ones
        started = time.perf_counter()
        for _ in range(count):
            dist.all_reduce(tensor)
        if device != "cpu":
            torch.cuda.synchronize()
        out[size] = (time.perf_counter() - started) / count
    return out


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    sys.path.insert(0, str(ROOT / "src"))
    from crosstrain import runtime

    sizes = [parse_size(s) for s in args.sizes.split(",")]
    device = f"cuda:{os.environ['LOCAL_RANK']}" if torch.cuda.is_available() else "cpu"
    if args.worker == "raw":
        if device != "cpu":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device != "cpu" else "gloo", init_method="env://")
    else:
        runtime.init()
    result = bench(sizes, args.iterations, device)
    if int(os.environ["RANK"]) == 0:
        Path(args.out).write_text(json.dumps({"device": device, "seconds": {str(k): v for k, v in result.items()}}))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=20, help="all-reduces of 4 MiB; more of smaller ones")
    parser.add_argument("--sizes", default="4K,256K,4M,64M")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", choices=("raw", "runtime"), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    data: dict[str, list[dict[str, float]]] = {"raw": [], "runtime": []}
    device = "cpu"
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "results.json"
        for round_ in range(args.rounds):  # alternating, so drift in the machine's load hits both alike
            for mode in ("raw", "runtime") if round_ % 2 == 0 else ("runtime", "raw"):
                command = [
                    sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.nproc}",
                    __file__, "--worker", mode, "--out", str(out), "--iterations", str(args.iterations),
                    "--sizes", args.sizes,
                ]  # fmt: skip
                subprocess.run(command, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
                result = json.loads(out.read_text())
                data[mode].append(result["seconds"])
                device = result["device"]
    n = args.nproc
    rows = []
    for size in [str(parse_size(s)) for s in args.sizes.split(",")]:
        raw = statistics.median(r[size] for r in data["raw"])
        ours = statistics.median(r[size] for r in data["runtime"])
        factor = int(size) * 2 * (n - 1) / n / 1e9
        rows.append({"bytes": int(size), "raw_GBps": factor / raw, "runtime_GBps": factor / ours, "ratio": raw / ours})
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    backend = "nccl" if device != "cpu" else "gloo (no GPU here)"
    print(f"{n} ranks, {args.rounds} rounds, bus bandwidth (median), {backend}")
    print("bytes | raw torch.distributed GB/s | crosstrain.runtime GB/s | ratio (goal >= 0.98)")
    print("--- | --- | --- | ---")
    for row in rows:
        print(f"{row['bytes']:,} | {row['raw_GBps']:.3f} | {row['runtime_GBps']:.3f} | {row['ratio']:.3f}")


if __name__ == "__main__":
    main()
