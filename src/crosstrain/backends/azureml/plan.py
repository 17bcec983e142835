"""The plan: what a job means on Azure ML, or every reason it cannot run there."""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING, Any

from crosstrain import catalog, data, folders, packaging, secrets, untrusted, uploads
from crosstrain.backends.azureml import sweep as azure_sweep
from crosstrain.backends.azureml.settings import (
    _GUID,
    AML_IGNORE_FILES,
    ANONYMOUS_ENVIRONMENT,
    INPUT_IGNORE_FILES,
    RUNTIMES,
    AzureMLSettings,
    MpiConfiguration,
    PyTorchConfiguration,
    TensorflowConfiguration,
)
from crosstrain.backends.azureml.wire import (
    anonymous_environment_version,
    build_environment_version,
    environment_reference,
    input_uri,
    object_hash,
    workspace_path,
)
from crosstrain.errors import Problem, SpecError
from crosstrain.frozen import frozen
from crosstrain.launch import torchrun_options

if TYPE_CHECKING:
    from crosstrain.spec import TrainingJob


# -- the plan: what the job means on Azure ----------------------------------------------------------------
@frozen
class Build:
    """A Docker build context Azure ML builds the job's environment from (targets.azureml.build)."""

    folder: folders.Folder
    #: azure-ai-ml's object hash of the folder: it names the folder's place in the blob store, and the
    #: environment's version is its digest.
    upload_hash: str
    #: `build.dockerfilePath` as sent: None where the folder's `Dockerfile` is meant (the service's default).
    dockerfile_path: str | None
    version: str


@frozen
class LocalInput:
    """A local file or folder the job reads as an input: uploaded to the workspace's default blob store as
    azure-ai-ml uploads `Input(path=...)`, and passed to the job as the URI of that upload."""

    name: str
    folder: folders.Folder
    #: azure-ai-ml's object hash of it: it names its place in the blob store.
    upload_hash: str
    uri: str


@frozen
class Plan:
    nodes: int
    processes_per_node: int  # what Azure starts on each node
    launcher_processes: int | None  # per-node mode: what crosstrain's launcher starts on each node
    framework: str  # Azure's distribution: pytorch, mpi or tensorflow
    machine: catalog.ResolvedMachine
    command: list[str]
    image: str | None
    env: dict[str, str]
    #: `properties.environmentId`: the named environment, the curated one picked, or the image's anonymous one.
    environment_id: str
    #: The image registered as an anonymous environment first (as azure-ai-ml does); None when one is named.
    registers_image: str | None
    environment_note: str | None
    #: The conda file Azure ML builds on that image, as azure-ai-ml sends it (YAML, keys sorted); None: none.
    conda: str | None = None
    #: The build context Azure ML builds the environment from (its anonymous environment is `environment_id`).
    build: Build | None = None
    #: The local files and folders uploaded as inputs, in the job's order.
    inputs: tuple[LocalInput, ...] = ()


def _plan(job: TrainingJob, settings: AzureMLSettings) -> tuple[Plan | None, list[Problem]]:
    problems: list[Problem] = []
    pool = job.pools()[0]
    machine = catalog.ResolvedMachine(None)
    if pool.machine:
        accel = pool.machine.accelerator
        try:
            machine = catalog.resolve(
                "azureml",
                machine_type=pool.machine.type,
                gpu=accel.type if accel else None,
                gpu_count=accel.count if accel else None,
                path=pool.machine_path,
            )
        except catalog.CatalogError as exc:
            problems.append(exc.problem)
    refused = bool(problems)  # a machine named and refused: "names no machine" would mislead
    nodes, framework = job.nodes, _DISTRIBUTION.get(job.launch.framework, job.launch.framework)
    per_node = job.processes_per_node(machine.gpu_count)
    config = settings.distributed_job_config
    if config is not None:
        nodes, per_node, framework, conflicts = _apply_v1(job, config, machine.gpu_count)
        problems += conflicts
    launcher = None
    if job.launch.mode == "per-node":
        launcher = job.processes_per_node(machine.gpu_count)
        if config is not None and per_node != 1:
            problems.append(
                Problem(
                    "targets.azureml.distributed_job_config",
                    f"launch.mode per-node has Azure start one process per node, but the v1 config asks for "
                    f"{per_node} per node",
                    "omit process_count (or set it to node_count); crosstrain's launcher starts "
                    "launch.processes_per_node (default: the GPUs) on each node",
                )
            )
        per_node = 1
    if framework == "tensorflow":
        if job.launch.mode == "per-node":
            problems.append(
                Problem(
                    "launch.mode",
                    "Azure ML's TensorFlow distribution sets TF_CONFIG for one worker per node; there is no "
                    "per-node launcher for it",
                    "use launch.mode auto",
                )
            )
        if job.launch.processes_per_node not in (None, 1):
            problems.append(
                Problem(
                    "launch.processes_per_node",
                    f"Azure ML's TensorFlow distribution runs one worker per node, not {job.launch.processes_per_node}",
                    "remove launch.processes_per_node; use tf.distribute to drive every GPU of a node",
                )
            )
        per_node = 1
    if machine.gpu_count and per_node > machine.gpu_count:
        problems.append(
            Problem(
                "launch.processes_per_node",
                f"{per_node} processes per node, but {machine.machine_type} has {machine.gpu_count} GPUs",
                f"use at most {machine.gpu_count} processes per node",
            )
        )
    if not settings.compute and not machine.machine_type and not refused:
        problems.append(
            Problem(
                "primary.machine",
                "serverless compute needs a VM size, and the job names no machine",
                "set primary.machine (e.g. `A100:8` or `Standard_ND96asr_v4`), or name a cluster with "
                "targets.azureml.compute",
            )
        )
    if not pool.command:
        problems.append(Problem("command", "an Azure ML command job needs a command", "set `command`"))
    elif launcher is None and per_node > 1 and torchrun_options(pool.command) is not None:
        problems.append(
            Problem(
                "command",
                f"Azure ML starts the {per_node} processes of each node itself ({framework} distribution), and "
                f"the command starts torchrun, which would start its own in each of them: {nodes * per_node} "
                "separate groups instead of one job (Azure's docs: no launcher commands of your own)",
                "use launch.mode: per-node (Azure starts one process per node, and crosstrain's launcher gives your "
                "torchrun the node count, node rank and rendezvous), or drop torchrun from the command",
            )
        )
    if not pool.image and not settings.environment and not job.environment and settings.build is None:
        problems.append(
            Problem(
                "image",
                "Azure ML needs an environment for the job",
                "set `environment: pytorch` (a curated environment), `image`, an environment in "
                "targets.azureml.environment (azureml:<name>:<version> or azureml:<name>@latest), or a folder with a "
                "Dockerfile for Azure ML to build in targets.azureml.build",
            )
        )
    if settings.environment and environment_reference(settings.environment, "") is None:
        problems.append(
            Problem(
                "targets.azureml.environment",
                f"{settings.environment!r} is not an Azure ML environment reference",
                "write azureml:<name>:<version>, azureml:<name>@latest, a registry URI "
                "(azureml://registries/<registry>/environments/<name>/versions/<version>) or an ARM id",
            )
        )
    conda, conda_problems = _conda(job, settings, pool.image)
    problems += conda_problems
    build, build_problems = _build(job, settings)
    problems += build_problems
    local_inputs, input_problems = _local_inputs(job)
    problems += input_problems
    picked: str | Problem | None = None
    if job.environment and not settings.environment:
        picked = RUNTIMES.pick(job.environment, gpu=bool(machine.gpu_count) or not machine.machine_type)
        if isinstance(picked, Problem):
            problems.append(picked)
    if job.requirements is not None and job.code is None:
        problems.append(
            Problem(
                "requirements",
                "on Azure ML the requirements are installed by the code bundle's bootstrap, and the job ships no code",
                "set `code:` (the folder with the training code), or build an environment with the packages",
            )
        )
    if job.scheduling.spot and settings.job_tier not in (None, "spot"):
        problems.append(
            Problem(
                "targets.azureml.job_tier",
                f"scheduling.spot asks for spot capacity, but job_tier is {settings.job_tier}",
                "drop one of the two",
            )
        )
    problems += _unexpressible(job) + azure_sweep.refusals(job)
    if problems or not pool.command:
        return None, problems
    workspace = workspace_path(settings)
    named = environment_reference(settings.environment, workspace) if settings.environment else None
    registers_image = None
    if named is not None:
        environment_id, note = named, None
        if pool.image:
            note = f"image {pool.image} is not used: targets.azureml.environment names the environment"
    elif build is not None:
        environment_id = f"{workspace}/environments/{ANONYMOUS_ENVIRONMENT}/versions/{build.version}"
        note = f"Azure ML builds the environment from {build.folder.describe()} once per content"
    elif isinstance(picked, str):
        environment_id = picked
        note = f"environment {job.environment} is Azure ML's curated {picked} (the service resolves @latest)"
    elif pool.image:
        version = anonymous_environment_version(pool.image, conda)
        environment_id = f"{workspace}/environments/{ANONYMOUS_ENVIRONMENT}/versions/{version}"
        registers_image, note = pool.image, None
    else:
        return None, problems  # refused above: no environment, no image
    plan = Plan(
        nodes=nodes,
        processes_per_node=per_node,
        launcher_processes=launcher,
        framework=framework,
        machine=machine,
        command=[*pool.command, *pool.args],
        image=pool.image,
        env={
            **pool.env,
            **secrets.reference_env(pool),
        },  # a secret's reference, never its value
        environment_id=environment_id,
        registers_image=registers_image,
        environment_note=note,
        conda=conda,
        build=build,
        inputs=local_inputs,
    )
    return plan, []


#: The distribution Azure ML starts a framework's job with: DeepSpeed as Azure's own DeepSpeed example does
#: (PyTorch, a process per GPU; DeepSpeed reads the variables it sets), Horovod as an MPI job (Azure's docs).
_DISTRIBUTION = {"deepspeed": "pytorch", "horovod": "mpi"}
#: The distributions a v1 config may choose for each framework (DeepSpeed also reads MPI's variables on Azure ML).
_RUNS_UNDER = {
    "pytorch": {"pytorch"},
    "mpi": {"mpi"},
    "tensorflow": {"tensorflow"},
    "deepspeed": {"pytorch", "mpi"},
    "horovod": {"mpi"},
}


def _apply_v1(
    job: TrainingJob,
    config: PyTorchConfiguration | MpiConfiguration | TensorflowConfiguration,
    gpus: int,
) -> tuple[int, int, str, list[Problem]]:
    """Nodes, processes Azure starts per node, and framework from a v1 config; conflicts with the spec."""
    path = "targets.azureml.distributed_job_config"
    problems: list[Problem] = []
    if isinstance(config, PyTorchConfiguration):
        nodes, framework = config.node_count, "pytorch"
        total = config.process_count or config.node_count
        if total % nodes:
            problems.append(
                Problem(
                    f"{path}.process_count",
                    f"{total} processes cannot be spread evenly over {nodes} nodes (process_count is the total)",
                    f"use a multiple of {nodes}, e.g. {nodes * max(gpus, 1)}",
                )
            )
        per_node = max(total // nodes, 1)
    elif isinstance(config, MpiConfiguration):
        nodes, per_node, framework = (
            config.node_count,
            config.process_count_per_node,
            "mpi",
        )
    else:
        nodes, per_node, framework = config.worker_count, 1, "tensorflow"
    if "workers" in job.model_fields_set and job.nodes != nodes:
        problems.append(
            Problem(
                path,
                f"the v1 config asks for {nodes} nodes, but the spec has {job.nodes} (primary + workers.replicas)",
                f"set workers.replicas: {nodes - 1}, or remove it and let the v1 config decide",
            )
        )
    explicit = job.launch.processes_per_node
    if explicit is not None and job.launch.mode != "per-node" and explicit != per_node:
        problems.append(
            Problem(
                path,
                f"the v1 config means {per_node} processes per node, but launch.processes_per_node is {explicit}",
                "remove one of the two",
            )
        )
    if "framework" in job.launch.model_fields_set and framework not in _RUNS_UNDER[job.launch.framework]:
        problems.append(
            Problem(
                path,
                f"{config.type} is a {framework} distribution, but launch.framework is {job.launch.framework}",
                "remove one of the two",
            )
        )
    return nodes, per_node, framework, problems


def _unexpressible(job: TrainingJob) -> list[Problem]:
    """Spec features a command job has no field for: refused, never dropped."""
    problems = []
    if job.scheduling.max_wait is not None:
        problems.append(
            Problem(
                "scheduling.max_wait",
                "Azure ML command jobs have no queueing deadline",
                "remove it",
            )
        )
    if job.scheduling.max_restarts is not None:
        problems.append(
            Problem(
                "scheduling.max_restarts",
                "Azure ML command jobs have no restart count",
                "remove it, and resume from checkpoints in the training code",
            )
        )
    for pool in job.pools():
        if pool.boot_disk is not None:
            problems.append(
                Problem(
                    f"{pool.role}.boot_disk",
                    "Azure ML sizes the disk by the VM size; a job cannot choose it",
                    "remove boot_disk",
                )
            )
            break
    if job.network is not None:
        problems.append(
            Problem(
                "network",
                "an Azure ML job joins the virtual network of its compute or workspace, not one of its own",
                "remove `network`; put the compute cluster (or the workspace's managed network) in the VNet",
            )
        )
    if job.output_dir is not None:
        problems.append(
            Problem(
                "output_dir",
                "Azure ML writes a job's outputs to named outputs that the command references; a job has no "
                "output folder of its own",
                "replace output_dir with `outputs: {NAME: azureml://datastores/...}` and pass ${outputs.NAME} in "
                "the command",
            )
        )
    if job.identity is not None and _identity(job.identity) is None:
        problems.append(
            Problem(
                "identity",
                f"{job.identity!r} is not an Azure ML job identity",
                "use `managed` (the compute's managed identity), a user-assigned identity's client id (a GUID), "
                "`aml_token`, or `user_identity` (the job runs as its submitter; submit sends their token)",
            )
        )
    return problems


def _identity(value: str) -> dict[str, str] | None:
    if value.lower() == "managed":
        return {"identityType": "Managed"}
    if _GUID.fullmatch(value):
        return {"identityType": "Managed", "clientId": value}
    if value.lower() in ("aml_token", "amltoken"):
        return {"identityType": "AMLToken"}
    if value.lower() in ("user_identity", "useridentity"):  # the CLI YAML's `type: user_identity`, REST's name
        return {"identityType": "UserIdentity"}
    return None


def _distribution(plan: Plan) -> dict[str, Any]:
    if plan.framework == "tensorflow":
        return {
            "distributionType": "TensorFlow",
            "workerCount": plan.nodes,
            "parameterServerCount": 0,
        }
    kind = "Mpi" if plan.framework == "mpi" else "PyTorch"
    return {
        "distributionType": kind,
        "processCountPerInstance": plan.processes_per_node,
    }


#: The largest conda file read (Azure ML keeps it in the environment's definition).
_CONDA_LIMIT = uploads.SizeLimit(1 << 20, "a conda file is sent inline in the environment's definition", "trim it")


def _conda(job: TrainingJob, settings: AzureMLSettings, image: str | None) -> tuple[str | None, list[Problem]]:
    """targets.azureml.conda_file as azure-ai-ml sends it (loaded, then dumped with sorted keys), read under the
    job's folder; refused where there is no image to build it on, or an environment is named instead."""
    if settings.conda_file is None or settings.build is not None:  # with a build context: refused by `_build`
        return None, []
    field = "targets.azureml.conda_file"
    if settings.environment or job.environment or not image:
        return None, [
            Problem(
                field,
                "Azure ML builds a conda file on the job's image, and "
                + ("an environment is named instead" if settings.environment or job.environment else "it has none"),
                "set `image` (the base image) and drop `environment` and targets.azureml.environment",
            )
        ]
    try:
        data = uploads.read_file(settings.conda_file, job.base_dir, field, _CONDA_LIMIT)
        loaded = untrusted.parse_yaml(untrusted.decode(data, settings.conda_file, untrusted.JOB), untrusted.JOB, field)
    except (uploads.UploadRefused, SpecError) as refused:
        return None, list(refused.problems)
    if not isinstance(loaded, dict):
        return None, [Problem(field, f"{settings.conda_file} is not a conda environment (a mapping)", "fix the file")]
    import yaml  # the conda file's form is PyYAML's dump, as the SDK's

    return yaml.dump(loaded, sort_keys=True), []


#: A build context is read as code is, within the same bounds (`packaging.Limits`).
_BUILD_LIMITS = packaging.Limits(
    description="crosstrain uploads at most 2 GiB as a build context",
    fix="leave data, checkpoints and environments out of the folder (list them in its .amlignore): the image needs "
    "only what its Dockerfile copies",
)


def _build(job: TrainingJob, settings: AzureMLSettings) -> tuple[Build | None, list[Problem]]:
    """targets.azureml.build: the folder read as it will be uploaded, and refused where the job names an
    environment of its own or the folder holds no Dockerfile."""
    build = settings.build
    if build is None:
        return None, []
    field = "targets.azureml.build"
    named = [
        what
        for what, present in (
            ("`image`", any(pool.image for pool in job.pools())),
            ("`environment`", bool(job.environment)),
            ("targets.azureml.environment", bool(settings.environment)),
            ("targets.azureml.conda_file", bool(settings.conda_file)),
        )
        if present
    ]
    if named:
        return None, [
            Problem(
                field,
                f"Azure ML builds the job's environment from the build context, whose Dockerfile names the base "
                f"image (FROM), and the job names {' and '.join(named)} too: an Azure ML environment is an image "
                "(with a conda file) or a build context, never both, so the two would disagree on what the job runs in",
                f"remove {' and '.join(named)} and write what it adds into the Dockerfile (`FROM <image>`, "
                "`RUN conda env update -f conda.yml`), or remove targets.azureml.build",
            )
        ]
    try:
        folder = folders.folder(
            build.path,
            job.base_dir,
            field=f"{field}.path",
            noun="build context",
            ignore_files=AML_IGNORE_FILES,
            limits=_BUILD_LIMITS,
            job_file=job.job_file,
        )
    except uploads.UploadRefused as refused:
        return None, list(refused.problems)
    dockerfile = build.dockerfile_path or "Dockerfile"
    at = f"{field}.dockerfile_path" if build.dockerfile_path else f"{field}.path"
    normal = posixpath.normpath(dockerfile)
    if dockerfile.startswith("/") or "\\" in dockerfile or normal == ".." or normal.startswith("../"):
        return None, [
            Problem(
                at,
                f"{dockerfile} is not a path under the build context {folder.folder}; Azure ML reads the Dockerfile "
                "from the uploaded folder",
                "name the Dockerfile by its path under the folder, with '/' (e.g. docker/Dockerfile)",
            )
        ]
    if normal not in {f.path for f in folder.files}:
        return None, [
            Problem(
                at,
                f"{folder.folder} holds no {dockerfile} to upload (or an ignore file leaves it out); Azure ML "
                "builds the image from it",
                "add the Dockerfile to the folder"
                + ("" if build.dockerfile_path else ", or name it with targets.azureml.build.dockerfile_path"),
            )
        ]
    upload_hash = object_hash(folder)
    return Build(
        folder, upload_hash, build.dockerfile_path, build_environment_version(upload_hash, build.dockerfile_path)
    ), []


#: A local input is read as code is, within the same bounds (`packaging.Limits`): it is hashed here and uploaded
#: at every submit whose content is new.
_INPUT_LIMITS = packaging.Limits(
    description="crosstrain uploads at most 2 GiB as a local input",
    fix="register larger data once (az ml data create --path ...) and name it azureml:NAME:VERSION, or leave files "
    "out with the folder's .amlignore",
)


def _local_inputs(job: TrainingJob) -> tuple[tuple[LocalInput, ...], list[Problem]]:
    """The job's local inputs, each read as it will be uploaded (`folders.local_data`: under the job file's folder
    unless it says `outside_job_folder`, its own ignore files) and held to its type: a `folder` input names a
    folder, a `file` input a file, a model either. A local table is refused by `wire.data_problem`."""
    found: list[LocalInput] = []
    problems: list[Problem] = []
    for name, location in job.inputs.items():
        if location.path is None or data.kind(location) != "local" or location.type == "table":
            continue
        field = f"inputs.{name}.path"
        try:
            folder = folders.local_data(
                location.path,
                job.base_dir,
                field=field,
                noun="input",
                ignore_files=INPUT_IGNORE_FILES,
                limits=_INPUT_LIMITS,
                job_file=job.job_file,
                outside=location.outside_job_folder,
                outside_fix=f"name it as outside the job folder: {{path: {location.path}, outside_job_folder: true}}",
            )
        except uploads.UploadRefused as refused:
            problems += refused.problems
            continue
        if location.type == "folder" and folder.is_file:
            problems.append(
                Problem(
                    field,
                    f"{folder.folder} is a file, and the input's type is folder (uri_folder)",
                    "use type: file, or name the folder that holds it",
                )
            )
        elif location.type == "file" and not folder.is_file:
            problems.append(
                Problem(
                    f"{field}",
                    f"{folder.folder} is a folder, and the input's type is file (uri_file)",
                    "use type: folder, or name a file",
                )
            )
        else:
            upload_hash = object_hash(folder)
            found.append(LocalInput(name, folder, upload_hash, input_uri(folder, upload_hash, location.type)))
    return tuple(found), problems
