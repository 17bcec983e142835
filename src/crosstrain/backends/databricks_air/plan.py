"""The plan: the one deployment (accelerator type, total accelerators), the code bundle and the run's
dependencies, or every reason the job cannot run on AI Runtime."""

from __future__ import annotations

import os

from crosstrain import catalog, packaging, uploads
from crosstrain.backends._databricks import archive_of, runtime_bundle
from crosstrain.backends.databricks_air.settings import (
    IMPORT_LIMIT,
    VOLUME_FIX,
    WORKSPACE_CODE_LIMITS,
    DatabricksAIRSettings,
)
from crosstrain.errors import Problem
from crosstrain.frozen import frozen
from crosstrain.spec import PoolView, TrainingJob

#: The catalog's name of this platform (its accelerator types: `ComputeSpec.accelerator_type`).
PLATFORM = "databricks-air"


def offered() -> str:
    """The shapes AI Runtime offers, as a job names them."""
    return (
        catalog.choices(PLATFORM, "A10G")
        + "; "
        + catalog.choices(PLATFORM, "H100")
        + "; "
        + catalog.choices(PLATFORM, "B300")
    )


@frozen
class Plan:
    """What the render needs: the deployment's compute, the bundle and what the run installs."""

    pool: PoolView
    accelerator_type: str
    gpus_per_node: int
    nodes: int
    bundle: packaging.Bundle
    archive_size: int | None
    dependencies: tuple[str, ...]

    @property
    def accelerator_count(self) -> int:
        """AI Runtime's count is the total across nodes: GPU_8xH100 with 16 is two nodes."""
        return self.gpus_per_node * self.nodes


def _plan(job: TrainingJob, settings: DatabricksAIRSettings) -> tuple[Plan | None, list[Problem]]:
    problems: list[Problem] = []
    pool = job.pools()[0]
    machine = _machine(pool, problems)
    wanted = job.launch.processes_per_node
    if machine is not None and wanted is not None and wanted != machine.gpu_count:
        problems.append(
            Problem(
                "launch.processes_per_node",
                f"crosstrain's launcher starts one process per GPU on AI Runtime ({machine.gpu_count} per node), "
                f"not {wanted}",
                "remove `launch.processes_per_node`",
            )
        )
    if not pool.command:
        problems.append(
            Problem(
                "command",
                "AI Runtime runs a command script on every node, and the job has no command",
                "set `command`, e.g. python train.py",
            )
        )
    if job.environment is not None:
        problems.append(
            Problem(
                "environment",
                "AI Runtime runs its own serverless GPU environment, picked by version, not a named framework runtime",
                "remove `environment` and set targets.databricks-air.environment_version (default "
                f"{settings.environment_version})",
            )
        )
    if settings.priority_class and not settings.provisioned_capacity_id:
        problems.append(
            Problem(
                "targets.databricks-air.priority_class",
                "AI Runtime takes a priority class only on reserved capacity; on-demand capacity rejects it",
                "set targets.databricks-air.provisioned_capacity_id, or remove priority_class",
            )
        )
    bundle, size, dependencies = _code(job, settings, problems)
    if problems or machine is None or bundle is None or machine.machine_type is None:
        return None, problems
    plan = Plan(pool, machine.machine_type, machine.gpu_count, job.nodes, bundle, size, dependencies)
    return plan, []


def _machine(pool: PoolView, problems: list[Problem]) -> catalog.ResolvedMachine | None:
    """The pool's machine as an AI Runtime accelerator type: only the types the service offers, each with its
    GPUs per node."""
    spec = pool.machine
    accel = spec.accelerator if spec else None
    fix = f"use one of: {offered()}"
    if spec is None or (accel is None and not spec.type):
        problems.append(
            Problem(pool.machine_path, "AI Runtime runs on GPUs, and the job names no machine", f"give GPUs; {fix}")
        )
        return None
    try:
        machine = catalog.resolve(
            PLATFORM,
            machine_type=spec.type,
            gpu=accel.type if accel else None,
            gpu_count=accel.count if accel else None,
            path=pool.machine_path,
        )
    except catalog.CatalogError as exc:
        problems.append(Problem(exc.problem.path, exc.problem.message, fix))
        return None
    types = {m for offer in catalog.OFFERS[PLATFORM].values() for ms in offer.machines.values() for m in ms}
    if machine.machine_type not in types:
        problems.append(
            Problem(
                pool.machine_path,
                f"AI Runtime offers no accelerator type {machine.machine_type}",
                fix,
            )
        )
        return None
    return machine


def _code(
    job: TrainingJob, settings: DatabricksAIRSettings, problems: list[Problem]
) -> tuple[packaging.Bundle | None, int | None, tuple[str, ...]]:
    """The bundle every run uploads (the code folder and crosstrain's runtime, or the runtime alone), its
    archive's size where it goes through the workspace import, and the requirements as the run's dependencies."""
    try:
        if job.code is not None or job.function_payload is not None:
            limits = packaging.Limits() if settings.volume else WORKSPACE_CODE_LIMITS
            bundle = packaging.for_job(job, limits=limits)
        else:
            bundle = runtime_bundle()
        requirements = packaging.requirements_of(job)
    except uploads.UploadRefused as refused:
        problems.append(refused.problem)
        return None, None, ()
    dependencies = []
    for line in requirements:
        if os.sep in line and "://" not in line and "@" not in line:
            problems.append(
                Problem(
                    "requirements",
                    f"{line!r} is not a package requirement; AI Runtime installs each one as a dependency of the "
                    "run's environment",
                    "list packages (torchmetrics==1.4.0); put a local package in the `code` folder",
                )
            )
        else:
            dependencies.append(line)
    if bundle is None:
        bundle = runtime_bundle()
    size = None
    if settings.volume is None:
        size = len(archive_of(bundle))
        if size > IMPORT_LIMIT.max_bytes:
            problems.append(
                Problem(
                    "code",
                    f"the code archive of {bundle.folder} is {size:,} bytes, over the {IMPORT_LIMIT.max_bytes:,} "
                    f"that fit in {IMPORT_LIMIT.description}",
                    VOLUME_FIX,
                )
            )
    return bundle, size, tuple(dependencies)
