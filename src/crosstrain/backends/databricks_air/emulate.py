"""AI Runtime's nodes on this machine (`--emulate databricks-air`): the command script the request uploads, run
once per node with the variables AI Runtime sets on each (`NUM_NODES`, `NODE_RANK`, `MASTER_ADDR`, `MASTER_PORT`,
`LOCAL_WORLD_SIZE`): its exports, then the bundle's bootstrap on the archive unpacked for the run, which starts
crosstrain's launcher, one process per local GPU slot."""

from __future__ import annotations

import base64
import shlex
from typing import TYPE_CHECKING

from crosstrain.backends.base import archive_bootstrap
from crosstrain.backends.emulation import Emulation, Node, node_process, topology
from crosstrain.errors import Problem, SpecError
from crosstrain.packaging import PACKAGE

if TYPE_CHECKING:
    from crosstrain.records import Request
    from crosstrain.spec import TrainingJob


def script_of(request: Request) -> tuple[dict[str, str], list[str]]:
    """The variables the request's command script exports, and the command it runs (`exec ...`)."""
    path = request.create.body["tasks"][0]["ai_runtime_task"]["deployments"][0]["command_path"]
    uploads = [c for c in request.calls[:-1] if isinstance(c.body, dict) and c.body.get("path") == path]
    if not uploads or not isinstance(uploads[-1].body.get("content"), str):
        raise SpecError([Problem("calls", f"the request uploads no command script to {path}", "render it again")])
    script = base64.b64decode(uploads[-1].body["content"]).decode()
    head, _, command = script.partition("\nexec ")
    env = dict(shlex.split(line)[1].split("=", 1) for line in head.splitlines() if line.startswith("export "))
    return env, shlex.split(command)


def nodes(request: Request, job: TrainingJob, nproc: int) -> list[Node]:
    from crosstrain.runtime.platforms.databricks_air import DatabricksAIR

    env, argv = script_of(request)
    if argv[:3] == ["python3", "-c", archive_bootstrap()]:  # the archive read from the workspace: here, unpacked
        argv = ["python", "-m", PACKAGE, *argv[4:]]
    if "--nproc-per-node" in argv:  # the local processes per node, not the platform's GPUs
        argv[argv.index("--nproc-per-node") + 1] = str(nproc)
    places = DatabricksAIR.emulate(topology(job.nodes, 1, request.identity))
    return [
        node_process(node, nproc, argv, {**env, **places[node], "LOCAL_WORLD_SIZE": str(nproc)})
        for node in range(job.nodes)
    ]


EMULATION = Emulation(
    variants={"databricks-air": {}},
    placeholder_settings={"host": "https://local-emulation.cloud.databricks.com", "environment_version": "4"},
    nodes=nodes,
    sets_processes_per_node=False,  # the machine is kept (AI Runtime offers GPU shapes only); nproc is set above
    environment_settings=("environment_version",),
)
