"""Per-node launcher: `python -m crosstrain.launch [--nproc-per-node auto|N] [--nnodes N] -- CMD ...`.

Where the platform starts one process per node (Vertex AI, AI Platform Training, Azure ML with one process per
node, a bare container), this computes the node count, node rank and primary address from the detected
environment and replaces itself with `torch.distributed.run`, which starts one CMD per GPU (or N). Where the
platform already started one process per rank (torchrun, Databricks, Azure ML per-process, MPI), it replaces
itself with CMD as is. Either way the launcher *becomes* that process (exec), so signals reach it directly
and its exit code is the job's. A bad environment exits 2 with a message naming the platform and variable.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
from collections.abc import Mapping, Sequence

from crosstrain.runtime.env import OVERRIDE_VARIABLE, ClusterEnv, ClusterEnvError, SingleProcess, detect

USAGE_ERROR = 2
COMMAND_NOT_FOUND = 127


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m crosstrain.launch",
        description="Start one training process per GPU on this node, wherever the job runs.",
    )
    parser.add_argument(
        "--nproc-per-node",
        default="auto",
        help="processes per node: 'auto' (one per visible GPU, or 1 without GPUs) or a number (default: auto)",
    )
    parser.add_argument(
        "--nnodes",
        type=int,
        default=None,
        help="node count, where the backend knows it and the environment is ambiguous (Azure ML's PyTorch "
        "variables on node 0 look the same with one process per node as with one per GPU)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]: the training command")
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if args.nnodes is not None and args.nnodes < 1:
        parser.error(f"--nnodes is {args.nnodes}: use a positive number")
    if not args.command:
        parser.error("no command: use `python -m crosstrain.launch [--nproc-per-node auto|N] [--nnodes N] -- CMD ...`")
    if args.nproc_per_node != "auto" and not (args.nproc_per_node.isdigit() and int(args.nproc_per_node) > 0):
        parser.error(f"--nproc-per-node is {args.nproc_per_node!r}: use 'auto' or a positive number")
    return args


def visible_gpus() -> int:
    """GPUs this node can use, as torch counts them (honours `CUDA_VISIBLE_DEVICES`)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def plan(env: ClusterEnv, nproc_per_node: str, command: Sequence[str]) -> list[str]:
    """The command line this node runs: CMD as is, or `torch.distributed.run` starting CMD per process."""
    if not env.needs_launcher:
        return list(command)
    count = max(visible_gpus(), 1) if nproc_per_node == "auto" else int(nproc_per_node)
    if env.process_level and count == 1:
        return list(command)  # one process per machine and one to start: it is already the only rank
    if env.nnodes is None or env.node_rank is None:  # node-level platforms always name both
        raise ClusterEnvError(env.platform, "NODE_RANK", "the node count or node rank is unknown")
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={env.nnodes}",
        f"--node_rank={env.node_rank}",
        f"--master_addr={env.master_addr}",
        f"--master_port={env.master_port}",
        f"--nproc_per_node={count}",
        "--max_restarts=0",
        "--no_python",
        *command,
    ]


def with_node_count(env: ClusterEnv, nnodes: int | None) -> ClusterEnv:
    """The environment completed by the node count the backend rendered, where the variables leave it open."""
    if nnodes is None or env.nnodes is not None or env.world_size is None:
        return env
    if env.world_size % nnodes:
        raise ClusterEnvError(env.platform, "WORLD_SIZE", f"is {env.world_size}, not a multiple of --nnodes {nnodes}")
    return dataclasses.replace(env, nnodes=nnodes, nproc_per_node=env.world_size // nnodes)


def child_environment(environ: Mapping[str, str], env: ClusterEnv, line: Sequence[str]) -> dict[str, str]:
    """What `line` inherits: torchrun's variables, so that frameworks (Lightning, Accelerate) read the job as under
    torchrun. torchrun sets all but `NODE_RANK` (its node rank is `GROUP_RANK`), which this adds for its children;
    a command run as is, as one rank, gets the rank's (`RANK` from MPI's variables, or a node's in disguise). A
    forced platform is dropped: the children detect themselves afresh (as torchelastic)."""
    child = {k: v for k, v in environ.items() if k != OVERRIDE_VARIABLE}
    if _starts_torchrun(line):
        if env.node_rank is not None:
            child["NODE_RANK"] = str(env.node_rank)
    elif env.process_level and env.platform != SingleProcess.name:  # a lone process keeps a free port at init()
        child.update(env.torch_variables())
    return child


def _starts_torchrun(line: Sequence[str]) -> bool:
    return "torch.distributed.run" in line[:3]


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    try:
        env = with_node_count(detect(), args.nnodes)
    except ClusterEnvError as exc:
        print(f"crosstrain.launch: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    line = plan(env, args.nproc_per_node, args.command)
    nproc = [a.split("=", 1)[1] for a in line if a.startswith("--nproc_per_node=")]
    how = "as is" if line == args.command else f"{nproc[0]} per node under torch.distributed.run"
    print(f"crosstrain.launch: {env.describe()}; running the command {how}", file=sys.stderr, flush=True)
    executable = shutil.which(line[0])
    if executable is None:
        print(f"crosstrain.launch: error: {line[0]}: command not found", file=sys.stderr)
        return COMMAND_NOT_FOUND
    sys.stdout.flush()
    os.execve(executable, line, child_environment(os.environ, env, line))
    return 0  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main())
