"""The plan: each pool's machine or scale tier, the staged code, or every reason the job cannot run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crosstrain import catalog, data, packaging, secrets, sweep
from crosstrain.backends._google import (
    code_refusals,
    label_problems,
    launch_problems,
    node_command,
    region_check,
    staged_object,
)
from crosstrain.backends.aiplatform.settings import (
    _BOOT_DISK_TYPES,
    _NETWORK,
    BOOTSTRAP_PYTHON,
    MIN_MAX_WAIT_SECONDS,
    REGIONS,
    RUNTIMES,
    AIPlatformSettings,
    runtime_pythons,
)
from crosstrain.errors import Problem
from crosstrain.frozen import frozen
from crosstrain.uploads import UploadRefused

if TYPE_CHECKING:
    from crosstrain.spec import PoolView, TrainingJob


@frozen
class _PoolPlan:
    machine: catalog.ResolvedMachine | None  # None: the pool names no machine (the default type)
    image: str | None  # None: a runtime version runs the job's package


@frozen
class Plan:
    pools: dict[str, _PoolPlan]  # by role
    bundle: packaging.Bundle | None  # the code (or function) the job ships
    staged: tuple[str, str] | None  # (bucket, object) it goes to
    python: str | None = None  # the pythonVersion of a job on a runtime version
    notes: tuple[str, ...] = ()  # what the render says besides (a region crosstrain does not know)


def _plan(job: TrainingJob, settings: AIPlatformSettings) -> tuple[Plan | None, list[Problem]]:
    """What the job is on AI Platform Training (each pool's machine and image, where its code goes), or every
    reason it cannot be: the render builds from the plan only. A reduction server is refused by the generic
    capability check, which points to --target vertex."""
    problems = label_problems(job)
    region = region_check(settings.region, REGIONS, "aiplatform", "AI Platform Training")
    if isinstance(region, Problem):
        problems.append(region)
    problems += code_refusals(job, settings.staging_bucket, "aiplatform", "AI Platform Training")
    pools: dict[str, _PoolPlan] = {}
    try:
        packaging.for_job(job)
    except UploadRefused as refused:
        problems.append(refused.problem)
    package_args: dict[str, list[str]] = {}
    tier = scale_tier(job)
    if tier is not None:
        problems += _tier_problems(job, tier)
    for pool in job.pools():
        machine = _resolve(pool, problems)
        problems += launch_problems(job, pool, machine.gpu_count if machine else 0, "AI Platform Training")
        runtime = _runtime_image(job, settings, pool, machine)
        if isinstance(runtime, Problem):
            problems.append(runtime)
        else:
            pools[pool.role] = _PoolPlan(machine, runtime)
        if job.code is not None and pool.command:
            package_args[pool.role] = _package_args(job, pool, machine)
        if pool.env and not pool.command:
            problems.append(
                Problem(
                    "env" if job.env else f"{pool.role}.env",
                    "AI Platform Training has no field for environment variables; crosstrain runs the "
                    "command under `env NAME=VALUE ...`, which needs a command",
                    "set `command`, or bake the variables into the image",
                )
            )
        if pool.boot_disk and pool.boot_disk.type and pool.boot_disk.type not in _BOOT_DISK_TYPES:
            problems.append(
                Problem(
                    f"{pool.role if getattr(job, pool.role).boot_disk else 'primary'}.boot_disk.type",
                    f"AI Platform Training has no boot disk type {pool.boot_disk.type!r}",
                    f"use one of {', '.join(_BOOT_DISK_TYPES)}, or --target vertex",
                )
            )
    if len({tuple(args) for args in package_args.values()}) > 1:
        problems.append(
            Problem(
                "command",
                "AI Platform Training runs one Python module with one argument list on every pool of a "
                "package job, and the pools' commands, arguments or environments differ",
                "give every pool the same command, args and env, or use --target vertex",
            )
        )
    primary = job.pools()[0]
    has_runtime = job.environment is not None or settings.environment is not None
    if settings.runtime_version and (job.code is None or primary.image or has_runtime):
        problems.append(
            Problem(
                "targets.aiplatform.runtime_version",
                "a runtime version runs the job's code as a Python package on no container image, and this job "
                + ("ships no code" if job.code is None else "names an image or environment for the master"),
                "remove runtime_version, or set `code` and remove the master's image and environment",
            )
        )
    python = None
    if settings.runtime_version and job.code is not None and not primary.image and not has_runtime:
        runs = _runtime_python(settings.runtime_version, settings.python_version)
        if isinstance(runs, Problem):
            problems.append(runs)
        else:
            python = runs
    if not primary.image and not has_runtime and not (settings.runtime_version and job.code is not None):
        # The API takes `masterConfig.imageUri`, or a `runtimeVersion` running a Python package.
        problems.append(
            Problem(
                "image",
                "AI Platform Training needs a container image for the master, or a runtime version running "
                "the job's code as a Python package",
                "set `image`, or `environment: pytorch` (a pre-built PyTorch container), or `code` with "
                "targets.aiplatform.runtime_version",
            )
        )
    if job.scheduling.max_restarts is not None:
        problems.append(
            Problem(
                "scheduling.max_restarts",
                "AI Platform Training has no restart setting",
                "remove `scheduling.max_restarts`, or use --target vertex",
            )
        )
    if job.scheduling.max_wait is not None and job.scheduling.max_wait < MIN_MAX_WAIT_SECONDS:
        problems.append(
            Problem(
                "scheduling.max_wait",
                f"AI Platform Training waits at least {MIN_MAX_WAIT_SECONDS}s, not {job.scheduling.max_wait}s",
                'use at least "30m", or remove it to wait without limit',
            )
        )
    network = settings.network or job.network
    if network and not _NETWORK.fullmatch(network):
        problems.append(
            Problem(
                "network" if not settings.network else "targets.aiplatform.network",
                f"{network!r} is not a full network name",
                "write projects/PROJECT_NUMBER/global/networks/NAME",
            )
        )
    job_dir = settings.job_dir or job.output_dir
    if job_dir and not job_dir.startswith("gs://"):
        problems.append(
            Problem(
                "output_dir" if not settings.job_dir else "targets.aiplatform.job_dir",
                f"AI Platform Training's job directory must be in Cloud Storage, not {job_dir!r}",
                "use a gs://bucket/path",
            )
        )
    problems += secrets.needs_command(job, "AI Platform Training") + sweep.needs_bootstrap(job, "AI Platform")
    if problems:
        return None, list(dict.fromkeys(problems))  # pools that inherit the same field report it once
    bundle = packaging.for_job(job)
    staged = staged_object(settings.staging_bucket, bundle.short) if bundle and settings.staging_bucket else None
    return Plan(pools, bundle, staged, python, (region,) if isinstance(region, str) else ()), []


def _runtime_python(runtime_version: str, python_version: str | None) -> str | Problem:
    """The pythonVersion of a job on a runtime version: the setting, else the bootstrap's. Never the runtime's
    default, since runtime versions up to 1.15 run Python 2.7 unless told, where the bootstrap cannot run."""
    pythons = runtime_pythons(runtime_version)
    if pythons is None:
        return Problem(
            "targets.aiplatform.runtime_version",
            f"{runtime_version!r} is not a runtime version",
            "write MAJOR.MINOR, e.g. 2.11 or 1.15",
        )
    offered = " and ".join(pythons)
    needs = (
        f"crosstrain's bootstrap, which runs the job's command on every node (python -m crosstrain_code), needs "
        f"Python {BOOTSTRAP_PYTHON}"
    )
    if python_version is not None and python_version not in pythons:
        return Problem(
            "targets.aiplatform.python_version",
            f"runtime version {runtime_version} runs Python {offered}, not {python_version}",
            f"set python_version: {BOOTSTRAP_PYTHON} on a runtime version from 1.15, or remove it",
        )
    python = python_version or BOOTSTRAP_PYTHON
    if _version(python) < _version(BOOTSTRAP_PYTHON):
        return Problem(
            "targets.aiplatform.python_version",
            f"{needs}, and the job asks for {python}",
            f"set python_version: {BOOTSTRAP_PYTHON}, or remove it",
        )
    if python not in pythons:
        return Problem(
            "targets.aiplatform.runtime_version",
            f"runtime version {runtime_version} runs Python {offered}, and {needs}, which runtime versions 1.15 "
            "and later run",
            "use runtime_version 1.15 (TensorFlow 1.15) or 2.x, or run the code on an image (`image`, or "
            "`environment: pytorch`)",
        )
    return python


def _version(python: str) -> tuple[int, ...]:
    return tuple(int(part) for part in python.split("."))


def scale_tier(job: TrainingJob) -> catalog.ScaleTier | None:
    """The scale tier the job names as the primary's machine (`machine: BASIC_GPU`), if any."""
    machine = job.primary.machine
    return catalog.SCALE_TIERS.get(machine.type) if machine is not None and machine.type else None


def _tier_problems(job: TrainingJob, tier: catalog.ScaleTier) -> list[Problem]:
    """What contradicts a scale tier: GPUs of the job's own, pools the tier does not have or sizes itself, and
    what crosstrain cannot launch on it."""
    name, problems = tier.name, []
    accelerator = job.primary.machine.accelerator if job.primary.machine else None
    if accelerator is not None:
        has = "one GPU of its own" if tier.gpus else "a Cloud TPU" if tier.tpu else "no GPU"
        problems.append(
            Problem(
                "primary.machine.accelerator",
                f"{name} is {tier.description}: it comes with {has}, not {accelerator.count} x {accelerator.type}",
                "remove the accelerator"
                + ("" if tier.gpus else ", use BASIC_GPU for one GPU")
                + ", or name a machine and GPUs (scale tier CUSTOM), e.g. `machine: V100:2`",
            )
        )
    pools = [(p.role, p.replicas) for p in job.pools()[1:]]
    for role, replicas in pools:
        if tier.single or role == "evaluators":
            what = "a single machine" if tier.single else "a master, workers and parameter servers, no evaluators"
            problems.append(
                Problem(
                    f"{role}.replicas",
                    f"{name} is {what}; the job asks for {replicas} {role.replace('_', ' ')}",
                    f"remove `{role}`, or name machines instead of a tier (e.g. `machine: V100:2`)",
                )
            )
        else:
            problems.append(
                Problem(
                    f"{role}.replicas",
                    f"{name} chooses the number of workers and parameter servers itself; the job's {replicas} "
                    f"{role.replace('_', ' ')} contradict it",
                    f"remove `{role}` to let the tier size the cluster, or name machines instead of a tier",
                )
            )
    if (tier.tpu or not tier.single) and job.launch.framework != "tensorflow":
        why = (
            "runs a Cloud TPU, which crosstrain's PyTorch launch does not drive (no torch_xla)"
            if tier.tpu
            else "sizes its cluster at run time as TensorFlow parameter-server training, which a PyTorch launch "
            "cannot be planned for (crosstrain needs the number of nodes)"
        )
        problems.append(
            Problem(
                "primary.machine",
                f"{name} {why}",
                "set launch.framework: tensorflow, or use BASIC or BASIC_GPU, or name machines (`machine: V100:2`)",
            )
        )
    return problems


def _resolve(pool: PoolView, problems: list[Problem]) -> catalog.ResolvedMachine | None:
    """The pool's machine on AI Platform; a problem (with a pointer to Vertex where it has one) if impossible.
    A scale tier (the primary's) resolves to its GPUs and no machine type."""
    machine = pool.machine
    if machine is None:
        return None
    tier = catalog.SCALE_TIERS.get(machine.type or "")
    if tier is not None:
        if pool.machine_path == "primary.machine":  # the primary's, or inherited (then refused as a pool)
            return catalog.ResolvedMachine(None, None, tier.gpus)
        problems.append(
            Problem(
                f"{pool.machine_path}.type",
                f"{tier.name} is a scale tier, the whole cluster's shape, not one pool's machine",
                f"name it as the primary's machine, or give {pool.role} a machine type",
            )
        )
        return None
    accel = machine.accelerator
    kind, count = (accel.type, accel.count) if accel else (None, None)
    try:
        resolved = catalog.resolve(
            "aiplatform", machine_type=machine.type, gpu=kind, gpu_count=count, path=pool.machine_path
        )
    except catalog.CatalogError as error:
        newer = kind is not None and kind in catalog.OFFERS["vertex"] and kind not in catalog.OFFERS["aiplatform"]
        problems.append(_vertex_only(pool, kind) if newer and kind else error.problem)
        return None
    if machine.type and kind is None:
        # A machine type that carries GPUs the legacy enum does not name (a3-highgpu-8g, g2-standard-8).
        on_vertex = _vertex_gpu(machine.type)
        if on_vertex and on_vertex not in catalog.OFFERS["aiplatform"]:
            problems.append(_vertex_only(pool, on_vertex))
            return None
    return resolved


def _vertex_gpu(machine_type: str) -> str | None:
    try:
        return catalog.resolve("vertex", machine_type=machine_type, gpu=None, gpu_count=None).gpu
    except catalog.CatalogError:
        return None


def _vertex_only(pool: PoolView, kind: str) -> Problem:
    return Problem(
        f"{pool.machine_path}.accelerator.type" if pool.machine and pool.machine.accelerator else pool.machine_path,
        f"AI Platform Training has no {kind}: its accelerator enum ends at NVIDIA_TESLA_A100",
        f"use --target vertex (it offers {kind}), or one of {', '.join(catalog.OFFERS['aiplatform'])}",
    )


def _runtime_image(
    job: TrainingJob, settings: AIPlatformSettings, pool: PoolView, machine: catalog.ResolvedMachine | None
) -> str | Problem | None:
    """A pool's image: its own, else the environment setting, else the job's portable environment from
    `RUNTIMES` (GPU or CPU flavour by the pool's machine), else None (a runtime version, or refused)."""
    if pool.image:
        return pool.image
    if settings.environment:
        return settings.environment
    if job.environment is None:
        return None
    return RUNTIMES.pick(job.environment, bool(machine and machine.gpu_count))


def _package_args(job: TrainingJob, pool: PoolView, machine: catalog.ResolvedMachine | None) -> list[str]:
    """The package job's `args`: the bootstrap's, `-- COMMAND ARGS` (the environment through `env`: the API has
    no field for it)."""
    command = node_command(job, pool, machine.gpu_count if machine else 0) or []
    env = {**pool.env, **secrets.reference_env(pool)}  # a secret's reference, never its value
    if env:
        command = ["env", *(f"{k}={v}" for k, v in sorted(env.items())), *command]
    return ["--", *command, *pool.args]


def _replica_config(
    job: TrainingJob,
    pool: PoolView,
    machine: catalog.ResolvedMachine | None,
    *,
    image: str | None = None,
    package: bool = False,
) -> dict[str, Any]:
    """One ReplicaConfig. The image is always explicit, even where the API would default it to the master's.
    In a package job the command is the job's `args` (`_package_args`), not the container's."""
    config: dict[str, Any] = {}
    if image or pool.image:
        config["imageUri"] = image or pool.image
    if machine and machine.accelerator and machine.gpu_count:
        config["acceleratorConfig"] = {"count": str(machine.gpu_count), "type": machine.accelerator}
    command = None if package else node_command(job, pool, machine.gpu_count if machine else 0)
    if command:
        env = {**pool.env, **secrets.reference_env(pool)}  # a secret's reference, never its value
        if env:
            command = ["env", *(f"{k}={v}" for k, v in sorted(env.items())), *command]
        config["containerCommand"] = command
    if pool.args and not package:
        config["containerArgs"] = list(pool.args)
    if pool.boot_disk and (pool.boot_disk.type or pool.boot_disk.size_gb):
        disk: dict[str, Any] = {}
        if pool.boot_disk.type:
            disk["bootDiskType"] = pool.boot_disk.type
        if pool.boot_disk.size_gb:
            disk["bootDiskSizeGb"] = pool.boot_disk.size_gb
        config["diskConfig"] = disk
    return config


def _data_notes(job: TrainingJob) -> list[str]:
    """Cloud Storage data reaches an AI Platform command as its gs:// URI: say so, since Vertex AI mounts it."""
    gs = [f"{d}.{n}" for d, n, loc in data.locations(job) if loc.path and loc.path.startswith("gs://")]
    if not gs:
        return []
    return [
        f"{', '.join(gs)}: the command gets the gs:// URI (AI Platform Training has no Cloud Storage FUSE mount; "
        "read it with a Cloud Storage client such as gcsfs or tf.io.gfile)"
    ]
