"""Per-node launcher: `python -m crosstrain.launch [--nproc-per-node auto|N] [--nnodes N] -- CMD ...`.

Where the platform starts one process per node (Vertex AI, AI Platform Training, Azure ML with one process per
node, a bare container), this computes the node count, node rank and primary address from the detected
environment and replaces itself with `torch.distributed.run`, which starts one CMD per GPU (or N). Where the
platform already started one process per rank (torchrun, Databricks, Azure ML per-process, MPI), it replaces
itself with CMD as is. Either way the launcher *becomes* that process (exec), so signals reach it directly
and its exit code is the job's. A bad environment exits 2 with a message naming the platform and variable.

Frameworks run unchanged under it: the command as is gets the `env://` variables (`RANK`, `WORLD_SIZE`,
`LOCAL_RANK`, `MASTER_ADDR`, ...) even where the platform names them otherwise (MPI); a command that is itself a
`torchrun` / `python -m torch.distributed.launch` line becomes the node's launcher, completed with the node
arguments it leaves out. Before starting torchrun on a multi-node job, the nodes check in with the primary
(`crosstrain.runtime.join`): the primary says which nodes it still waits for, and every node exits naming the
missing ones at the deadline (`CROSSTRAIN_JOIN_TIMEOUT`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
from collections.abc import Mapping, Sequence

from crosstrain.runtime.env import OVERRIDE_VARIABLE, ClusterEnv, ClusterEnvError, SingleProcess, detect
from crosstrain.runtime.join import JoinTimeout, check_in, join_timeout

USAGE_ERROR = 2
JOIN_TIMED_OUT = 3
COMMAND_NOT_FOUND = 127
TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")
# torchrun's options that take no value (every other option before the script takes one, unless given with `=`).
_TORCHRUN_FLAGS = frozenset(
    {"standalone", "m", "module", "no_python", "run_path", "use_env", "virtual_local_rank", "help", "h"}
)


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


def torchrun_options(command: Sequence[str]) -> tuple[int, dict[str, str]] | None:
    """Where a `torchrun` / `python -m torch.distributed.run|launch` command's own options start, and those
    options (names with `_`, values `""` for flags); None for any other command."""
    words = list(command)
    if words and os.path.basename(words[0]) == "torchrun":
        start = 1
    elif len(words) >= 3 and os.path.basename(words[0]).startswith("python") and words[1:2] == ["-m"]:
        if words[2] not in TORCHRUN_MODULES:
            return None
        start = 3
    else:
        return None
    options: dict[str, str] = {}
    index = start
    while index < len(words) and words[index].startswith("-"):
        name, has_value, value = words[index].lstrip("-").partition("=")
        name = name.replace("-", "_")
        if not has_value and name not in _TORCHRUN_FLAGS and index + 1 < len(words):
            index += 1
            value = words[index]
        options[name] = value
        index += 1
    return start, options


def with_node_arguments(
    command: Sequence[str], nnodes: int, node_rank: int, master_addr: str, master_port: int | str
) -> list[str]:
    """A user's own torchrun line as a node's launcher: the node count, node rank and rendezvous it leaves out
    are added (a line with its own `--standalone` or `--rdzv_endpoint` is kept as is)."""
    found = torchrun_options(command)
    if found is None:
        raise ValueError(f"not a torchrun command line: {' '.join(command)}")
    start, options = found
    if "standalone" in options or "rdzv_endpoint" in options:
        return list(command)
    known = {"nnodes": nnodes, "node_rank": node_rank, "master_addr": master_addr, "master_port": master_port}
    added = [f"--{name}={value}" for name, value in known.items() if name not in options]
    return [*command[:start], *added, *command[start:]]


def plan(env: ClusterEnv, nproc_per_node: str, command: Sequence[str]) -> list[str]:
    """The command line this node runs: CMD as is, `torch.distributed.run` starting CMD per process, or the
    command's own torchrun line completed with the node's arguments."""
    starts_torchrun = torchrun_options(command) is not None
    if not env.needs_launcher:
        if starts_torchrun:
            raise ClusterEnvError(
                env.platform,
                "command",
                f"the platform already started every rank ({env.describe()}), and the command starts torchrun, "
                "which would start more processes in each",
                "use launch.mode per-node (one process per node, whose torchrun starts the ranks), or drop torchrun "
                "from the command",
            )
        return list(command)
    if starts_torchrun:
        if env.nnodes is None or env.node_rank is None:
            raise ClusterEnvError(env.platform, "NODE_RANK", "the node count or node rank is unknown")
        return with_node_arguments(command, env.nnodes, env.node_rank, env.master_addr, env.master_port)
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
    if torchrun_options(line) is not None:
        if env.node_rank is not None:
            child["NODE_RANK"] = str(env.node_rank)
    elif env.process_level and env.platform != SingleProcess.name:  # a lone process keeps a free port at init()
        child.update(env.torch_variables())
    return child


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    try:
        env = with_node_count(detect(), args.nnodes)
    except ClusterEnvError as exc:
        print(f"crosstrain.launch: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    try:
        line = plan(env, args.nproc_per_node, args.command)
        deadline = join_timeout(os.environ)
    except (ClusterEnvError, ValueError) as exc:
        print(f"crosstrain.launch: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    if line == args.command:
        how = "as is"
    elif torchrun_options(args.command) is not None:
        added = [word for word in line if word not in args.command]
        how = f"as this node's torchrun, with {' '.join(added) or 'its own node arguments'}"
    else:
        nproc = [a.split("=", 1)[1] for a in line if a.startswith("--nproc_per_node=")]
        how = f"{nproc[0]} per node under torch.distributed.run"
    print(f"crosstrain.launch: {env.describe()}; running the command {how}", file=sys.stderr, flush=True)
    executable = shutil.which(line[0])
    if executable is None:
        print(f"crosstrain.launch: error: {line[0]}: command not found", file=sys.stderr)
        return COMMAND_NOT_FOUND
    if line != args.command and env.nnodes and env.node_rank is not None:  # torchrun on every node: gather them
        try:
            check_in(
                env.nnodes,
                env.node_rank,
                env.master_addr,
                env.master_port,
                timeout=deadline,
                say=lambda text: print(f"crosstrain.launch: {text}", file=sys.stderr, flush=True),
            )
        except JoinTimeout as exc:
            print(f"crosstrain.launch: error: node {env.node_rank}: {exc}", file=sys.stderr, flush=True)
            return JOIN_TIMED_OUT
    sys.stdout.flush()
    os.execve(executable, line, child_environment(os.environ, env, line))
    return 0  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main())
