"""`detect()` over one environment fixture per platform and mode, the seeds' examples among them, and every error."""

from __future__ import annotations

import json
from typing import Any

import pytest

from crosstrain.runtime import ClusterEnv, ClusterEnvError, detect
from crosstrain.runtime.env import PLATFORMS

# Vertex AI's CLUSTER_SPEC example (its distributed-training guide): four pools, this replica is the primary.
VERTEX_SEED = {
    "cluster": {
        "workerpool0": ["cmle-training-workerpool0-ab-0:2222"],
        "workerpool1": ["cmle-training-workerpool1-ab-0:2222", "cmle-training-workerpool1-ab-1:2222"],
        "workerpool2": ["cmle-training-workerpool2-ab-0:2222", "cmle-training-workerpool2-ab-1:2222"],
        "workerpool3": [
            "cmle-training-workerpool3-ab-0:2222",
            "cmle-training-workerpool3-ab-1:2222",
            "cmle-training-workerpool3-ab-2:2222",
        ],
    },
    "environment": "cloud",
    "task": {"type": "workerpool0", "index": 0, "trial": "TRIAL_ID"},
    "job": {"workerPoolSpecs": []},
}
# The TF_CONFIG a worker sees (Vertex's example; AI Platform sets the same shape with task type `master`).
TF_CONFIG_WORKER = {
    "cluster": {
        "chief": ["training-workerpool0-id-0:2222"],
        "ps": ["training-workerpool2-id-0:2222"],
        "worker": ["training-workerpool1-id-0:2222", "training-workerpool1-id-1:2222"],
    },
    "environment": "cloud",
    "task": {"cloud": "id2", "index": 1, "trial": "1", "type": "worker"},
}


def vertex(task_type: str = "workerpool0", index: int = 0, **extra: str) -> dict[str, str]:
    spec = {**VERTEX_SEED, "task": {"type": task_type, "index": index, "trial": "1"}}
    return {"CLUSTER_SPEC": json.dumps(spec), "CLOUD_ML_JOB_ID": "123", **extra}


def cluster(platform: str, nnodes: Any, node_rank: Any, nproc: Any, addr: str, port: int, *process: Any) -> ClusterEnv:
    rank, local_rank, world_size = process or (None, None, None)
    return ClusterEnv(platform, nnodes, node_rank, nproc, addr, port, rank, local_rank, world_size)


AZURE_ID = {"AZUREML_RUN_ID": "run-1", "AZUREML_ARM_WORKSPACE_NAME": "ws"}
TORCHRUN = {"TORCHELASTIC_RUN_ID": "abc", "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0"}

CASES: dict[str, tuple[dict[str, str], ClusterEnv]] = {
    # --- Databricks AI Runtime: node-level; the cookbook's torchrun flags come from these variables.
    "databricks-air, node 1 of 2 (the cookbook's variables)": (
        {
            "NUM_NODES": "2",
            "NODE_RANK": "1",
            "MASTER_ADDR": "10.0.0.4",
            "MASTER_PORT": "29400",
            "LOCAL_WORLD_SIZE": "8",
            "CODE_SOURCE_PATH": "/tmp/code",
        },
        cluster("databricks-air", 2, 1, 8, "10.0.0.4", 29400),
    ),
    "databricks-air, one node, no rendezvous said": (
        {"NUM_NODES": "1", "NODE_RANK": "0"},
        cluster("databricks-air", 1, 0, None, "127.0.0.1", 29500),
    ),
    # --- Vertex AI: node-level; pool 0 is node 0, pool 1 index i is node i + 1; pools 2 and 3 don't count.
    "vertex seed, primary": (vertex(), cluster("vertex", 3, 0, None, "cmle-training-workerpool0-ab-0", 29500)),
    "vertex seed, second worker": (
        vertex("workerpool1", 1),
        cluster("vertex", 3, 2, None, "cmle-training-workerpool0-ab-0", 29500),
    ),
    "vertex, node-level RANK/WORLD_SIZE agree and stay node-level": (
        vertex("workerpool1", 0, RANK="1", WORLD_SIZE="3", MASTER_ADDR="primary", MASTER_PORT="3333"),
        cluster("vertex", 3, 1, None, "primary", 3333),
    ),
    "vertex, one replica": (
        {
            "CLUSTER_SPEC": json.dumps(
                {"cluster": {"workerpool0": ["h:2222"]}, "task": {"type": "workerpool0", "index": 0}}
            )
        },
        cluster("vertex", 1, 0, None, "127.0.0.1", 29500),
    ),
    # --- AI Platform Training: RANK = node index, WORLD_SIZE = nodes (its PyTorch guide).
    "aiplatform, the container guide's CLUSTER_SPEC (master/worker keys), worker 1": (
        {
            "CLOUD_ML_JOB_ID": "j",
            "MASTER_ADDR": "cmle-training-master-x-0",
            "CLUSTER_SPEC": json.dumps(
                {
                    "cluster": {"master": ["m:2222"], "worker": ["w0:2222", "w1:2222"]},
                    "task": {"type": "worker", "index": 1},
                }
            ),
        },
        cluster("aiplatform", 3, 2, None, "cmle-training-master-x-0", 29500),
    ),
    "aiplatform seed, worker 2 of 3": (
        {
            "CLOUD_ML_JOB_ID": "j",
            "WORLD_SIZE": "3",
            "RANK": "2",
            "MASTER_ADDR": "cmle-training-master-x-0",
            "MASTER_PORT": "23456",
            "TF_CONFIG": json.dumps({**TF_CONFIG_WORKER, "task": {"type": "worker", "index": 1}}),
        },
        cluster("aiplatform", 3, 2, None, "cmle-training-master-x-0", 23456),
    ),
    "aiplatform, TF_CONFIG only (worker 1 is node 2)": (
        {"CLOUD_ML_JOB_ID": "j", "TF_CONFIG": json.dumps(TF_CONFIG_WORKER), "MASTER_ADDR": "m"},
        cluster("aiplatform", 3, 2, None, "m", 29500),
    ),
    "aiplatform, TF_CONFIG master": (
        {
            "CLOUD_ML_JOB_ID": "j",
            "TF_CONFIG": json.dumps({**TF_CONFIG_WORKER, "task": {"type": "master"}}),
            "MASTER_ADDR": "m",
        },
        cluster("aiplatform", 3, 0, None, "m", 29500),
    ),
    "aiplatform, single node": ({"CLOUD_ML_JOB_ID": "j"}, cluster("aiplatform", 1, 0, None, "127.0.0.1", 29500)),
    # --- Azure ML pytorch: the seed's variables (8 processes on 2 nodes), per process.
    "azure pytorch seed, node 1": (
        {
            **AZURE_ID,
            "MASTER_ADDR": "10.0.0.4",
            "MASTER_PORT": "6105",
            "WORLD_SIZE": "8",
            "NODE_RANK": "1",
            "RANK": "5",
            "LOCAL_RANK": "1",
        },
        cluster("azureml-pytorch", 2, 1, 4, "10.0.0.4", 6105, 5, 1, 8),
    ),
    "azure pytorch seed, node 0 says nothing of the node size": (
        {
            **AZURE_ID,
            "MASTER_ADDR": "10.0.0.4",
            "MASTER_PORT": "6105",
            "WORLD_SIZE": "8",
            "NODE_RANK": "0",
            "RANK": "2",
            "LOCAL_RANK": "2",
        },
        cluster("azureml-pytorch", None, 0, None, "10.0.0.4", 6105, 2, 2, 8),
    ),
    "azure pytorch, node count from AZUREML_NODE_COUNT": (
        {
            **AZURE_ID,
            "AZUREML_NODE_COUNT": "4",
            "MASTER_ADDR": "m",
            "WORLD_SIZE": "8",
            "NODE_RANK": "0",
            "RANK": "1",
            "LOCAL_RANK": "1",
        },
        cluster("azureml-pytorch", 4, 0, 2, "m", 6105, 1, 1, 8),
    ),
    "azure pytorch, one per node (RANK is the node)": (
        {
            "AZ_BATCH_HOST_LIST": "10.0.0.4,10.0.0.5",
            "MASTER_ADDR": "m",
            "WORLD_SIZE": "2",
            "NODE_RANK": "1",
            "RANK": "1",
            "LOCAL_RANK": "0",
        },
        cluster("azureml-pytorch", 2, 1, 1, "m", 6105, 1, 0, 2),
    ),
    # --- Azure ML mpi: the seed's Open MPI variables; node rank = rank // local size.
    "azure mpi seed (Open MPI), rank 5 of 8": (
        {
            "OMPI_COMM_WORLD_RANK": "5",
            "OMPI_COMM_WORLD_SIZE": "8",
            "OMPI_COMM_WORLD_LOCAL_RANK": "1",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
            "OMPI_COMM_WORLD_NODE_RANK": "0",  # not the node rank, despite the name
            "AZ_BATCH_MASTER_NODE": "10.0.0.4:6105",
        },
        cluster("azureml-mpi", 2, 1, 4, "10.0.0.4", 6105, 5, 1, 8),
    ),
    "azure mpi, one node: no master variable": (
        {
            "OMPI_COMM_WORLD_RANK": "1",
            "OMPI_COMM_WORLD_SIZE": "2",
            "OMPI_COMM_WORLD_LOCAL_RANK": "1",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
        },
        cluster("azureml-mpi", 1, 0, 2, "127.0.0.1", 6105, 1, 1, 2),
    ),
    "azure mpi, AZ_BATCHAI_MPI_MASTER_NODE host and MASTER_PORT": (
        {
            "OMPI_COMM_WORLD_RANK": "2",
            "OMPI_COMM_WORLD_SIZE": "4",
            "OMPI_COMM_WORLD_LOCAL_RANK": "0",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
            "AZ_BATCHAI_MPI_MASTER_NODE": "10.0.0.9",
            "MASTER_PORT": "7000",
        },
        cluster("azureml-mpi", 2, 1, 2, "10.0.0.9", 7000, 2, 0, 4),
    ),
    "intel mpi (PMI_*)": (
        {
            "PMI_RANK": "3",
            "PMI_SIZE": "4",
            "MPI_LOCALRANKID": "1",
            "MPI_LOCALNRANKS": "2",
            "AZ_BATCH_MASTER_NODE": "h:1234",
        },
        cluster("azureml-mpi", 2, 1, 2, "h", 1234, 3, 1, 4),
    ),
    "mvapich (MV2_*)": (
        {
            "MV2_COMM_WORLD_RANK": "0",
            "MV2_COMM_WORLD_SIZE": "16",
            "MV2_COMM_WORLD_LOCAL_RANK": "0",
            "MV2_COMM_WORLD_LOCAL_SIZE": "8",
            "AZ_BATCH_MASTER_NODE": "h:1",
        },
        cluster("azureml-mpi", 2, 0, 8, "h", 1, 0, 0, 16),
    ),
    # --- torchrun / torchelastic: process-level, trusted; wins over the platform it runs inside.
    "torchrun, 2 nodes x 4": (
        {
            **TORCHRUN,
            "RANK": "6",
            "LOCAL_RANK": "2",
            "WORLD_SIZE": "8",
            "LOCAL_WORLD_SIZE": "4",
            "GROUP_RANK": "1",
            "GROUP_WORLD_SIZE": "2",
            "MASTER_ADDR": "m",
            "MASTER_PORT": "29400",
        },
        cluster("torchelastic", 2, 1, 4, "m", 29400, 6, 2, 8),
    ),
    "torchrun children of crosstrain.launch on Vertex": (
        {
            **vertex("workerpool1", 1, RANK="9", WORLD_SIZE="12"),
            **TORCHRUN,
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "4",
            "GROUP_RANK": "2",
            "MASTER_ADDR": "p",
            "MASTER_PORT": "1",
        },
        cluster("torchelastic", 3, 2, 4, "p", 1, 9, 1, 12),
    ),
    "databricks distributed: one torchrun node per Spark task": (
        {
            **TORCHRUN,
            "TORCHELASTIC_RUN_ID": "0",
            "NODE_RANK": "2",
            "RANK": "2",
            "LOCAL_RANK": "0",
            "WORLD_SIZE": "4",
            "LOCAL_WORLD_SIZE": "1",
            "GROUP_RANK": "2",
            "MASTER_ADDR": "10.1.1.1",
            "MASTER_PORT": "41000",
        },
        cluster("torchelastic", 4, 2, 1, "10.1.1.1", 41000, 2, 0, 4),
    ),
    "databricks local mode": (
        {
            **TORCHRUN,
            "RANK": "1",
            "LOCAL_RANK": "1",
            "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2",
            "GROUP_RANK": "0",
            "MASTER_ADDR": "localhost",
            "MASTER_PORT": "29500",
        },
        cluster("torchelastic", 1, 0, 2, "localhost", 29500, 1, 1, 2),
    ),
    # --- plain env:// and the fallback.
    "plain env://, one process per machine": (
        {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "m", "MASTER_PORT": "5"},
        cluster("env", 2, 1, 1, "m", 5, 1, 0, 2),
    ),
    "plain env:// with local sizes": (
        {
            "RANK": "3",
            "WORLD_SIZE": "4",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "m",
            "MASTER_PORT": "5",
        },
        cluster("env", 2, 1, 2, "m", 5, 3, 1, 4),
    ),
    "nothing set: a single process": ({}, cluster("single", 1, 0, 1, "127.0.0.1", 29500, 0, 0, 1)),
    # --- CROSSTRAIN_PLATFORM forces a reading, e.g. a Kubeflow v1 pod whose RANK is a node index.
    "override: node-level RANK read as AI Platform would": (
        {
            "CROSSTRAIN_PLATFORM": "aiplatform",
            "RANK": "1",
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "job-master-0",
            "MASTER_PORT": "23456",
        },
        cluster("aiplatform", 2, 1, None, "job-master-0", 23456),
    ),
    "override: plain env even inside torchrun": (
        {**TORCHRUN, "CROSSTRAIN_PLATFORM": "env", "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "m"},
        cluster("env", 1, 0, 1, "m", 29500, 0, 0, 1),
    ),
}


@pytest.mark.parametrize(("environ", "expected"), CASES.values(), ids=CASES.keys())
def test_detect(environ: dict[str, str], expected: ClusterEnv) -> None:
    env = detect(environ)
    assert env == expected
    if env.platform in ("vertex", "aiplatform"):  # the trap: a node index is never taken for a process rank
        assert env.rank is None
        assert env.world_size is None
        assert env.needs_launcher


def test_detect_reads_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in __import__("os").environ if n.startswith(("RANK", "WORLD", "MASTER", "TORCHELASTIC"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("CLUSTER_SPEC", vertex("workerpool1", 0)["CLUSTER_SPEC"])
    assert (detect().platform, detect().node_rank) == ("vertex", 1)


def test_every_platform_is_reachable_and_the_fallback_is_last() -> None:
    seen = {expected.platform for _, expected in CASES.values()}
    assert seen == {p.name for p in PLATFORMS}
    assert PLATFORMS[-1].name == "single"


def test_what_needs_the_launcher() -> None:
    assert detect(vertex()).needs_launcher
    assert detect(CASES["azure pytorch, one per node (RANK is the node)"][0]).needs_launcher
    assert not detect(CASES["azure pytorch seed, node 1"][0]).needs_launcher
    assert not detect(CASES["databricks distributed: one torchrun node per Spark task"][0]).needs_launcher
    assert not detect(CASES["azure pytorch seed, node 0 says nothing of the node size"][0]).needs_launcher
    assert detect({}).needs_launcher  # a bare container may still start one process per GPU


def test_torch_variables_are_process_level() -> None:
    env = detect(CASES["azure mpi seed (Open MPI), rank 5 of 8"][0])
    assert env.torch_variables() == {
        "MASTER_ADDR": "10.0.0.4",
        "MASTER_PORT": "6105",
        "RANK": "5",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "4",
        "NODE_RANK": "1",
        "GROUP_RANK": "1",  # torchrun's name for the node rank, which frameworks read too
    }
    with pytest.raises(ClusterEnvError, match=r"(?s)vertex: RANK: .*one per node.*crosstrain\.launch"):
        detect(vertex()).torch_variables()


MPI_OK = {
    "OMPI_COMM_WORLD_RANK": "1",
    "OMPI_COMM_WORLD_SIZE": "4",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
}
AZ_OK = {**AZURE_ID, "MASTER_ADDR": "m", "WORLD_SIZE": "8", "NODE_RANK": "1", "RANK": "5", "LOCAL_RANK": "1"}
AIP_OK = {"CLOUD_ML_JOB_ID": "j", "WORLD_SIZE": "3", "RANK": "2", "MASTER_ADDR": "m"}
TE_OK = {
    **TORCHRUN,
    "RANK": "1",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "2",
    "LOCAL_WORLD_SIZE": "2",
    "GROUP_RANK": "0",
    "MASTER_ADDR": "m",
}


def spec_with(**changes: Any) -> dict[str, str]:
    spec = json.loads(vertex()["CLUSTER_SPEC"])
    for key, value in changes.items():
        part, _, leaf = key.partition("__")
        spec[part][leaf] = value
    return {"CLUSTER_SPEC": json.dumps(spec)}


ERRORS: dict[str, tuple[dict[str, str], str, str]] = {
    # environment, platform named, variable named (and a piece of the message)
    "vertex: not JSON": ({"CLUSTER_SPEC": "{cluster"}, "vertex", "CLUSTER_SPEC: is not valid JSON"),
    "vertex: JSON but not an object": ({"CLUSTER_SPEC": "[1]"}, "vertex", "CLUSTER_SPEC: is JSON list"),
    "vertex: no task": ({"CLUSTER_SPEC": '{"cluster": {}}'}, "vertex", "CLUSTER_SPEC: has no `cluster` and `task`"),
    "vertex: reduction-server pool": (vertex("workerpool2", 0), "vertex", "not a training node"),
    "vertex: evaluator pool": (vertex("workerpool3", 2), "vertex", "task.type is 'workerpool3'"),
    "vertex: index out of range": (vertex("workerpool1", 2), "vertex", "task.index is 2"),
    "vertex: two primaries": (spec_with(cluster__workerpool0=["a:1", "b:1"]), "vertex", "workerpool0 has 2 replicas"),
    "vertex: pool not a list": (spec_with(cluster__workerpool1="a:1"), "vertex", "workerpool1 is not a list"),
    "vertex: bad MASTER_PORT": (vertex(MASTER_PORT="http"), "vertex", "MASTER_PORT: is 'http', not an integer"),
    "vertex: port out of range": (vertex(MASTER_PORT="70000"), "vertex", "MASTER_PORT: is 70000, not a TCP port"),
    "aiplatform: RANK beyond WORLD_SIZE": ({**AIP_OK, "RANK": "3"}, "aiplatform", "RANK: is 3, but WORLD_SIZE is 3"),
    "aiplatform: RANK without WORLD_SIZE": ({**AIP_OK, "WORLD_SIZE": ""}, "aiplatform", "WORLD_SIZE: is not set"),
    "aiplatform: multi-node without MASTER_ADDR": (
        {**AIP_OK, "MASTER_ADDR": ""},
        "aiplatform",
        "MASTER_ADDR: is not set",
    ),
    "aiplatform: TF_CONFIG of a parameter server": (
        {"CLOUD_ML_JOB_ID": "j", "TF_CONFIG": json.dumps({**TF_CONFIG_WORKER, "task": {"type": "ps", "index": 0}})},
        "aiplatform",
        "TF_CONFIG: task is",
    ),
    "azure pytorch: negative RANK": ({**AZ_OK, "RANK": "-1"}, "azureml-pytorch", "RANK: is -1, must be at least 0"),
    "azure pytorch: RANK off its node": (
        {**AZ_OK, "AZUREML_NODE_COUNT": "2", "RANK": "6"},
        "azureml-pytorch",
        "RANK: is 6, but NODE_RANK 1 x 4",
    ),
    "azure pytorch: no MASTER_ADDR": ({**AZ_OK, "MASTER_ADDR": ""}, "azureml-pytorch", "MASTER_ADDR: is not set"),
    "azure pytorch: WORLD_SIZE not a multiple of nodes": (
        {**AZ_OK, "AZUREML_NODE_COUNT": "3"},
        "azureml-pytorch",
        "WORLD_SIZE: is 8, not a multiple of the 3 nodes",
    ),
    "azure pytorch: LOCAL_RANK beyond the node": (
        {**AZ_OK, "LOCAL_WORLD_SIZE": "1"},
        "azureml-pytorch",
        "LOCAL_RANK: is 1, but the processes per node is 1",
    ),
    "mpi: multi-node without a master": (MPI_OK, "azureml-mpi", "AZ_BATCH_MASTER_NODE: is not set"),
    "mpi: master without a port": ({**MPI_OK, "AZ_BATCH_MASTER_NODE": "10.0.0.4"}, "azureml-mpi", "not host:port"),
    "mpi: families are not mixed": (
        {"OMPI_COMM_WORLD_RANK": "1", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"},
        "azureml-mpi",
        "OMPI_COMM_WORLD_SIZE: is not set",
    ),
    "mpi: size not a multiple of the local size": (
        {**MPI_OK, "OMPI_COMM_WORLD_SIZE": "3", "AZ_BATCH_MASTER_NODE": "h:1"},
        "azureml-mpi",
        "OMPI_COMM_WORLD_SIZE: is 3, not a multiple",
    ),
    "mpi: ranks not filling nodes in order": (
        {**MPI_OK, "OMPI_COMM_WORLD_LOCAL_RANK": "0", "AZ_BATCH_MASTER_NODE": "h:1"},
        "azureml-mpi",
        "OMPI_COMM_WORLD_LOCAL_RANK: is 0",
    ),
    "torchelastic: LOCAL_RANK missing": ({**TE_OK, "LOCAL_RANK": ""}, "torchelastic", "LOCAL_RANK: is not set"),
    "torchelastic: LOCAL_RANK beyond LOCAL_WORLD_SIZE": (
        {**TE_OK, "LOCAL_RANK": "2"},
        "torchelastic",
        "LOCAL_RANK: is 2, but LOCAL_WORLD_SIZE is 2",
    ),
    "torchelastic: zero WORLD_SIZE": (
        {**TE_OK, "WORLD_SIZE": "0"},
        "torchelastic",
        "WORLD_SIZE: is 0, must be at least 1",
    ),
    "env: RANK beyond WORLD_SIZE": ({"RANK": "4", "WORLD_SIZE": "4", "MASTER_ADDR": "m"}, "env", "RANK: is 4"),
    "env: WORLD_SIZE not a multiple of LOCAL_WORLD_SIZE": (
        {"RANK": "0", "WORLD_SIZE": "3", "MASTER_ADDR": "m", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"},
        "env",
        "WORLD_SIZE: is 3, not a multiple",
    ),
    "half an env:// setup": (
        {"WORLD_SIZE": "4", "RANK": "1"},
        "single",
        "MASTER_ADDR: is not set, but WORLD_SIZE is 4",
    ),
    "only WORLD_SIZE": ({"WORLD_SIZE": "4"}, "single", "RANK: is not set"),
    "override names no platform": (
        {"CROSSTRAIN_PLATFORM": "sagemaker"},
        "sagemaker",
        "CROSSTRAIN_PLATFORM: names no platform",
    ),
    "override without the platform's variables": (
        {"CROSSTRAIN_PLATFORM": "vertex"},
        "vertex",
        "CLUSTER_SPEC: is not set",
    ),
}


@pytest.mark.parametrize(("environ", "platform", "message"), ERRORS.values(), ids=ERRORS.keys())
def test_detect_errors_name_platform_and_variable(environ: dict[str, str], platform: str, message: str) -> None:
    with pytest.raises(ClusterEnvError) as caught:
        detect(environ)
    assert caught.value.platform == platform
    assert str(caught.value).startswith(f"{platform}: ")
    assert message in str(caught.value)
    assert caught.value.variable in message or caught.value.variable in str(caught.value).split(":")[1]


@pytest.mark.parametrize(
    ("extra", "variable"), [({"RANK": "2"}, "RANK"), ({"WORLD_SIZE": "24"}, "WORLD_SIZE")], ids=["rank", "world"]
)
def test_vertex_follows_cluster_spec_where_its_node_level_variables_disagree(
    extra: dict[str, str], variable: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Whether reducer or evaluator replicas count in Vertex's undocumented RANK/WORLD_SIZE is unknown, so a
    disagreement must not stop a reduction-server job: CLUSTER_SPEC is the authority."""
    env = detect(vertex("workerpool1", 0, **extra))
    assert (env.nnodes, env.node_rank) == (3, 1)
    assert f"vertex: {variable} is" in caplog.text


def test_databricks_air_refuses_a_node_rank_beyond_its_nodes() -> None:
    with pytest.raises(ClusterEnvError, match="NODE_RANK"):
        detect({"NUM_NODES": "2", "NODE_RANK": "2", "MASTER_ADDR": "10.0.0.4"})
