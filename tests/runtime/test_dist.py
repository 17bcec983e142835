"""`init()` and the helpers in this process: a one-process gloo group, the context manager, the NCCL advice."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from crosstrain import runtime
from crosstrain.runtime.dist import _apply_nccl_advice
from tests.runtime.test_env import CASES, vertex


@pytest.fixture(autouse=True)
def _restore_environ() -> Iterator[None]:
    """init() exports what env:// reads into os.environ; put it back after each test."""
    saved = dict(os.environ)
    yield
    runtime.shutdown()
    os.environ.clear()
    os.environ.update(saved)


def test_one_process_group_with_every_helper() -> None:
    with runtime.init(environ={}) as env:
        assert (env.platform, env.rank, env.world_size) == ("single", 0, 1)
        assert dist.is_initialized()
        assert dist.get_backend() == "gloo"
        assert dist.get_world_size() == 1
        assert os.environ["MASTER_PORT"] == str(env.master_port)
        assert env.master_port != 29500
        assert runtime.current() == env
        assert runtime.is_primary()
        model = runtime.wrap(torch.nn.Linear(2, 1))
        assert isinstance(model, torch.nn.parallel.DistributedDataParallel)
        assert list(iter(runtime.sampler(torch.utils.data.TensorDataset(torch.arange(5)), shuffle=False))) == [
            0,
            1,
            2,
            3,
            4,
        ]
        runtime.barrier()
        assert runtime.init(environ={}).rank == 0  # a second init joins nothing new
    assert not dist.is_initialized()


def test_the_group_is_destroyed_on_error_too() -> None:
    def train_badly() -> None:
        with runtime.init(environ={}):
            assert dist.is_initialized()
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        train_badly()
    assert not dist.is_initialized()


def test_a_node_level_context_without_a_launcher_is_one_rank_per_node() -> None:
    """Vertex with one process per node (CPU or one GPU: no launcher in front) still joins, as rank node_rank."""
    from tests.runtime.test_multiprocess import free_port

    spec = {"cluster": {"workerpool0": ["h:2222"]}, "task": {"type": "workerpool0", "index": 0}}
    environ = {"CLUSTER_SPEC": json.dumps(spec), "MASTER_PORT": str(free_port())}
    with runtime.init(environ=environ) as env:
        assert (env.platform, env.rank, env.world_size, env.local_rank) == ("vertex", 0, 1, 0)
        assert dist.get_world_size() == 1
    assert not dist.is_initialized()


def test_helpers_outside_a_group() -> None:
    with pytest.raises(runtime.ClusterEnvError, match="process group: is not initialized"):
        runtime.wrap(torch.nn.Linear(2, 1))
    assert len(runtime.sampler(torch.utils.data.TensorDataset(torch.arange(3)))) == 3
    runtime.barrier()  # nothing to wait for
    runtime.shutdown()  # and nothing to destroy


def test_a_primary_name_that_never_resolves_is_retried_then_named(caplog: pytest.LogCaptureFixture) -> None:
    environ = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "primary.invalid", "MASTER_PORT": "29500"}
    with caplog.at_level(logging.WARNING, "crosstrain.runtime"), pytest.raises(runtime.ClusterEnvError) as caught:
        runtime.init(environ=environ, timeout=timedelta(seconds=2))
    assert str(caught.value).startswith("env: MASTER_ADDR: 'primary.invalid' did not resolve within 0:00:02")
    assert caplog.text.count("does not resolve yet; retrying") >= 2


def test_an_unreachable_primary_fails_after_the_timeout() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    environ = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    with pytest.raises(runtime.JoinTimeout, match=r"the primary \(rank 0 at 127\.0\.0\.1:\d+\) did not come up by"):
        runtime.init(environ=environ, timeout=timedelta(seconds=2))
    assert not dist.is_initialized()


def test_nccl_advice_fills_only_what_the_user_left_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NCCL_SOCKET_IFNAME", "NCCL_P2P_DISABLE", "CROSSTRAIN_NCCL_P2P_DISABLE"):
        monkeypatch.delenv(name, raising=False)
    azure_multi_node = runtime.detect(CASES["azure mpi seed (Open MPI), rank 5 of 8"][0])
    _apply_nccl_advice(azure_multi_node, disable_p2p=False)
    assert os.environ["NCCL_SOCKET_IFNAME"] == "^docker0,lo"
    assert "NCCL_P2P_DISABLE" not in os.environ

    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "eth0")
    monkeypatch.setenv("CROSSTRAIN_NCCL_P2P_DISABLE", "1")
    _apply_nccl_advice(azure_multi_node, disable_p2p=False)
    assert os.environ["NCCL_SOCKET_IFNAME"] == "eth0"
    assert os.environ["NCCL_P2P_DISABLE"] == "1"

    monkeypatch.delenv("NCCL_SOCKET_IFNAME")
    _apply_nccl_advice(runtime.detect(vertex()), disable_p2p=True)  # not Azure: no interface advice
    assert "NCCL_SOCKET_IFNAME" not in os.environ


def test_a_ddp_model_left_to_the_collector_frees_the_group_before_finalization() -> None:
    """A DDP model sits in a reference cycle that holds the process group. Left to the collector (here: none runs
    by itself), it would be freed during interpreter finalization, when the group's threads can no longer take
    the GIL: the SIGABRT at shutdown of a rank that had finished. The exit hook frees it while Python is alive."""
    script = textwrap.dedent(
        """
        import gc, sys, weakref
        import torch
        from crosstrain import runtime

        gc.disable()
        refs = []

        def main():
            with runtime.init():
                model = runtime.wrap(torch.nn.Linear(4, 4))
                model(torch.randn(2, 4)).sum().backward()
                when = lambda _: print("finalizing" if sys.is_finalizing() else "alive", flush=True)
                refs.append(weakref.ref(model, when))

        main()
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert (done.returncode, done.stdout) == (0, "alive\n"), done.stderr
