"""Azure ML's nodes on this machine (`--emulate azureml`, `--emulate azureml-mpi`): the command of the rendered job
on every node, with the variables Azure's PyTorch or MPI distribution sets for each process it starts."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from crosstrain.backends.emulation import Emulation, Node, node_process, topology
from crosstrain.code_archive import ARCHIVE_PATH
from crosstrain.errors import Problem, Unsupported
from crosstrain.packaging import PACKAGE

if TYPE_CHECKING:
    from crosstrain.records import Request
    from crosstrain.spec import TrainingJob


def nodes(request: Request, job: TrainingJob, nproc: int) -> list[Node]:
    from crosstrain.runtime.platforms import AzureMLMPI, AzureMLPyTorch, azureml

    props, count = request.create.body["properties"], job.nodes
    distribution = props.get("distribution") or {}
    kind = distribution.get("distributionType")
    if kind == "TensorFlow":
        raise Unsupported(
            "local",
            [Problem("launch.framework", "local runs start PyTorch and MPI jobs, not TensorFlow", "use pytorch")],
        )
    per_node = int(distribution.get("processCountPerInstance", 1))
    argv = ["/bin/sh", "-c", props["command"]]
    if props.get("codeId"):  # `python -m crosstrain_code ... -- CMD`, run from the stage root as from the snapshot
        words = shlex.split(props["command"])
        if words[:3] == ["python", "-m", PACKAGE]:
            argv = words
    job_env = props.get("environmentVariables") or {}
    cluster = topology(count, per_node, request.identity)
    if kind == "Mpi":
        platform = AzureMLMPI.emulate(cluster)
    elif kind == "PyTorch":
        platform = AzureMLPyTorch.emulate(cluster)
    else:  # no distribution: Azure starts the command on each node with nothing but the run's identity
        platform = [azureml.job_variables(request.identity)] * (count * per_node)
    plan = []
    for (rank, node, _), variables in zip(cluster.ranks(), platform, strict=True):
        env = {**job_env, **variables}
        name = f"node{node}" if per_node == 1 else f"node{node} rank{rank}"
        process = node_process(node, nproc, argv, env) if per_node == 1 else None
        plan.append(process or Node(name, node, [rank], argv, env))
    return plan


def archived(request: Request) -> bool:
    """Whether the rendered request's code upload holds the user's files as one archive."""
    return any(
        str(blob.get("name", "")).endswith(f"/{ARCHIVE_PATH}")
        for call in request.calls
        if isinstance(call.body, dict)
        for blob in call.body.get("blobs") or ()
        if isinstance(blob, dict)
    )


EMULATION = Emulation(
    variants={"azureml": {}, "azureml-mpi": {"framework": "mpi"}},
    placeholder_settings={
        "subscription_id": "00000000-0000-0000-0000-000000000000",
        "resource_group": "local-emulation",
        "workspace": "local-emulation",
        "compute": "local-emulation",
    },
    nodes=nodes,
    environment_settings=("build",),  # the image Azure ML builds from a Docker build context
    archived=archived,
)
