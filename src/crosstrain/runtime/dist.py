"""Process-group life cycle on top of `detect()`: init with retries, DDP with the right devices, clean exit.

torch is imported inside the functions, and nothing else outside the standard library is used: the runtime
travels with shipped code (`crosstrain.packaging`) to images where only torch is installed.
"""

from __future__ import annotations

import atexit
import dataclasses
import gc
import logging
import os
import socket
import sys
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from crosstrain.runtime.env import (
    AzureMLMPI,
    AzureMLPyTorch,
    ClusterEnv,
    ClusterEnvError,
    SingleProcess,
    TorchElastic,
    detect,
)
from crosstrain.runtime.join import check_in, join_timeout

if TYPE_CHECKING:
    import torch
    from torch._C._distributed_c10d import TCPStore
    from torch.utils.data import Dataset, DistributedSampler

log = logging.getLogger("crosstrain.runtime")

# Vertex AI starts replicas minutes apart (GiGL raised theirs to 45 minutes for that reason).
DEFAULT_TIMEOUT = timedelta(minutes=45)
P2P_OPT_IN = "CROSSTRAIN_NCCL_P2P_DISABLE"
_current: ClusterEnv | None = None
_release_registered = False


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _apply_nccl_advice(env: ClusterEnv, *, disable_p2p: bool) -> None:
    """The platforms' NCCL advice, only where the user has not set the variable themselves.

    Azure ML (multi-node): keep NCCL off the docker bridge and loopback (`^docker0,lo`, its GPU guide).
    `NCCL_P2P_DISABLE=1` only on request (Databricks' fix for GPUs without peer access, e.g. AWS G5).
    """
    multi_node = (env.nnodes or 1) > 1
    if multi_node and env.platform in (AzureMLMPI.name, AzureMLPyTorch.name):
        os.environ.setdefault("NCCL_SOCKET_IFNAME", "^docker0,lo")
    if disable_p2p or os.environ.get(P2P_OPT_IN, "") == "1":
        os.environ.setdefault("NCCL_P2P_DISABLE", "1")


def _bind_device(env: ClusterEnv) -> int | None:
    """`torch.cuda.set_device(local_rank)`; a process that sees exactly one GPU (Databricks' layout, or
    `CUDA_VISIBLE_DEVICES` set per process) uses that one."""
    import torch

    if not torch.cuda.is_available():
        return None
    count, local_rank = torch.cuda.device_count(), env.local_rank or 0
    device = 0 if count == 1 else local_rank
    if device >= count:
        raise ClusterEnvError(
            env.platform,
            "LOCAL_RANK",
            f"is {local_rank}, but this process sees {count} GPUs",
            "start at most one process per visible GPU (--nproc-per-node, process_count_per_instance)",
        )
    torch.cuda.set_device(device)
    return device


def _wait_until_resolvable(env: ClusterEnv, timeout: timedelta) -> None:
    """Cloud DNS names the primary only once its VM is up, and torch's store gives up on a name that never
    resolves without saying so. Wait (with backoff, up to `timeout`) and fail with the variable's name."""
    deadline = time.monotonic() + timeout.total_seconds()
    pause = 0.5
    while True:
        try:
            socket.getaddrinfo(env.master_addr, env.master_port, type=socket.SOCK_STREAM)
            return
        except socket.gaierror:
            if time.monotonic() + pause > deadline:
                raise ClusterEnvError(
                    env.platform,
                    "MASTER_ADDR",
                    f"{env.master_addr!r} did not resolve within {timeout}",
                    "check the primary's host name, or raise init(timeout=...) if replicas start far apart",
                ) from None
            log.warning("crosstrain.runtime: the primary host %r does not resolve yet; retrying", env.master_addr)
            time.sleep(pause)
            pause = min(pause * 2, 10.0)


@dataclasses.dataclass(frozen=True)
class Joined(ClusterEnv):
    """The place `init()` joined the group at: `with init() as env:` destroys the group on the way out, on error
    too."""

    @classmethod
    def of(cls, env: ClusterEnv) -> Joined:
        return cls(**{field.name: getattr(env, field.name) for field in dataclasses.fields(env)})

    def __enter__(self) -> Joined:
        return self

    def __exit__(self, *exc_info: object) -> None:
        shutdown()


def init(
    backend: str | None = None,
    timeout: timedelta = DEFAULT_TIMEOUT,
    *,
    environ: Mapping[str, str] | None = None,
    disable_nccl_p2p: bool = False,
) -> Joined:
    """Join the job's process group and return where this process stands in it.

    Detects the platform (a node-level context with no launcher in front is one rank per node), exports what
    `init_method="env://"` reads (overwriting node-level `RANK` and `WORLD_SIZE`), picks nccl with CUDA and
    gloo without, binds the GPU to the local rank, waits for the primary's host name to resolve, and retries
    `init_process_group` on network errors until `timeout` has passed (replicas may start minutes apart:
    torch waits for them within the same `timeout`).
    Use as `with init() as env:` to destroy the group on the way out, on error too.
    """
    global _current
    import torch
    import torch.distributed as dist

    env = Joined.of(detect(environ).one_process_per_node())
    values = env.torch_variables()
    if env.platform == SingleProcess.name and "MASTER_PORT" not in (os.environ if environ is None else environ):
        values["MASTER_PORT"] = str(_free_port())
        env = dataclasses.replace(env, master_port=int(values["MASTER_PORT"]))
    os.environ.update(values)
    if dist.is_initialized():
        _current = env
        return env
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        _apply_nccl_advice(env, disable_p2p=disable_nccl_p2p)
    device = _bind_device(env) if backend == "nccl" else None
    log.info("crosstrain.runtime: %s, backend %s, device %s", env.describe(), backend, device)
    _wait_until_resolvable(env, timeout)
    store = _check_in(env, os.environ if environ is None else environ, timeout)
    if store is not None:  # the group forms on the store the ranks checked in with
        assert env.rank is not None
        assert env.world_size is not None
        dist.init_process_group(backend, store=store, rank=env.rank, world_size=env.world_size, timeout=timeout)
    else:
        _init_from_environment(env, backend, timeout)
    _register_release()
    _current = env
    return env


def _init_from_environment(env: ClusterEnv, backend: str, timeout: timedelta) -> None:
    """`init_process_group(init_method="env://")`: torch waits for the other ranks itself (up to `timeout`);
    this retries failures that come sooner."""
    import torch.distributed as dist

    deadline = time.monotonic() + timeout.total_seconds()
    pause = 1.0
    while True:
        try:
            dist.init_process_group(backend, init_method="env://", timeout=timeout)
            return
        except (dist.DistNetworkError, ConnectionError, socket.gaierror) as exc:
            if time.monotonic() + pause > deadline:
                raise
            log.warning(
                "crosstrain.runtime: joining %s:%s failed (%s); retrying", env.master_addr, env.master_port, exc
            )
            time.sleep(pause)
            pause = min(pause * 2, 30.0)


def _check_in(env: ClusterEnv, environ: Mapping[str, str], timeout: timedelta) -> TCPStore | None:
    """Ranks the platform started itself (Azure ML per process, MPI, a bare `env://` setup) check in with rank 0,
    which says whom it still waits for; at the deadline (`CROSSTRAIN_JOIN_TIMEOUT`, else `timeout`) every rank
    raises `JoinTimeout` naming the missing ones. Returns the store they met on, for the process group. torchrun's
    children skip it: their agents have already met (under `crosstrain.launch`, after the nodes checked in)."""
    if env.platform in (TorchElastic.name, SingleProcess.name) or not env.world_size or env.world_size < 2:
        return None
    assert env.rank is not None  # a process-level context names its rank
    return check_in(
        env.world_size,
        env.rank,
        env.master_addr,
        env.master_port,
        timeout=join_timeout(environ, timeout),
        what="rank",
        say=lambda text: print(f"crosstrain.runtime: {text}", file=sys.stderr, flush=True),
        keep_for=timeout,
    )


def _register_release() -> None:
    global _release_registered
    if not _release_registered:
        atexit.register(_release_at_exit)
        _release_registered = True


def _release_at_exit() -> None:
    """Free what still holds the process group, then destroy it, while the interpreter is fully alive.

    A DDP model sits in a reference cycle, and its reducer holds the process group: after `main()` returns, only
    the cyclic collector frees them, and without this it runs during interpreter finalization. The group's
    worker threads then need the GIL to drop their last tensors, and a thread that asks for it during
    finalization is ended with `pthread_exit` inside a noexcept destructor: `terminate called without an active
    exception` (SIGABRT), in a rank that had finished its work. Collecting here, in an atexit hook (after
    `main()`, before finalization), destroys the group and joins its threads first.
    """
    gc.collect()
    shutdown()
    gc.collect()


def current() -> ClusterEnv:
    """The environment `init()` joined with; `detect()` before that."""
    return _current if _current is not None else detect()


def _initialized() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def is_primary() -> bool:
    """True on global rank 0 (on node 0 where this is a per-node process): the one that writes checkpoints."""
    if _initialized():
        import torch.distributed as dist

        return dist.get_rank() == 0
    env = current()
    return (env.rank if env.process_level else env.node_rank) == 0


def barrier() -> None:
    """Wait for every rank; nothing to wait for outside a process group."""
    if not _initialized():
        return
    import torch
    import torch.distributed as dist

    if dist.get_backend() == "nccl":
        dist.barrier(device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier()


def wrap(model: torch.nn.Module, **ddp_options: Any) -> torch.nn.Module:
    """`model` in DistributedDataParallel, moved to this process's GPU with the matching `device_ids`."""
    if not _initialized():
        raise ClusterEnvError(current().platform, "process group", "is not initialized", "call runtime.init() first")
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    if dist.get_backend() == "nccl":
        device = torch.cuda.current_device()
        return DistributedDataParallel(model.to(device), device_ids=[device], output_device=device, **ddp_options)
    return DistributedDataParallel(model, **ddp_options)


def sampler(
    dataset: Dataset[Any], *, shuffle: bool = True, seed: int = 0, drop_last: bool = False
) -> DistributedSampler[Any]:
    """A `DistributedSampler` over `dataset` for this rank (the whole dataset outside a process group).
    Call `.set_epoch(epoch)` on it every epoch so that shuffling differs between epochs."""
    import torch.distributed as dist
    from torch.utils.data import DistributedSampler

    world, rank = (dist.get_world_size(), dist.get_rank()) if _initialized() else (1, 0)
    return DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last)


def shutdown() -> None:
    """Destroy the process group if there is one (safe to call twice, and on error paths)."""
    global _current
    if _initialized():
        import torch.distributed as dist

        dist.destroy_process_group()
    _current = None
