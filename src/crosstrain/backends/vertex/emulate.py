"""Vertex AI's nodes on this machine (`--emulate vertex`): each worker pool's container command (or its Python
package's module) with the variables Vertex sets on each replica (`CLUSTER_SPEC`, `TF_CONFIG`, `AIP_*`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from crosstrain.backends._google import PLACEHOLDER_SETTINGS, fuse_bootstrap_args
from crosstrain.backends.emulation import Emulation, Node, node_process, topology
from crosstrain.packaging import PACKAGE

if TYPE_CHECKING:
    from crosstrain.records import Request
    from crosstrain.spec import TrainingJob


def nodes(request: Request, job: TrainingJob, nproc: int) -> list[Node]:
    from crosstrain.runtime.platforms import VertexAI, vertex

    body, count = request.create.body, job.nodes
    specs = body["jobSpec"]["workerPoolSpecs"]
    output = (body["jobSpec"].get("baseOutputDirectory") or {}).get("outputUriPrefix")
    platform = VertexAI.emulate(topology(count, 1, request.identity))
    plan = []
    for node in range(count):
        spec = specs[0 if node == 0 else 1]
        if "pythonPackageSpec" in spec:  # the package pip-installed on a pre-built container: here, unpacked
            container = spec["pythonPackageSpec"]
            argv = ["python", "-m", container["pythonModule"], *container.get("args", [])]
        else:
            container = spec["containerSpec"]
            argv = [*container.get("command", []), *container.get("args", [])]
            fused = fuse_bootstrap_args(argv)
            if fused is not None:  # the archive read through the FUSE mount: here, the one unpacked for the run
                argv = ["python", "-m", PACKAGE, *fused]
        env = {item["name"]: item["value"] for item in container.get("env", [])}
        env.update(platform[node])
        if output:
            env.update(vertex.output_variables(output))
        plan.append(node_process(node, nproc, argv, env))
    return plan


EMULATION = Emulation(
    variants={"vertex": {}},
    placeholder_settings=PLACEHOLDER_SETTINGS,
    nodes=nodes,
    cpu_machine="n1-standard-8",
    reduction_server=True,
)
