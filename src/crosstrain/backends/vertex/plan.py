"""The plan: each pool's machine and image, the staged code and the reducers, or every reason the job cannot run."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from crosstrain import catalog, packaging, secrets, sweep
from crosstrain.backends._google import (
    IDENTITY_LABEL,
    PYTHON_MODULE,
    code_refusals,
    label_problems,
    launch_problems,
    region_check,
    staged_object,
)
from crosstrain.backends.vertex.settings import (
    _NEAREST_GEO,
    DWS_GPU_NAMES,
    DWS_GPUS,
    DWS_MAX_TIMEOUT_S,
    REDUCTION_SERVER_IMAGE,
    REGIONS,
    RUNTIMES,
    VertexSettings,
    egress_gbps,
)
from crosstrain.errors import Problem
from crosstrain.frozen import frozen
from crosstrain.records import JobHandle
from crosstrain.uploads import UploadRefused

if TYPE_CHECKING:
    from google.cloud.aiplatform_v1 import CustomJob

    from crosstrain.spec import PoolView, TrainingJob


@frozen
class _Machine:
    machine_type: str
    gpu: str | None
    gpu_count: int
    accelerator: str | None


@frozen
class _PoolPlan:
    machine: _Machine
    image: str  # the pool's own image, or the pre-built container it runs on


@frozen
class Plan:
    pools: dict[str, _PoolPlan]  # by role
    bundle: packaging.Bundle | None  # the code (or function) the job ships
    staged: tuple[str, str] | None  # (bucket, object) it goes to
    reducer: tuple[int, str] | None  # the reduction server's replicas, and why that many
    notes: tuple[str, ...] = ()  # what the render says besides (a region crosstrain does not know)


def _plan(job: TrainingJob, settings: VertexSettings) -> tuple[Plan | None, list[Problem]]:
    """What the job is on Vertex AI (each pool's machine and image, the bucket its code goes to, the reduction
    server's size), or every reason it cannot be: the render builds from the plan only."""
    problems = label_problems(job)
    region = region_check(settings.region, REGIONS, "vertex", "Vertex AI")
    if isinstance(region, Problem):
        problems.append(region)
    machines: dict[str, _Machine] = {}
    images: dict[str, str] = {}
    problems += code_refusals(job, settings.staging_bucket, "vertex", "Vertex AI")
    problems += _bundle_problems(job)
    if settings.environment and all(pool.image for pool in job.pools()):
        problems.append(
            Problem(
                "targets.vertex.environment",
                "names a pre-built container, and every pool runs its own image",
                "remove `image` to run on the pre-built container, or remove targets.vertex.environment",
            )
        )
    for pool in job.pools():
        problems += _pool_limits(job, pool)
        try:
            machines[pool.role] = _resolve(pool)
        except catalog.CatalogError as error:
            problems.append(error.problem)
            if not pool.image and not job.environment and not settings.environment:
                problems.append(_no_image(pool))
        else:
            problems += launch_problems(job, pool, machines[pool.role].gpu_count, "Vertex AI")
            executor = _executor(job, settings, pool, machines[pool.role])
            if isinstance(executor, Problem):
                problems.append(executor)
            elif pool.image or executor:
                images[pool.role] = pool.image or executor or ""
            else:
                problems.append(_no_image(pool))
    if job.reduction_server:
        problems += _reduction_server_problems(job, machines)
    if job.scheduling.spot and job.scheduling.max_wait:
        problems.append(
            Problem(
                "scheduling.max_wait",
                "Vertex AI waits for capacity (max_wait) only with the FLEX_START strategy, not with spot",
                "remove `scheduling.max_wait` or `scheduling.spot`",
            )
        )
    if job.scheduling.max_wait and not job.scheduling.spot:
        problems += _flex_start_problems(job, machines)
    problems += secrets.needs_command(job, "Vertex AI") + sweep.needs_bootstrap(job, "Vertex AI")
    if job.sweep is not None and settings.patch is not None:
        problems.append(
            Problem(
                "targets.vertex.patch",
                "a patch is checked against Vertex AI's CustomJob, and a sweep's body is a HyperparameterTuningJob",
                "remove the patch; or render, edit the body, and `crosstrain send` it",
            )
        )
    problems = list(dict.fromkeys(problems))  # pools that inherit the same field report it once
    if problems:
        return None, problems
    reducer = _reducer_count(job, machines) if job.reduction_server else None
    if job.reduction_server and reducer is None:
        unsized = Problem(
            "reduction_server.replicas",
            "the egress of these machines is not known, so `auto` cannot size the reduction server",
            "set reduction_server.replicas to a number",
        )
        return None, [unsized]
    pools = {role: _PoolPlan(machine, images[role]) for role, machine in machines.items()}
    bundle = packaging.for_job(job)
    staged = staged_object(settings.staging_bucket, bundle.short) if bundle and settings.staging_bucket else None
    return Plan(pools, bundle, staged, reducer, (region,) if isinstance(region, str) else ()), []


def _flex_start_problems(job: TrainingJob, machines: Mapping[str, _Machine]) -> list[Problem]:
    """What Dynamic Workload Scheduler (FLEX_START, which `scheduling.max_wait` asks for) does not take: GPUs
    other than its own, a timeout over 7 days, pools on different machines (a reduction server's among them)."""
    dws = "Vertex AI waits for capacity (scheduling.max_wait) with Dynamic Workload Scheduler (FLEX_START), which"
    without = "or remove `scheduling.max_wait` to queue without a limit on the wait"
    problems = []
    first: _Machine | None = None
    for pool in job.pools():
        machine = machines.get(pool.role)
        if machine is None or not pool.machine_path.startswith(f"{pool.role}."):
            continue  # refused already by the catalog, or the primary's machine (checked as the primary's)
        if machine.gpu not in DWS_GPUS:
            at = pool.machine_path + (".accelerator.type" if pool.machine and pool.machine.accelerator else "")
            problems.append(
                Problem(
                    at,
                    f"{dws} schedules {DWS_GPU_NAMES} GPUs, and {pool.role} has "
                    + (f"{machine.gpu_count} x {machine.gpu}" if machine.gpu else f"none ({machine.machine_type})"),
                    f"give every pool one of those GPUs (e.g. `machine: A100:8`), {without}",
                )
            )
        elif first is None:
            first = machine
        elif machine != first:
            problems.append(
                Problem(
                    pool.machine_path,
                    f"{dws} needs the same machine in every pool, and {pool.role} runs {machine.gpu_count} x "
                    f"{machine.gpu} on {machine.machine_type}, not the primary's {first.gpu_count} x {first.gpu} on "
                    f"{first.machine_type}",
                    f"give {pool.role} the primary's machine, {without}",
                )
            )
    if job.reduction_server is not None:
        problems.append(
            Problem(
                "reduction_server",
                f"{dws} needs the same machine in every pool, and the reduction server's reducers run on CPU "
                "machines of their own",
                f"remove `reduction_server`, {without}",
            )
        )
    timeout = job.scheduling.timeout
    if timeout is not None and timeout > DWS_MAX_TIMEOUT_S:
        problems.append(
            Problem(
                "scheduling.timeout",
                f"{dws} runs a job for at most 7 days (604800s), not {timeout}s",
                f"set scheduling.timeout to 7d or less, {without}",
            )
        )
    return problems


def reduction_server_image(region: str) -> str:
    """The reduction-server image in the multi-region nearest `region` (us, europe or asia)."""
    return REDUCTION_SERVER_IMAGE.format(geo=_geo(region))


def _label_filter(identity: str) -> str:
    """The list filter (AIP-160) for jobs carrying `identity` in the identity label."""
    return f'labels.{IDENTITY_LABEL}="{identity}"'


def _resolve(pool: PoolView) -> _Machine:
    machine = pool.machine
    accel = machine.accelerator if machine else None
    resolved = catalog.resolve(
        "vertex",
        machine_type=machine.type if machine else None,
        gpu=accel.type if accel else None,
        gpu_count=accel.count if accel else None,
        path=pool.machine_path,
    )
    if resolved.machine_type is None:
        raise catalog.CatalogError(
            Problem(
                pool.machine_path,
                f"Vertex AI needs a machine for {pool.role}",
                "set it, e.g. `machine: n1-standard-8` or `machine: A100:8`",
            )
        )
    return _Machine(resolved.machine_type, resolved.gpu, resolved.gpu_count, resolved.accelerator)


#: Environment variables a container takes, and the boot disk sizes in GB (google.md section 1: ContainerSpec,
#: DiskSpec).
MAX_ENV = 100
BOOT_DISK_GB = (100, 64000)


def _pool_limits(job: TrainingJob, pool: PoolView) -> list[Problem]:
    """What a pool's container and disk may hold, refused at the field that set it (a pool inherits the job's
    env and the primary's disk)."""
    own = getattr(job, pool.role)
    problems = []
    if len(pool.env) > MAX_ENV:
        where = (
            f"{pool.role}.env" if own.env else "primary.env" if pool.role == "workers" and job.primary.env else "env"
        )
        problems.append(
            Problem(
                where,
                f"Vertex AI takes at most {MAX_ENV} environment variables per container, not {len(pool.env)}",
                "pass the rest in a file or as arguments",
            )
        )
    size = pool.boot_disk.size_gb if pool.boot_disk else None
    low, high = BOOT_DISK_GB
    if size is not None and not low <= size <= high:
        problems.append(
            Problem(
                f"{pool.role if own.boot_disk else 'primary'}.boot_disk.size_gb",
                f"Vertex AI boot disks are {low}-{high} GB, not {size}",
                f"use a size from {low} to {high}",
            )
        )
    return problems


def _pool_spec(
    replicas: int,
    machine: _Machine,
    pool: PoolView,
    command: list[str] | None,
    *,
    image: str,
    package: tuple[str, list[str]] | None = None,
) -> dict[str, Any]:
    """One worker pool: a `containerSpec` on `image`, or where `package` (the code's gs:// sdist and the command
    the bootstrap runs) is given, a `pythonPackageSpec` that runs the bootstrap on the pre-built container."""
    machine_spec: dict[str, Any] = {"machineType": machine.machine_type}
    if machine.accelerator and machine.gpu_count:
        machine_spec["acceleratorType"] = machine.accelerator
        machine_spec["acceleratorCount"] = machine.gpu_count
    env = {**pool.env, **secrets.reference_env(pool)}  # a secret's reference, never its value
    spec: dict[str, Any] = {"replicaCount": str(replicas), "machineSpec": machine_spec}
    if package is not None:
        uri, runs = package
        python: dict[str, Any] = {
            "executorImageUri": image,
            "packageUris": [uri],
            "pythonModule": PYTHON_MODULE,
            "args": ["--", *runs, *pool.args],
        }
        if env:
            python["env"] = [{"name": name, "value": value} for name, value in env.items()]
        spec["pythonPackageSpec"] = python
    else:
        container: dict[str, Any] = {"imageUri": image}
        if command:
            container["command"] = list(command)
        if pool.args:
            container["args"] = list(pool.args)
        if env:
            container["env"] = [{"name": name, "value": value} for name, value in env.items()]
        spec["containerSpec"] = container
    disk = pool.boot_disk
    if disk and (disk.type or disk.size_gb):
        spec["diskSpec"] = {
            key: value
            for key, value in (("bootDiskType", disk.type), ("bootDiskSizeGb", disk.size_gb))
            if value is not None
        }
    return spec


def _geo(region: str) -> str:
    """The multi-region nearest `region`: us, europe or asia."""
    for prefixes, geo in _NEAREST_GEO:
        if region.startswith(prefixes):
            return geo
    return "us"


def _executor(job: TrainingJob, settings: VertexSettings, pool: PoolView, machine: _Machine) -> str | Problem | None:
    """The pre-built container a pool without its own image runs on: the setting, else the job's portable
    environment from `RUNTIMES` (the GPU or CPU flavour by the pool's machine), else None."""
    if pool.image:
        return None
    if settings.environment:
        return settings.environment
    if job.environment is None:
        return None
    picked = RUNTIMES.pick(job.environment, machine.gpu_count > 0)
    return picked if isinstance(picked, Problem) else picked.format(geo=_geo(settings.region))


def _no_image(pool: PoolView) -> Problem:
    return Problem(
        f"{pool.role}.image",
        "Vertex AI needs a container image for every pool",
        "set `image`, or `environment: pytorch` for a pre-built PyTorch container",
    )


def _bundle_problems(job: TrainingJob) -> list[Problem]:
    """The code folder's own refusals (missing, too large, a link that leaves it), as the render's problems."""
    try:
        packaging.for_job(job)
    except UploadRefused as refused:
        return [refused.problem]
    return []


def _scheduling(job: TrainingJob, notes: list[str]) -> dict[str, Any]:
    plan = job.scheduling
    out: dict[str, Any] = {}
    if plan.timeout:
        out["timeout"] = f"{plan.timeout}s"
    if plan.spot:
        out["strategy"] = "SPOT"
    elif plan.max_wait:
        out["strategy"] = "FLEX_START"
        out["maxWaitDuration"] = f"{plan.max_wait}s"
        notes.append("scheduling.max_wait uses Vertex AI's FLEX_START strategy (Dynamic Workload Scheduler)")
    if plan.max_restarts == 0:
        out["disableRetries"] = True
    elif plan.max_restarts is not None:
        if job.nodes > 1:
            out["restartJobOnWorkerRestart"] = True
        notes.append(
            f"Vertex AI decides how often to restart a failed replica: scheduling.max_restarts {plan.max_restarts} "
            "allows restarts"
            + (", and restarting one replica restarts every replica (DDP cannot rejoin alone)" if job.nodes > 1 else "")
        )
    return out


def _reduction_server_problems(job: TrainingJob, machines: Mapping[str, _Machine]) -> list[Problem]:
    server = job.reduction_server
    assert server is not None
    problems = []
    if job.parameter_servers:
        problems.append(
            Problem(
                "parameter_servers",
                "Vertex AI runs the reduction server in pool 2, where parameter servers would go",
                "remove `parameter_servers` or `reduction_server`",
            )
        )
    without = [r for r in ("primary", "workers") if r in machines and not machines[r].gpu_count]
    if without:
        which = "primary and workers have no GPUs" if len(without) == 2 else f"{without[0]} has no GPUs"
        pools = job.pools()
        path = next(p.machine_path for p in pools if p.role == without[0]) if len(without) == 1 else "reduction_server"
        problems.append(
            Problem(
                path,
                f"the reduction server speeds up NCCL all-reduce between GPU nodes, and {which}",
                f"give {' and '.join(without)} GPUs (e.g. `machine: A100:8`), or remove `reduction_server`",
            )
        )
    if job.nodes < 2:
        problems.append(
            Problem(
                "reduction_server",
                "the reduction server speeds up all-reduce between nodes, and this job has one node",
                "add `workers.replicas`, or remove `reduction_server`",
            )
        )
    problems += _reducer_machine_problems(server.machine_type)
    sizable = "primary" in machines and (not job.workers.replicas or "workers" in machines)
    if server.replicas == "auto" and sizable and not problems and _reducer_count(job, machines) is None:
        problems.append(_unsized(job, machines))
    return problems


def _reducer_machine_problems(machine_type: str) -> list[Problem]:
    """The reducers' machine type, held to the catalog's rule for the pools' (a Compute Engine name, in its
    case, with nothing around it) and to CPU machines: reducers carry no GPUs."""
    at, fix = "reduction_server.machine_type", "use a CPU machine type such as n1-highcpu-16 (the recommended reducer)"
    if not machine_type:  # the catalog reads no type as "choose one"
        return [Problem(at, "the reducers' machine type is empty", fix)]
    try:
        reducer = catalog.resolve("vertex", machine_type=machine_type, gpu=None, gpu_count=None, path=at)
    except catalog.CatalogError as error:
        return [Problem(at, error.problem.message, fix)]
    if reducer.gpu:
        return [Problem(at, f"{machine_type} carries GPUs; reducers run on CPU machines", fix)]
    return []


def _unsized(job: TrainingJob, machines: Mapping[str, _Machine]) -> Problem:
    server = job.reduction_server
    assert server is not None
    training = [machines[role] for role in ("primary", "workers") if role in machines]
    unknown = [m.machine_type for m in training if egress_gbps(m.machine_type, m.gpu, m.gpu_count) is None]
    if egress_gbps(server.machine_type) is None:
        unknown.append(server.machine_type)
    return Problem(
        "reduction_server.replicas",
        f"crosstrain's bandwidth table has no egress figure for {', '.join(dict.fromkeys(unknown))}, so "
        '"auto" cannot size the reducers',
        "set reduction_server.replicas to a number (reducers x reducer Gbps >= nodes x node Gbps)",
    )


def _reducer_count(job: TrainingJob, machines: Mapping[str, _Machine]) -> tuple[int, str] | None:
    """Reducers so that their total egress matches or exceeds that of pools 0 and 1, and the reasoning."""
    server = job.reduction_server
    assert server is not None
    if server.replicas != "auto":
        return server.replicas, f"reduction server: {server.replicas} x {server.machine_type} as the job asks"
    training = 0
    parts = []
    for role, count in (("primary", 1), ("workers", job.workers.replicas)):
        if not count:
            continue
        m = machines[role]
        gbps = egress_gbps(m.machine_type, m.gpu, m.gpu_count)
        if gbps is None:
            return None
        training += count * gbps
        parts.append(f"{count} x {m.machine_type} at {gbps} Gbps")
    reducer = egress_gbps(server.machine_type)
    if reducer is None:
        return None
    replicas = math.ceil(training / reducer)
    return replicas, (
        f"reduction_server.replicas auto: {' + '.join(parts)} = {training} Gbps; {server.machine_type} gives "
        f"{reducer} Gbps, so {replicas} reducers ({replicas * reducer} Gbps)"
    )


def _creation_order(job: CustomJob) -> tuple[int, int, str]:
    """Earliest first: creation time to the nanosecond, then name (the same order for every submitter)."""
    created = type(job).pb(job).create_time
    return created.seconds, created.nanos, job.name


def _handle(identity: str, name: str, endpoint: str, parent: str, *, adopted: bool) -> JobHandle:
    """The handle of job `name`; `parent` (projects/<id>/locations/<region>) gives the project id the user
    configured, which the name may give as a number."""
    _, project, _, location, _, job_id = name.split("/")
    console = f"https://console.cloud.google.com/vertex-ai/locations/{location}/training/{job_id}?project={project}"
    ref = {"name": name, "endpoint": endpoint, "project": unquote(parent.split("/")[1])}
    return JobHandle("vertex", identity, job_id, console, ref, adopted=adopted)
