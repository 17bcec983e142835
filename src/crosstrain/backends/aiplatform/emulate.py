"""AI Platform Training's nodes on this machine (`--emulate aiplatform`): the master's and workers' container
command (or the package's module) with the `CLUSTER_SPEC` and `TF_CONFIG` the service sets on each."""

from __future__ import annotations

from typing import TYPE_CHECKING

from crosstrain.backends._google import PLACEHOLDER_SETTINGS
from crosstrain.backends.emulation import Emulation, Node, node_process, topology

if TYPE_CHECKING:
    from crosstrain.records import Request
    from crosstrain.spec import TrainingJob


def nodes(request: Request, job: TrainingJob, nproc: int) -> list[Node]:
    from crosstrain.runtime.platforms import AIPlatformTraining

    body, count = request.create.body, job.nodes
    training = body["trainingInput"]
    platform = AIPlatformTraining.emulate(topology(count, 1, body["jobId"]))
    plan = []
    for node in range(count):
        config = training["masterConfig"] if node == 0 else training.get("workerConfig", training["masterConfig"])
        if training.get("packageUris"):  # the package pip-installed on the nodes: here, the bundle unpacked
            argv = ["python", "-m", training["pythonModule"], *training.get("args", [])]
        else:
            argv = [*config.get("containerCommand", []), *config.get("containerArgs", [])]
        plan.append(node_process(node, nproc, argv, platform[node]))
    return plan


EMULATION = Emulation(
    variants={"aiplatform": {}},
    placeholder_settings=PLACEHOLDER_SETTINGS,
    nodes=nodes,
    cpu_machine="n1-standard-8",
)
