"""The Databricks task: run a training file or module under TorchDistributor, and fail when any rank fails.

The `databricks` backend submits a `python_wheel_task` whose entry point is `main` here
(`crosstrain-databricks --num-processes=2 --local-mode=false --use-gpu=true --file=/path/train.py -- ARGS`).
It calls `TorchDistributor(num_processes, local_mode, use_gpu).run(...)`, the call Databricks' guide shows.

TorchDistributor hides training failures: its torchrun wrapper exits 0 and `run()` returns None whatever the
ranks did (every pyspark from 3.4 to 4.3). So the training file runs inside `train_on_rank`, in function mode:

* a rank whose script raises or exits non-zero produces no output; in distributed mode (one process per
  Spark task, since the task GPU amount stays 1) that task raises and the barrier stage fails;
* in local mode all ranks share one torchrun and one output file (the last rank to finish wins), so each
  rank that finished also leaves a marker in a driver-local directory, and every rank's marker must be there;
* every rank returns the same value, holding this run's token, which `run()` must hand back.

Anything else exits 1, so the Databricks task, the run and `crosstrain wait` report FAILED.

This module imports only the standard library at import time: the backend's render uses `DistributorCall`
to build the task parameters, and the render path must not import pyspark or torch.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

#: The console script a `python_wheel_task` names as its entry point.
ENTRY_POINT = "crosstrain-databricks"


def _flag(value: str) -> bool:
    if value.lower() in ("true", "1", "yes"):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{value!r} is not true or false")


@dataclass(frozen=True)
class DistributorCall:
    """`TorchDistributor(num_processes, local_mode, use_gpu).run(<file or module>, *args)`, as task parameters."""

    num_processes: int
    local_mode: bool
    use_gpu: bool
    kind: Literal["file", "module"]
    target: str
    args: tuple[str, ...] = ()

    def parameters(self) -> list[str]:
        """The command-line parameters of the Databricks task; `parse` reads them back."""
        return [
            f"--num-processes={self.num_processes}",
            f"--local-mode={str(self.local_mode).lower()}",
            f"--use-gpu={str(self.use_gpu).lower()}",
            f"--{self.kind}={self.target}",
            "--",
            *self.args,
        ]

    @classmethod
    def parse(cls, argv: Sequence[str]) -> DistributorCall:
        parser = argparse.ArgumentParser(
            prog=ENTRY_POINT, description="Run a training file or module under TorchDistributor."
        )
        parser.add_argument("--num-processes", type=int, required=True)
        parser.add_argument("--local-mode", type=_flag, required=True)
        parser.add_argument("--use-gpu", type=_flag, required=True)
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--file", help="a training script, at the same path on every node")
        target.add_argument("--module", help="a training module, importable on every node")
        argv = list(argv)
        split = argv.index("--") if "--" in argv else len(argv)
        ns = parser.parse_args(argv[:split])
        if ns.num_processes < 1:
            parser.error("--num-processes must be at least 1")
        kind: Literal["file", "module"] = "file" if ns.file else "module"
        return cls(ns.num_processes, ns.local_mode, ns.use_gpu, kind, ns.file or ns.module, tuple(argv[split + 1 :]))


def train_on_rank(kind: str, target: str, args: list[str], token: str, marker_dir: str | None) -> dict[str, Any]:
    """Runs in every training process: the user's script as `__main__`, then proof that this rank finished."""
    import runpy

    sys.argv = [target, *args]
    try:
        if kind == "file":
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")
        else:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            raise
    if marker_dir is not None:
        Path(marker_dir, f"rank-{os.environ.get('RANK', '0')}").write_text(token)
    return {"ok": True, "token": token}


def failures(call: DistributorCall, result: Any, token: str, marker_dir: str | None) -> list[str]:
    """Why the run failed, judged from what `run()` returned and the ranks' markers; empty when it succeeded."""
    found: list[str] = []
    if result != {"ok": True, "token": token}:
        found.append(f"TorchDistributor returned {result!r}, not this run's success value: a rank failed")
    if marker_dir is not None:
        missing = [r for r in range(call.num_processes) if not Path(marker_dir, f"rank-{r}").is_file()]
        if missing:
            found.append(f"rank(s) {', '.join(map(str, missing))} of {call.num_processes} did not finish")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    call = DistributorCall.parse(sys.argv[1:] if argv is None else argv)
    from pyspark.ml.torch.distributor import TorchDistributor
    from pyspark.sql import SparkSession

    SparkSession.builder.getOrCreate()  # on Databricks: the cluster's session
    token = uuid.uuid4().hex
    print(
        f"crosstrain: TorchDistributor(num_processes={call.num_processes}, local_mode={call.local_mode}, "
        f"use_gpu={call.use_gpu}).run({call.target!r}, *{list(call.args)!r})",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="crosstrain-ranks-") as scratch:
        marker_dir = scratch if call.local_mode else None
        distributor = TorchDistributor(
            num_processes=call.num_processes, local_mode=call.local_mode, use_gpu=call.use_gpu
        )
        try:
            result = distributor.run(train_on_rank, call.kind, call.target, list(call.args), token, marker_dir)
        except Exception as exc:  # a failed barrier stage surfaces as Py4JJavaError, a missing output as RuntimeError
            print(f"crosstrain: training failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            return 1
        problems = failures(call, result, token, marker_dir)
    for problem in problems:
        print(f"crosstrain: training failed: {problem}", file=sys.stderr, flush=True)
    return 1 if problems else 0


class TrainingFailed(RuntimeError):
    """Raised by the task's entry point: a Databricks wheel task calls the function and ignores what it returns,
    so only an exception fails the task, the run and `crosstrain wait`."""


def run(argv: Sequence[str] | None = None) -> None:
    """The `crosstrain-databricks` entry point of the wheel task: `main()`, raising when training failed."""
    if main(argv) != 0:
        raise TrainingFailed("training failed on at least one rank; the reason is in the lines above")


if __name__ == "__main__":
    # Call through the imported module, so `train_on_rank` is pickled by reference, not as a `__main__` function.
    from crosstrain import databricks_task

    sys.exit(databricks_task.main())
