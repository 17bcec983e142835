"""`databricks`: one-time runs (`POST /api/2.2/jobs/runs/submit`) that call TorchDistributor on a GPU cluster.

The run has one `spark_python_task` on a `new_cluster`. Its file is crosstrain's launcher
(`crosstrain/databricks_task.py`, uploaded as `crosstrain_task.py`), which unpacks the job's code bundle, calls
`TorchDistributor(num_processes, local_mode, use_gpu).run(...)` on the training file or module and fails the
task when any rank failed, which TorchDistributor alone never does. Nothing comes from PyPI but the job's
`requirements` (task `libraries`); `environment: pytorch[:X.Y]` picks a Databricks Runtime ML (`RUNTIMES`).

Mapping (facts and sources: ../shared/reference/databricks.md):

* every training node (primary + workers) is a Spark executor: `num_workers = nodes`, one GPU per Spark task
  (`spark.task.resource.gpu.amount = 1`; more hangs the rendezvous on pyspark <= 4.1) and
  `num_processes = nodes x GPUs per node`. The driver only coordinates, on a small GPU type (the driver of a
  GPU cluster must be a GPU type too). A one-node job runs on a single-node cluster in local mode.
* the workspace's cloud picks the catalog rows (`databricks-aws`, `-azure`, `-gcp`); it is read from the host
  name unless set.
* a secret `env: {NAME: {secret: scope/key}}` becomes `{{secrets/scope/key}}` in `spark_env_vars`, which the
  cluster resolves at start (the cluster owner needs READ on the scope); other stores are refused.
* an image becomes `docker_image` (Databricks Container Services). Container Services does not run ML
  runtimes, so the runtime becomes the standard one of the same version, and the image must carry torch,
  CUDA and NCCL.
* every run uploads a bundle (`crosstrain.packaging`: the `code:` folder and crosstrain's runtime, or the
  runtime alone) as one archive to `<workspace_dir>/code/<sha>/` (workspace import, at most 10 MB of base64)
  or `<volume>/code/<sha>/` (Files API), and the launcher beside it in the workspace; each upload is checked
  at its content-addressed path first and skipped when there, so a re-submit uploads nothing. The launcher
  ships `train_on_rank` to the Spark workers by value: they unpack the archive themselves, from the FUSE
  path every node sees (../docs/databricks.md, "How the code reaches the cluster").
* without `code:`, a training file on this machine is uploaded on its own (`workspace/mkdirs` +
  `workspace/import`, in the rendered request) under `<workspace_dir>/<identity>/<sha of the file>/`, so an
  upload never overwrites the file of another request's run; a path already on the cluster is used as is.
  Only a regular file under the job file's folder is read, never through a symlink that leaves it, and at
  most the import's size limit (`crosstrain.uploads`).
* the identity is the `idempotency_token` (Databricks starts exactly one run per token and returns that run
  for a repeated one), and the request's fingerprint is the cluster tag `crosstrain_fingerprint`: after
  `runs/submit`, submit reads the run back and refuses (`IdentityConflict`) a run made from another request.
* a handle or a request from a file is sent only to the workspace this machine configures (`--set host`,
  `DATABRICKS_HOST`, else the host of the `~/.databrickscfg` profile), checked before any credential is loaded.
"""

from __future__ import annotations

import base64
import configparser
import dataclasses
import hashlib
import io
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import parse_qs, quote, unquote, urlparse

from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError

from crosstrain import catalog, data, packaging, secrets, uploads
from crosstrain.backends.base import (
    FINGERPRINT_WHY,
    IDENTITY_WHY,
    NODES_WHY,
    Backend,
    Capabilities,
    HttpCall,
    Ids,
    JobHandle,
    JobState,
    JobStatus,
    JobSummary,
    Request,
    origin_of,
    shown,
)
from crosstrain.databricks_task import LAUNCHER_NAME, DistributorCall
from crosstrain.environments import Runtime, Runtimes
from crosstrain.errors import CrosstrainError, Problem, SpecError, SubmitError, Unsupported
from crosstrain.failures import last_lines, summary
from crosstrain.settings import TargetSettings, redact, resolve_settings, setting, url_credentials
from crosstrain.spec import PoolView, TrainingJob

if TYPE_CHECKING:
    from databricks.sdk import WorkspaceClient
    from databricks.sdk.service.jobs import Run

T = TypeVar("T")

Cloud = Literal["aws", "azure", "gcp"]

#: `life_cycle_state` -> common state, for runs that have not ended.
STATE_MAP: Mapping[str, JobState] = {
    "QUEUED": JobState.QUEUED,
    "PENDING": JobState.QUEUED,
    "BLOCKED": JobState.QUEUED,
    "WAITING_FOR_RETRY": JobState.QUEUED,
    "RUNNING": JobState.RUNNING,
    "TERMINATING": JobState.RUNNING,
    "INTERNAL_ERROR": JobState.FAILED,
}
#: A run that ended (TERMINATED or SKIPPED) succeeded only with this `result_state`; CANCELED is cancelled,
#: everything else (FAILED, TIMEDOUT, SUCCESS_WITH_FAILURES, UPSTREAM_*, ...) is a failure.
SUCCESS, CANCELED = "SUCCESS", "CANCELED"
#: The cluster tag that carries the request's fingerprint (next to `crosstrain_job`, the identity).
FINGERPRINT_TAG = "crosstrain_fingerprint"

#: Where a cluster without a volume delivers its logs (`cluster_log_conf.dbfs`), one folder per identity.
DBFS_LOG_ROOT = "dbfs:/crosstrain/logs"

#: A small GPU driver per cloud, for when the job's GPU kind has no one-GPU machine (the driver does not train).
_SMALL_GPU = {"aws": "T4", "azure": "T4", "gcp": "L4"}
_HOST_CLOUDS = (
    (".azuredatabricks.net", "azure"),
    (".gcp.databricks.com", "gcp"),
    (".cloud.databricks.com", "aws"),
)
#: Paths every node of a cluster sees; a training file there is not uploaded.
_CLUSTER_PATHS = ("/Workspace/", "/Volumes/", "/dbfs/")
_PYTHON = re.compile(r"python(3(\.\d+)?)?")
_NOTEBOOK_HEADER = b"# Databricks notebook source"
#: `POST /api/2.0/workspace/import` takes at most 10 MB of base64 `content`; more fails with
#: MAX_NOTEBOOK_SIZE_EXCEEDED (https://docs.databricks.com/api/workspace/workspace/import, and the SDK's
#: `ImportResponse.content` docstring). Read as 10,000,000 characters, the smaller meaning of "MB".
IMPORT_LIMIT = uploads.SizeLimit.base64(
    10_000_000,
    "the Databricks workspace import takes at most 10 MB of base64 content (MAX_NOTEBOOK_SIZE_EXCEEDED)",
    "put the file on a volume and name it in `command` (python /Volumes/<catalog>/<schema>/<volume>/train.py), "
    "or make it smaller",
)
#: The fix for a code archive over the workspace import's limit: a volume takes up to 5 GiB in one PUT.
VOLUME_FIX = (
    "use a Unity Catalog volume: targets.databricks.volume: /Volumes/<catalog>/<schema>/<volume> (or leave "
    "data and checkpoints out of the folder with .crosstrainignore)"
)
#: Without a volume, a code folder over this is refused before it is compressed (its archive, which must
#: fit IMPORT_LIMIT, is checked exactly once made).
WORKSPACE_CODE_LIMITS = packaging.Limits(
    max_bytes=100 * 1024**2,
    description="the Databricks workspace import takes at most 10 MB of base64 content, so crosstrain does not "
    "compress more than 100 MiB for it",
    fix=VOLUME_FIX,
)
#: The cluster runtime without `environment:` or `spark_version`: the newest LTS GPU ML runtime.
DEFAULT_SPARK_VERSION = "17.3.x-gpu-ml-scala2.13"
_NOTES = "https://docs.databricks.com/aws/en/release-notes/runtime"
#: `environment: pytorch[:X.Y]` -> a Databricks Runtime ML (GPU; CPU flavour for completeness), newest first.
#: The runtime names are in ../shared/reference/databricks.md §3.1 (GPU ML runtimes, verified against the
#: docs). The torch version each one ships is from its "Python libraries on GPU clusters" table
#: (the source URL); no copy of those tables was in reach when this was written, so every torch version
#: below is UNVERIFIED: check the release note before relying on `pytorch:X.Y`.
RUNTIMES = Runtimes(
    "Databricks",
    (
        Runtime("2.7", "17.3.x-gpu-ml-scala2.13", "17.3.x-cpu-ml-scala2.13", f"{_NOTES}/17.3lts-ml"),  # unverified
        Runtime("2.6", "16.4.x-gpu-ml-scala2.12", "16.4.x-cpu-ml-scala2.12", f"{_NOTES}/16.4lts-ml"),  # unverified
        Runtime("2.3", "15.4.x-gpu-ml-scala2.12", "15.4.x-cpu-ml-scala2.12", f"{_NOTES}/15.4lts-ml"),  # unverified
        Runtime("2.1", "14.3.x-gpu-ml-scala2.12", "14.3.x-cpu-ml-scala2.12", f"{_NOTES}/14.3lts-ml"),  # unverified
    ),
    "targets.databricks.spark_version",
)
_VOLUME = re.compile(r"/Volumes/[^/]+/[^/]+/[^/]+(/.*)?")


class DatabricksSettings(TargetSettings):
    host: str = setting(
        description="Workspace URL, e.g. https://dbc-1234.cloud.databricks.com.", env=("DATABRICKS_HOST",)
    )
    profile: str | None = setting(
        None,
        description="~/.databrickscfg profile for authentication (DATABRICKS_TOKEN and the other unified-auth "
        "variables are read by the Databricks SDK itself).",
        env=("DATABRICKS_CONFIG_PROFILE",),
    )
    cloud: Cloud | None = setting(
        None,
        description="The workspace's cloud, which picks node types from the catalog; read from the host "
        "(*.cloud.databricks.com, *.azuredatabricks.net, *.gcp.databricks.com) when unset.",
    )
    spark_version: str | None = setting(
        None,
        description="The cluster's runtime, named directly (e.g. 16.4.x-gpu-ml-scala2.12). Default: the job's "
        f"`environment` from crosstrain's table, else {DEFAULT_SPARK_VERSION} (17.3 LTS ML). With an image the "
        "standard runtime of the same version is used, since Container Services does not run ML runtimes.",
    )
    driver_node_type_id: str | None = setting(
        None,
        description="Driver node type of multi-node clusters (it coordinates, it does not train; it must have "
        "a GPU). Default: a one-GPU machine of the job's GPU kind, else a small T4 (AWS, Azure) or L4 (GCP).",
    )
    libraries: list[str] = Field(
        default_factory=list,
        description="More PyPI requirements or wheel paths the training code needs on the cluster.",
    )
    workspace_dir: str = setting(
        "/Workspace/Shared/crosstrain",
        description="Workspace folder that submit uploads to: the code archive and crosstrain's launcher under "
        "code/<sha of the bundle>/, a lone local training file under <identity>/<sha of the file>/.",
    )
    volume: str | None = setting(
        None,
        description="A Unity Catalog volume folder (/Volumes/<catalog>/<schema>/<volume>[/folder]) for the code "
        "archive, under code/<sha of the bundle>/: for archives over the workspace import's 10 MB.",
    )

    @field_validator("volume")
    @classmethod
    def _volume(cls, value: str | None) -> str | None:
        if value is None:
            return None
        folder = value.rstrip("/")
        if not _VOLUME.fullmatch(folder):
            raise PydanticCustomError(
                "crosstrain",
                f"{value!r} is not a Unity Catalog volume folder",
                {"fix": "use /Volumes/<catalog>/<schema>/<volume>, optionally with a folder under it"},
            )
        try:
            return uploads.check_destination(folder, "volume", absolute=True)
        except uploads.UploadRefused as refused:
            problem = refused.problem
            raise PydanticCustomError("crosstrain", problem.message.replace("{", "{{"), {"fix": problem.fix}) from None

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        url = urlparse(value if "://" in value else f"https://{value}")
        if url.scheme not in ("http", "https") or not url.hostname or url.path not in ("", "/"):
            raise ValueError(
                f"{redact(value)!r} is not a workspace URL; use one such as https://dbc-1234.cloud.databricks.com"
            )
        return f"{url.scheme}://{url.netloc}"

    @field_validator("workspace_dir")
    @classmethod
    def _workspace_dir(cls, value: str) -> str:
        folder = value.rstrip("/")
        if not folder.startswith("/Workspace/"):
            raise PydanticCustomError(
                "crosstrain", f"{value!r} is not a workspace folder", {"fix": "use a folder under /Workspace/"}
            )
        try:
            return uploads.check_destination(folder, "workspace_dir", absolute=True)
        except uploads.UploadRefused as refused:
            problem = refused.problem
            raise PydanticCustomError("crosstrain", problem.message.replace("{", "{{"), {"fix": problem.fix}) from None

    def resolved_cloud(self) -> Cloud | None:
        if self.cloud:
            return self.cloud
        host = urlparse(self.host).hostname or ""
        for suffix, cloud in _HOST_CLOUDS:
            if host.endswith(suffix):
                return cloud  # type: ignore[return-value]
        return None


def _library(spec: str) -> dict[str, Any]:
    """A cluster library from a PyPI requirement or a wheel path."""
    if spec.endswith(".whl"):
        return {"whl": spec}
    return {"pypi": {"package": spec}}


class _Plan:
    """What render derives from the job before writing the body: the cluster shape and the training target."""

    def __init__(self, job: TrainingJob, settings: DatabricksSettings) -> None:
        self.problems: list[Problem] = []
        self.cloud = settings.resolved_cloud()
        self.pool = job.pools()[0]
        self.local_file: Path | None = None
        self.local_data = b""
        self.call: DistributorCall | None = None
        self.bundle: packaging.Bundle | None = None
        self.archive_size: int | None = None
        self.libraries: list[dict[str, Any]] = []
        self.spark_version = settings.spark_version or DEFAULT_SPARK_VERSION
        self._code(job, settings)
        if job.environment is not None and settings.spark_version is None:
            picked = RUNTIMES.pick(job.environment, gpu=True)
            if isinstance(picked, Problem):
                self.problems.append(picked)
            else:
                self.spark_version = picked
        if self.cloud is None:
            self.problems.append(
                Problem(
                    "targets.databricks.cloud",
                    f"cannot tell the cloud of {settings.host}",
                    "set `cloud` to aws, azure or gcp",
                )
            )
            return
        self.platform = f"databricks-{self.cloud}"
        machine = self.pool.machine
        accel = machine.accelerator if machine else None
        try:
            self.machine = catalog.resolve(
                self.platform,
                machine_type=machine.type if machine else None,
                gpu=accel.type if accel else None,
                gpu_count=accel.count if accel else None,
                path=self.pool.machine_path,
            )
        except catalog.CatalogError as exc:
            self.problems.append(exc.problem)
            return
        if not self.machine.machine_type or not self.machine.gpu_count:
            self.problems.append(
                Problem(
                    self.pool.machine_path,
                    "the databricks target runs TorchDistributor on GPU clusters, and this machine has no "
                    "GPU crosstrain knows of",
                    "give GPUs, e.g. `machine: A10G:4`, or a machine type with its accelerator",
                )
            )
            return
        gpus = self.machine.gpu_count
        wanted = job.launch.processes_per_node
        if wanted is not None and wanted != gpus:
            self.problems.append(
                Problem(
                    "launch.processes_per_node",
                    f"TorchDistributor starts one process per GPU ({gpus} per node), not {wanted}",
                    "remove `launch.processes_per_node`",
                )
            )
        self.nodes = job.nodes
        self.single_node = job.nodes == 1
        self._target(job)

    def _code(self, job: TrainingJob, settings: DatabricksSettings) -> None:
        """The bundle every run uploads (the job's folder and crosstrain's runtime, or the runtime alone), and
        the job's requirements as cluster libraries."""
        try:
            if job.code is not None or job.function_payload is not None:  # a folder, or a notebook's function
                limits = packaging.Limits() if settings.volume else WORKSPACE_CODE_LIMITS
                self.bundle = packaging.for_job(job, limits=limits)
            else:
                self.bundle = runtime_bundle()
            requirements = packaging.requirements_of(job)
        except uploads.UploadRefused as refused:
            self.problems.append(refused.problem)
            return
        for line in requirements:
            if line.startswith("-") or (os.sep in line and "://" not in line and "@" not in line):
                self.problems.append(
                    Problem(
                        "requirements",
                        f"{line!r} is not a package requirement; Databricks installs each one as a PyPI library",
                        "list packages (torchmetrics==1.4.0); put a local package in the `code` folder",
                    )
                )
            else:
                self.libraries.append({"pypi": {"package": line}})
        assert self.bundle is not None
        if settings.volume is None:
            self.archive_size = len(archive_of(self.bundle))
            if self.archive_size > IMPORT_LIMIT.max_bytes:
                self.problems.append(
                    Problem(
                        "code",
                        f"the code archive of {self.bundle.folder} is {self.archive_size:,} bytes, over the "
                        f"{IMPORT_LIMIT.max_bytes:,} that fit in {IMPORT_LIMIT.description}",
                        VOLUME_FIX,
                    )
                )

    def _target(self, job: TrainingJob) -> None:
        command = [*(self.pool.command or []), *self.pool.args]
        fix = "write `command: python train.py` (a script) or `command: python -m package.train` (a module)"
        if not command:
            self.problems.append(Problem("command", "the job has no command", fix))
            return
        kind: Literal["file", "module", "shell"]
        rest = command[1:] if _PYTHON.fullmatch(os.path.basename(command[0])) else command
        if self.pool.shell_line is not None:  # every rank runs the line with bash, in the code folder
            kind, target, args = "shell", self.pool.shell_line, []
        elif rest[:1] == ["-m"] and len(rest) > 1:
            kind, target, args = "module", rest[1], rest[2:]
        elif rest and rest[0].endswith(".py"):
            kind, target, args = "file", rest[0], rest[1:]
            target = self._file(target, job)
        else:
            self.problems.append(
                Problem(
                    "command",
                    f"TorchDistributor runs a Python file or module itself, not `{' '.join(command)}`",
                    fix,
                )
            )
            return
        if target:
            num = self.machine.gpu_count * (1 if self.single_node else self.nodes)
            # Single node: GPU scheduling is off on single-node clusters and local GPU mode needs it, so the
            # processes keep every GPU visible and pick cuda:LOCAL_RANK themselves.
            self.call = DistributorCall(num, self.single_node, not self.single_node, kind, target, tuple(args))

    def _file(self, target: str, job: TrainingJob) -> str:
        if target.startswith("dbfs:/"):
            return "/dbfs/" + target.removeprefix("dbfs:/").lstrip("/")
        if target.startswith(_CLUSTER_PATHS):
            return target
        if job.code is not None:  # the command runs in the shipped folder: the file must be in it
            if self.bundle is not None and not os.path.isabs(target):
                inside = f"{packaging.PACKAGE}/{packaging.SOURCE_DIR}/{os.path.normpath(target)}"
                if not any(f.path == inside for f in self.bundle.user_files):
                    self.problems.append(
                        Problem(
                            "command",
                            f"{target} is not in the code folder {self.bundle.folder} (or its ignore file leaves "
                            "it out); the command runs in that folder",
                            "name the file by its path under the code folder",
                        )
                    )
            return target
        root = job.base_dir  # the job file's folder, wherever crosstrain runs from
        in_image = bool(job.image) and os.path.isabs(target)
        if os.path.lexists(root / target) and not (in_image and not _under(root, target)):
            try:  # a file (or a link) here: read only if it stays under the job's folder, and not too big
                data = uploads.read_file(target, root, "command", IMPORT_LIMIT)
            except uploads.UploadRefused as refused:
                self.problems.append(refused.problem)
                return ""
            if data.startswith(_NOTEBOOK_HEADER):
                self.problems.append(
                    Problem(
                        "command",
                        f"{target} is a Databricks notebook export; workspace import would make it a notebook",
                        "remove its '# Databricks notebook source' header",
                    )
                )
            self.local_file, self.local_data = Path(target), data
            return target  # replaced by the upload path once the identity is known
        if in_image:
            return target  # a script inside the image (a local path outside the job's folder is never read)
        self.problems.append(
            Problem(
                "command",
                f"{target} is neither a file here nor a path on the cluster",
                f"put it under the job file's folder {root} (submit uploads it), ship its folder with `code:`, "
                "or give a path under /Workspace/, /Volumes/ or /dbfs/, or an absolute path inside the image",
            )
        )
        return ""


class DatabricksBackend(Backend[DatabricksSettings]):
    """Databricks one-time runs that call TorchDistributor. Example: `crosstrain submit job.yaml -t databricks`."""

    name = "databricks"
    title = "Databricks (one-time runs, TorchDistributor)"
    extra = "databricks"
    settings_model = DatabricksSettings
    handle_ref = {"host": str, "run_id": int}  # what status, cancel and logs read
    capabilities = Capabilities(
        spot=True,
        logs=True,
        dedupes_create=True,
        launch_modes=frozenset({"auto", "per-process"}),
        secret_stores=frozenset({"databricks"}),  # `{{secrets/scope/key}}` in spark_env_vars
        code=True,  # an archive on workspace files or a volume, unpacked on each node by the launcher
        requirements=True,  # task libraries: {pypi: {package: ...}}
        environments=True,  # a Databricks Runtime ML (RUNTIMES)
    )
    identity_max_len = 64  # the longest idempotency_token Databricks takes
    patch_schema = "databricks"
    owned_fields = {
        ("idempotency_token",): IDENTITY_WHY,
        ("tasks", 0, "new_cluster", "custom_tags", "crosstrain_job"): IDENTITY_WHY,
        ("tasks", 0, "new_cluster", "custom_tags", FINGERPRINT_TAG): FINGERPRINT_WHY,
        ("tasks", 0, "new_cluster", "num_workers"): NODES_WHY,
        ("tasks", 0, "spark_python_task", "parameters"): "the TorchDistributor call the driver makes (set the "
        "job's command, launch and nodes)",
    }
    planned_fields = {
        ("tasks", "*"): "the run's task, which the driver runs",
        ("tasks", 0, "new_cluster"): "the cluster the job's nodes are planned on",
        ("tasks", 0, "new_cluster", "spark_version"): "the cluster's runtime (targets.databricks.spark_version)",
        ("tasks", 0, "new_cluster", "node_type_id"): "the nodes' machine (set `machine`)",
        ("tasks", 0, "spark_python_task"): "the driver's TorchDistributor call",
    }

    def __init__(self, *, client: WorkspaceClient | None = None, log_interval: float = 30.0, **kwargs: Any) -> None:
        """`client`: a `WorkspaceClient` to use for every call (tests and benchmarks point one at a loopback
        workspace; make it with `crosstrain.adaptors.databricks.workspace_client`, so that its own retries are
        off). Without one, each call site makes one for the settings' or the handle's host and profile."""
        super().__init__(**kwargs)
        self.client = client
        self.log_interval = log_interval  # how often `logs(follow=True)` looks for newly delivered lines
        self._clients: dict[tuple[str, str | None], WorkspaceClient] = {}

    # -- render (pure) -------------------------------------------------------------------------------------
    def platform_refusals(self, job: TrainingJob, settings: DatabricksSettings) -> list[Problem]:
        problems = list(_Plan(job, settings).problems)
        pool = job.pools()[0]
        if "CUDA_VISIBLE_DEVICES" in pool.env or "CUDA_VISIBLE_DEVICES" in pool.secrets:
            problems.append(
                Problem(
                    "env.CUDA_VISIBLE_DEVICES",
                    "TorchDistributor gives each Spark task its GPUs; a preset CUDA_VISIBLE_DEVICES overrides that",
                    "remove CUDA_VISIBLE_DEVICES",
                )
            )
        for path, value, message, fix in (
            (
                "network",
                job.network,
                "a Databricks cluster joins its workspace's network; a job cannot choose one",
                "remove `network` (set networking on the workspace)",
            ),
            (
                "scheduling.max_wait",
                job.scheduling.max_wait,
                "Databricks one-time runs have no start deadline",
                "remove `scheduling.max_wait`; `scheduling.timeout` bounds the whole run",
            ),
            (
                f"{pool.role}.boot_disk",
                pool.boot_disk,
                "crosstrain does not size Databricks node disks",
                "remove `boot_disk`; Databricks sizes the disks of each node type",
            ),
        ):
            if value:
                problems.append(Problem(path, message, fix))
        return problems

    def data_refusals(self, job: TrainingJob, settings: DatabricksSettings) -> list[Problem]:
        """Unity Catalog volumes and DBFS are files on every node (read and written in place); another cloud's
        URI reaches the code as is (`direct`), for Spark or a client with the cluster's credentials."""
        problems = []
        reaches = "/Volumes/... and dbfs:/... (as /dbfs/...), or cloud URIs with mode: direct"
        for direction, name, location in data.locations(job):
            kind, mode = data.kind(location), getattr(location, "mode", None)
            if location.type == "table":
                problems.append(
                    data.refusal(
                        direction,
                        name,
                        "a table is an Azure ML mltable, which Databricks does not read",
                        "use type: folder or file (or read a Unity Catalog table with Spark in the code)",
                        "type",
                    )
                )
            elif kind in ("volume", "dbfs") and mode in ("download", "upload"):
                problems.append(
                    data.mode_refusal(
                        direction,
                        name,
                        location,
                        "Databricks",
                        "every node sees it as files (FUSE) and reads and writes it in place, with no copy",
                        "mount (the default) or direct",
                    )
                )
            elif kind in ("gs", "azure", "s3") and mode != "direct":
                problems.append(
                    data.mode_refusal(
                        direction,
                        name,
                        location,
                        "Databricks",
                        "a cluster sees only /Volumes/ and /dbfs/ as files; a cloud URI reaches the code as is, for "
                        "Spark or a client with the cluster's credentials",
                        "direct, or put the data in a Unity Catalog volume (/Volumes/...)",
                    )
                )
            elif kind not in ("volume", "dbfs", "gs", "azure", "s3"):
                problems.append(data.unreachable(direction, name, location, "Databricks", reaches))
        return problems

    def node_path(
        self, job: TrainingJob, settings: DatabricksSettings, direction: str, name: str, location: Any
    ) -> str:
        path = str(location.path)
        if path.startswith("dbfs:/") and getattr(location, "mode", None) != "direct":
            return "/dbfs/" + path.removeprefix("dbfs:/").lstrip("/")
        return path

    def _render(self, job: TrainingJob, settings: DatabricksSettings, ids: Ids) -> Request:
        plan = _Plan(job, settings)
        if plan.call is None or plan.bundle is None:
            raise Unsupported(self.name, plan.problems)
        identity = ids.identity
        host, call = settings.host, plan.call
        calls: list[HttpCall] = []
        notes: list[str] = []
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        calls += self._bundle_calls(plan.bundle, plan.archive_size, settings)
        code_dir = f"{settings.workspace_dir}/code/{plan.bundle.short}"
        archive = f"{settings.volume or settings.workspace_dir}/code/{plan.bundle.short}/{packaging.ARCHIVE_NAME}"
        call = dataclasses.replace(call, code=archive)
        if plan.local_file is not None:
            data = plan.local_data
            # Content-addressed: a re-submit under this identity with another file never overwrites the file
            # the existing run reads (that re-submit is refused, but its upload comes first).
            folder = f"{settings.workspace_dir}/{identity}/{hashlib.sha256(data).hexdigest()[:16]}"
            remote = uploads.join_destination(folder, plan.local_file.name, "command")
            content = base64.b64encode(data).decode()
            calls += [
                _check_call(host, remote, f"skip the two calls below when {remote} is there (the path names the file)"),
                HttpCall(
                    "POST",
                    f"{host}/api/2.0/workspace/mkdirs",
                    {"path": folder},
                    headers,
                    purpose="create the folder the training file is uploaded to",
                ),
                HttpCall(
                    "POST",
                    f"{host}/api/2.0/workspace/import",
                    {"path": remote, "content": content, "format": "AUTO", "overwrite": True},
                    headers,
                    purpose=f"upload {plan.local_file} as a workspace file, visible on every node",
                ),
            ]
            call = dataclasses.replace(call, kind="file", target=remote)

        task: dict[str, Any] = {
            "task_key": "train",
            "new_cluster": self._cluster(job, settings, plan, ids, notes),
            "spark_python_task": {"python_file": f"{code_dir}/{LAUNCHER_NAME}", "parameters": call.parameters()},
        }
        libraries = [*plan.libraries, *(_library(spec) for spec in settings.libraries)]
        if libraries:
            task["libraries"] = libraries
        if job.scheduling.max_restarts is not None:
            task["max_retries"] = job.scheduling.max_restarts
        body: dict[str, Any] = {
            "run_name": job.name,
            "idempotency_token": identity,
            "timeout_seconds": job.scheduling.timeout or 0,
            "tasks": [task],
        }
        if job.identity:
            principal = "user_name" if "@" in job.identity else "service_principal_name"
            body["run_as"] = {principal: job.identity}
        calls.append(
            HttpCall(
                "POST",
                f"{host}/api/2.2/jobs/runs/submit",
                body,
                headers,
                purpose="submit the one-time run; a known idempotency_token returns the existing run (submit then "
                "reads it back and checks its crosstrain_fingerprint tag)",
            )
        )
        notes.append(
            f"TorchDistributor(num_processes={call.num_processes}, local_mode={call.local_mode}, "
            f"use_gpu={call.use_gpu}).run("
            + (
                f"bash -c {call.target!r} on every rank)"
                if call.kind == "shell"
                else f"{call.target!r}, *{list(call.args)!r})"
            )
        )
        ships = job.code is not None or job.function_payload is not None
        if ships:
            notes.append(f"ships {plan.bundle.describe()}")
        notes.append(
            f"the cluster delivers its logs to {log_destination(settings, identity)}/<cluster id>/ (about every "
            "5 minutes); `crosstrain logs --follow` reads the driver's stdout and stderr there"
        )
        return Request(
            self.name,
            identity,
            job.name,
            tuple(calls),
            settings.model_dump(mode="json"),
            tuple(notes),
            code=plan.bundle.ref if ships else None,
        )

    @staticmethod
    def _bundle_calls(bundle: packaging.Bundle, size: int | None, settings: DatabricksSettings) -> list[HttpCall]:
        """The bundle's uploads, each after a check that skips it when its content-addressed path is there
        already: the archive to the workspace or the volume, then crosstrain's launcher (this version's
        `databricks_task.py`) in the workspace folder."""
        host = settings.host
        headers = {"Accept": "application/json"}
        code_dir = f"{settings.workspace_dir}/code/{bundle.short}"
        launcher = f"{code_dir}/{LAUNCHER_NAME}"
        source = next(f for f in bundle.files if f.path == f"{packaging.PACKAGE}/crosstrain/databricks_task.py")
        described: dict[str, Any] = {
            "archive": packaging.ARCHIVE_NAME,
            "sha256 of the bundle": bundle.digest,
            "user files": len(bundle.user_files),
            "user bytes": bundle.size,
        }
        if size is not None:
            described["bytes"] = size
        mkdirs = HttpCall(
            "POST",
            f"{host}/api/2.0/workspace/mkdirs",
            {"path": code_dir},
            {**headers, "Content-Type": "application/json"},
            purpose="create the bundle's workspace folder",
        )
        calls: list[HttpCall] = []
        if settings.volume:
            volume_dir = f"{settings.volume}/code/{bundle.short}"
            archive = f"{volume_dir}/{packaging.ARCHIVE_NAME}"
            calls += [
                HttpCall(
                    "HEAD",
                    f"{host}/api/2.0/fs/files{quote(archive)}",
                    None,
                    headers,
                    purpose="skip the two calls below when the archive is there (its path names its content)",
                ),
                HttpCall(
                    "PUT",
                    f"{host}/api/2.0/fs/directories{quote(volume_dir)}",
                    None,
                    headers,
                    purpose="create the bundle's volume folder (Files API)",
                ),
                HttpCall(
                    "PUT",
                    f"{host}/api/2.0/fs/files{quote(archive)}?overwrite=true",
                    {"path": archive, "content": described},
                    {**headers, "Content-Type": "application/octet-stream"},
                    purpose="upload the code archive to the volume (Files API; the body is the archive's bytes)",
                ),
                _check_call(host, launcher, "skip the two calls below when the launcher is there"),
                mkdirs,
            ]
        else:
            archive = f"{code_dir}/{packaging.ARCHIVE_NAME}"
            calls += [
                _check_call(
                    host, archive, "skip the two calls below when the archive is there (its path names its content)"
                ),
                mkdirs,
                HttpCall(
                    "POST",
                    f"{host}/api/2.0/workspace/import",
                    {"path": archive, "format": "AUTO", "overwrite": True, "content": described},
                    {**headers, "Content-Type": "multipart/form-data"},
                    purpose="upload the code archive as a workspace file (multipart; the content is its bytes)",
                ),
                _check_call(host, launcher, "skip the call below when the launcher is there"),
            ]
        calls.append(
            HttpCall(
                "POST",
                f"{host}/api/2.0/workspace/import",
                {
                    "path": launcher,
                    "format": "AUTO",
                    "overwrite": True,
                    "content": {"bundle file": source.path, "sha256": source.sha256, "bytes": source.size},
                },
                {**headers, "Content-Type": "multipart/form-data"},
                purpose="upload crosstrain's launcher, the run's python_file: it unpacks the archive on each node",
            )
        )
        return calls

    def _cluster(
        self, job: TrainingJob, settings: DatabricksSettings, plan: _Plan, ids: Ids, notes: list[str]
    ) -> dict[str, Any]:
        pool: PoolView = plan.pool
        node_type = plan.machine.machine_type
        env = {} if plan.single_node else {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"}
        if node_type and node_type.startswith("g5.") and plan.machine.gpu_count > 1:
            env["NCCL_P2P_DISABLE"] = "1"  # peer access fails between G5 GPUs
        if job.output_dir:
            env["CROSSTRAIN_OUTPUT_DIR"] = job.output_dir
        env.update(pool.env)
        # The cluster resolves these at start; the run's spec keeps only the reference.
        env.update({name: secrets.databricks_placeholder(ref) for name, (ref, _) in sorted(pool.secrets.items())})
        tags = {**job.labels, "crosstrain_job": ids.identity, FINGERPRINT_TAG: ids.fingerprint}
        cluster: dict[str, Any] = {
            "spark_version": plan.spark_version,
            "node_type_id": node_type,
            "data_security_mode": "SINGLE_USER",  # standard (shared) access mode has no GPUs or containers
        }
        if env:
            cluster["spark_env_vars"] = env
        if plan.single_node:
            cluster |= {
                "driver_node_type_id": node_type,
                "num_workers": 0,
                "spark_conf": {"spark.databricks.cluster.profile": "singleNode", "spark.master": "local[*, 4]"},
            }
            tags["ResourceClass"] = "SingleNode"
        else:
            cluster |= {
                "driver_node_type_id": settings.driver_node_type_id or self._driver(plan),
                "num_workers": plan.nodes,
                "spark_conf": {"spark.task.resource.gpu.amount": "1"},
            }
        cluster["custom_tags"] = tags
        cluster["cluster_log_conf"] = log_conf(settings, ids.identity)
        if pool.image:
            cluster["docker_image"] = {"url": pool.image}
            cluster["spark_version"] = re.sub(r"-(gpu|cpu)-ml", "", plan.spark_version)
            notes.append(
                f"Container Services does not run ML runtimes, so the cluster runs {cluster['spark_version']}: "
                f"{pool.image} must carry torch, CUDA, NCCL and crosstrain's dependencies"
            )
        if job.scheduling.spot:
            availability = {
                "aws": "SPOT_WITH_FALLBACK",
                "azure": "SPOT_WITH_FALLBACK_AZURE",
                "gcp": "PREEMPTIBLE_WITH_FALLBACK_GCP",
            }[plan.cloud or "aws"]
            # first_on_demand=1 keeps the driver on demand; losing a worker still fails the barrier stage.
            cluster[f"{plan.cloud}_attributes"] = {"availability": availability, "first_on_demand": 1}
        return cluster

    @staticmethod
    def _driver(plan: _Plan) -> str:
        kind = plan.machine.gpu or _SMALL_GPU[plan.cloud or "aws"]
        try:
            driver = catalog.resolve(plan.platform, machine_type=None, gpu=kind, gpu_count=1).machine_type
        except catalog.CatalogError:
            driver = catalog.resolve(
                plan.platform, machine_type=None, gpu=_SMALL_GPU[plan.cloud or "aws"], gpu_count=1
            ).machine_type
        assert driver is not None
        return driver

    def fingerprint_view(self, request: Request) -> Any:
        """Every call as sent, with crosstrain's runtime bundle (the archive of a job without `code:`, and the
        launcher) named by a placeholder instead of its digest: which crosstrain version carries the job to
        the cluster says nothing about the job, so upgrading crosstrain does not start a new run of it. (A job
        with `code:` ships its folder and the runtime in one bundle, whose digest names both.)"""
        runtime = runtime_bundle()
        view = super().fingerprint_view(request)
        for call in view:
            content = (call.get("body") or {}).get("content")
            if isinstance(content, dict) and "bundle file" in content:
                call["body"]["content"] = {"bundle file": content["bundle file"]}
            if isinstance(content, dict) and content.get("sha256 of the bundle") == runtime.digest:
                call["body"]["content"] = {"archive": content.get("archive"), "crosstrain runtime": True}
        text = json.dumps(view, sort_keys=True).replace(runtime.short, "<crosstrain runtime>")
        return json.loads(text)

    # -- submit, status, cancel, logs (through databricks-sdk) ---------------------------------------------
    def _client(self, host: str, profile: str | None) -> WorkspaceClient:
        if self.client is not None:
            return self.client
        from crosstrain.adaptors import databricks as adaptor

        key = (host, profile)
        if key not in self._clients:  # one per workspace: making one authenticates and probes the host
            self._clients[key] = adaptor.workspace_client(
                host, profile=profile, timeout=self.retry.call_timeout, connect_timeout=self.retry.connect_timeout
            )
        return self._clients[key]

    # -- where credentials may go -------------------------------------------------------------------------
    binding_settings = ("host", "profile")

    def _workspace(self, profile: str | None) -> tuple[str | None, str]:
        """The workspace this machine configures, and where that comes from: an injected client's host, else
        `--set host`, `DATABRICKS_HOST`, else the host of the profile in ~/.databrickscfg (the configured
        profile, else `profile`, else the file's default), as the Databricks SDK reads them."""
        if self.client is not None:
            return origin_of(str(self.client.config.host or "")), "the client crosstrain was given"
        configured = self.configured()
        if "host" in configured:
            return configured["host"], ("--set host" if "host" in self.overrides else "DATABRICKS_HOST")
        return self._profile_host(configured.get("profile") or profile)

    def _profile_host(self, profile: str | None) -> tuple[str | None, str]:
        """The host of `profile` (None: the default one) in the Databricks config file, as the SDK picks it."""
        path = Path(self.environ.get("DATABRICKS_CONFIG_FILE") or "~/.databrickscfg").expanduser()
        parser = configparser.ConfigParser(default_section="\0", interpolation=None)  # DEFAULT is a profile
        try:
            parser.read(path, encoding="utf-8")
        except (configparser.Error, UnicodeDecodeError, OSError):
            return None, f"{path} (unreadable)"
        if profile is None:
            profile = parser.get("__settings__", "default_profile", fallback="").strip() or "DEFAULT"
        host = parser.get(profile, "host", fallback="") if parser.has_section(profile) else ""
        where = f"profile {profile} in {path}"
        if not host:
            return None, where
        try:
            return DatabricksSettings._host(host), where
        except ValueError:
            return None, where

    def _binding_problems(self, host: Any, profile: Any, path: str, what: str) -> list[Problem]:
        """Whether a handle's or a request's workspace is the configured one (and its profile is for it)."""
        if not isinstance(profile, str | None):
            return [Problem(f"{path}.profile", f"{shown(profile)} is not a profile name", "use the handle as made")]
        found = origin_of(host)
        if found is None:
            secret = isinstance(host, str) and url_credentials(host)
            return [
                Problem(
                    f"{path}.host",
                    f"{shown(host)} " + ("carries credentials in the URL" if secret else "is not a workspace URL"),
                    f"use the {what} as crosstrain made it (https://<workspace host>, no credentials in it)",
                )
            ]
        problems = []
        configured, source = self._workspace(profile)
        fix = (
            f"if {found} is your workspace, set DATABRICKS_HOST={found} (or pass --set host={found}, or use a "
            f"~/.databrickscfg profile for it); else use a {what} made for your workspace"
        )
        if configured is None:
            problems.append(
                Problem(
                    f"{path}.host",
                    f"the {what} is for {found}, and this machine configures no workspace (no DATABRICKS_HOST, no "
                    f"host in {source})",
                    fix,
                )
            )
        elif configured != found:
            problems.append(
                Problem(
                    f"{path}.host",
                    f"the {what} is for {found}, this machine is configured for {configured} ({source})",
                    fix,
                )
            )
        used = self._profile_for(profile)
        if used is not None and configured == found and self.client is None:
            profile_host, where = self._profile_host(used)
            if profile_host is not None and profile_host != found:
                problems.append(
                    Problem(
                        f"{path}.profile",
                        f"{where} is for {profile_host}, not {found}: its credentials would go to another workspace",
                        f"pass --set profile=<the profile of {found}>",
                    )
                )
        return problems

    def _profile_for(self, profile: str | None) -> str | None:
        """The profile that authenticates: the configured one, else the one the handle or request names."""
        configured = self.configured().get("profile") if self.client is None else None
        return configured or profile

    def handle_problems(self, handle: JobHandle) -> list[Problem]:
        return self._binding_problems(handle.ref.get("host"), handle.ref.get("profile"), "handle.ref", "handle")

    def request_problems(self, request: Request) -> list[Problem]:
        settings = request.settings
        problems = self._binding_problems(settings.get("host"), settings.get("profile"), "request.settings", "request")
        host = origin_of(str(settings.get("host")))
        for i, call in enumerate(request.calls):
            if origin_of(call.url) != host:
                problems.append(
                    Problem(
                        f"request.calls[{i}].url",
                        f"{shown(call.url)} is not on the request's workspace {host}",
                        "render the request again instead of editing its URLs",
                    )
                )
        return problems

    def _handle_client(self, handle: JobHandle) -> WorkspaceClient:
        """The client for the handle's workspace, once it is known to be the configured one."""
        self.check_handle(handle)
        profile = handle.ref.get("profile")
        if not self.is_issued(handle):
            profile = self._profile_for(profile)
        return self._client(handle.ref["host"], profile)

    def _safe_call(self, fn: Callable[[], T], what: str) -> T:
        """One SDK call that is safe to repeat (a read, a cancel, an upload), retried as a poll."""
        from crosstrain.adaptors import databricks as adaptor

        return self.retry.poll(lambda: adaptor.call(fn, what))

    def _sent_bundle(self, request: Request) -> packaging.Bundle:
        """The bundle the request uploads, made again: the job's folder (refused if it changed since render), or
        crosstrain's runtime alone."""
        try:
            if request.code is not None:
                limits = packaging.Limits() if request.settings.get("volume") else WORKSPACE_CODE_LIMITS
                return packaging.check_unchanged(request.code, limits)
            return runtime_bundle()
        except uploads.UploadRefused as refused:
            raise SpecError([refused.problem]) from None

    def _read_run(self, w: WorkspaceClient, run_id: int) -> Run:
        return self._safe_call(partial(w.jobs.get_run, run_id), f"runs/get {run_id}")

    def send(self, request: Request) -> JobHandle:
        from crosstrain.adaptors import databricks as adaptor

        trusted = self.is_rendered(request)
        self.check_request(request)
        settings = self.request_settings(request)
        profile = settings.profile if trusted else self._profile_for(settings.profile)
        w = self._client(settings.host, profile)
        jobs = adaptor.jobs()
        uploads_ = request.calls[:-1]
        for i, call in enumerate(uploads_):  # every path checked before anything is sent
            _check_upload_call(call, settings, f"calls[{i}]")
        bundle = self._sent_bundle(request)
        skip = False
        for call in uploads_:
            body, url = call.body, call.url
            if call.method == "GET":  # get-status: the content address is there -> skip its uploads
                path = _query_path(url)
                found = partial(adaptor.exists, partial(w.workspace.get_status, path))
                skip = self._safe_call(found, f"workspace/get-status {path}")
            elif call.method == "HEAD":  # the same on a volume (Files API)
                path = _files_path(url, "/api/2.0/fs/files")
                found = partial(adaptor.exists, partial(w.files.get_metadata, path))
                skip = self._safe_call(found, f"fs/files HEAD {path}")
            elif skip:
                continue
            elif url.endswith("/workspace/mkdirs"):
                self._safe_call(partial(w.workspace.mkdirs, body["path"]), "workspace/mkdirs")
            elif "/fs/directories/" in url:
                folder = _files_path(url, "/api/2.0/fs/directories")
                self._safe_call(partial(w.files.create_directory, folder), "fs/directories")
            elif "/fs/files/" in url:
                data, path = _content(body["content"], bundle), body["path"]

                def put_file(data: bytes = data, path: str = path) -> None:
                    w.files.upload(path, io.BytesIO(data), overwrite=True, use_parallel=False)

                self._safe_call(put_file, "fs/files")
            elif isinstance(body["content"], str):  # a lone training file, inline
                workspace = adaptor.workspace()
                upload = partial(
                    w.workspace.import_,
                    body["path"],
                    content=body["content"],
                    format=workspace.ImportFormat(body["format"]),
                    overwrite=body["overwrite"],
                )
                self._safe_call(upload, "workspace/import")
            else:
                workspace = adaptor.workspace()
                data, path, fmt = (
                    _content(body["content"], bundle),
                    body["path"],
                    workspace.ImportFormat(body["format"]),
                )

                def import_file(data: bytes = data, path: str = path, fmt: Any = fmt) -> None:
                    # A fresh stream per attempt: a retry re-reads the bytes from the start.
                    w.workspace.upload(path, io.BytesIO(data), format=fmt, overwrite=True)

                self._safe_call(import_file, "workspace/import")
        body = request.create.body
        convert: dict[str, Callable[[Any], Any]] = {
            "tasks": lambda tasks: [jobs.SubmitTask.from_dict(t) for t in tasks],
            "run_as": jobs.JobRunAs.from_dict,
        }
        kwargs = {key: convert.get(key, lambda v: v)(value) for key, value in body.items()}
        # Databricks dedupes by the idempotency token (the identity): a retry after an unknown outcome, or a
        # submit racing another of the same request, gets the run that token started, never a second one.
        waiter = self.retry.create(
            lambda: adaptor.call(lambda: w.jobs.submit(**kwargs), "runs/submit"),
            dedupes=self.capabilities.dedupes_create,
            identity=request.identity,
        )
        run_id = int(waiter.run_id)
        try:
            run = self._read_run(w, run_id)
        except SubmitError as error:
            raise SubmitError(
                f"run {run_id} was submitted with identity {request.identity}, but reading it back failed: {error}."
                " Submit the same job again to adopt it (the idempotency token returns this run)",
                job_may_exist=True,
            ) from error
        tags = _cluster_tags(run)
        if tags is not None:  # a workspace that does not report the run's cluster leaves nothing to compare
            self.check_same_request(request, tags.get(FINGERPRINT_TAG), f"run {run_id} on {settings.host}")
        return self.issue(
            JobHandle(
                self.name,
                request.identity,
                str(run_id),
                console_url=run.run_page_url or "",
                ref={"host": settings.host, "profile": profile, "run_id": run_id},
                # runs/submit answers a known token exactly as a new one ({"run_id": N}), and nothing on the run
                # says which submit started it, so a re-submit that got the existing run cannot be told apart.
                adopted=False,
            )
        )

    def status(self, handle: JobHandle) -> JobStatus:
        w = self._handle_client(handle)
        run = self._read_run(w, int(handle.ref["run_id"]))
        state, native, message = _state_of(run)
        if state is JobState.FAILED:
            message = self._failure(w, run, message, run.run_page_url or handle.console_url)
        return JobStatus(state, native, message)

    def _failure(self, w: WorkspaceClient, run: Run, message: str, console: str) -> str:
        """Why a run failed: the task's `state_message`, the run output's error and the last lines of its trace
        (else of stdout), the failing rank where TorchDistributor's or the launcher's output names it, and the
        kind of failure with what to do next."""
        tasks = run.tasks or []
        said = next((t.state.state_message for t in tasks if t.state and t.state.state_message), None) or message
        error, lines, read, rank = "", [], [], None
        for task_run_id in [task.run_id for task in tasks if task.run_id is not None]:
            try:
                output = self._safe_call(partial(w.jobs.get_run_output, task_run_id), f"runs/get-output {task_run_id}")
            except CrosstrainError:  # the output is an aid here: the state stands without it
                continue
            error = error or (output.error or "")
            trace = (output.error_trace or "").splitlines()
            logs = (output.logs or "").splitlines()
            found = _failing_rank([*logs, *trace, error])
            own = [line for line in logs if found is not None and _rank_of(line) == found]
            lines += last_lines(own or trace or logs)  # the failing rank's own lines where it has any
            read += last_lines(logs, 20) + last_lines(trace, 20)
            rank = rank if rank is not None else found
        what = f"rank {rank} failed" if rank is not None else "the run failed"
        return summary(what, error, lines, console, said=said, evidence=read)

    def list_jobs(self, overrides: Mapping[str, Any] | None = None) -> Iterator[JobSummary]:
        """The workspace's one-time runs (`runs/list`, run_type SUBMIT_RUN) whose cluster carries crosstrain's
        `crosstrain_job` tag, newest first, each with a handle for status, wait, logs and cancel."""
        settings = resolve_settings(
            self.settings_model, self.name, overrides={**self.overrides, **(overrides or {})}, environ=self.environ
        )
        profile = self._profile_for(settings.profile)
        w = self._client(settings.host, profile)
        from crosstrain.adaptors import databricks as adaptor

        jobs = adaptor.jobs()

        def listing() -> list[Any]:
            return list(w.jobs.list_runs(run_type=jobs.RunType.SUBMIT_RUN, expand_tasks=True))

        runs = self._safe_call(listing, f"runs/list on {settings.host}")
        found = [(run, (_cluster_tags(run) or {}).get("crosstrain_job")) for run in runs if run.run_id is not None]
        for run, identity in sorted(found, key=lambda item: -(item[0].start_time or 0)):
            if not identity:
                continue
            state, native, _ = _state_of(run)
            console = run.run_page_url or ""
            handle = JobHandle(
                self.name,
                identity,
                str(run.run_id),
                console_url=console,
                ref={"host": settings.host, "profile": profile, "run_id": run.run_id},
            )
            yield JobSummary(identity, state, native, (run.start_time or 0) / 1000, console, handle)

    def cancel(self, handle: JobHandle) -> None:
        run_id = int(handle.ref["run_id"])
        self._safe_call(partial(self._handle_client(handle).jobs.cancel_run, run_id), f"runs/cancel {run_id}")

    def logs(self, handle: JobHandle, *, follow: bool = False) -> Iterator[str]:
        """The driver's stdout and stderr as the cluster delivers them (`cluster_log_conf`, read from where the
        last read ended, so no line comes twice), each line prefixed `[driver]` (`[driver stderr]`); with
        `follow`, read again every `log_interval` seconds while the run has not ended. Then the task run's
        output (`runs/get-output`): the part of stdout's tail not delivered yet, the error and its trace."""
        w = self._handle_client(handle)
        run_id = int(handle.ref["run_id"])
        reader: _DriverLogs | None = None
        while True:
            run = self._read_run(w, run_id)
            ended = _state_of(run)[0].terminal
            reader = reader or _DriverLogs.of(run, w, self._safe_call)
            if reader is not None:  # a line still being written waits for its end, unless the run ended
                yield from reader.read(final=ended)
            if ended or not follow:
                break
            self.retry.sleep(self.log_interval)
        stdout = reader.stdout if reader is not None else []
        for task_run_id in [task.run_id for task in run.tasks or [] if task.run_id is not None]:
            output = self._safe_call(partial(w.jobs.get_run_output, task_run_id), f"runs/get-output {task_run_id}")
            tail = (output.logs or "").splitlines()
            rest = _not_seen(stdout, tail)
            if stdout and rest and len(rest) == len(tail) and output.logs_truncated:
                yield "[crosstrain: lines between the delivered logs and the output's tail are not shown]"
            elif not stdout and output.logs_truncated:
                yield "[crosstrain: Databricks kept only the tail of this output]"
            yield from (f"{DRIVER_PREFIX}{line}" for line in rest)
            if output.error:
                yield f"error: {output.error}"
            yield from (output.error_trace or "").splitlines()


def _state_of(run: Run) -> tuple[JobState, str, str]:
    """The run's common state, its `life_cycle_state[/result_state]` and its `state_message`."""
    state = run.state
    life = state.life_cycle_state.value if state and state.life_cycle_state else "UNKNOWN"
    result = state.result_state.value if state and state.result_state else ""
    message = (state.state_message if state else "") or ""
    native = f"{life}/{result}" if result else life
    if life in ("TERMINATED", "SKIPPED"):
        return {SUCCESS: JobState.SUCCEEDED, CANCELED: JobState.CANCELLED}.get(result, JobState.FAILED), native, message
    if life == "TERMINATING" and result == CANCELED:
        return JobState.CANCELLING, native, message
    return STATE_MAP.get(life, JobState.UNKNOWN), native, message


#: How the failing rank is named: torchelastic's failure summary (`rank : 1 (local_rank: 1)`), torch's
#: `[rank1]:` prefix on an error line, crosstrain's launcher (`rank(s) 1, 3 of 4 did not finish`).
_RANK_PATTERNS = (
    re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank"),
    re.compile(r"\[(?:rank|default)(\d+)\]:.*(Error|Exception|Traceback)"),
    re.compile(r"rank\(s\) (\d+)[\d, ]* of \d+ did not finish"),
)


#: torch's prefix on a rank's lines (`[rank1]:`; torchrun's `--tee` writes `[default1]:`).
_RANK_LINE = re.compile(r"\[(?:rank|default)(\d+)\]:")


def _rank_of(line: str) -> int | None:
    found = _RANK_LINE.match(line)
    return int(found[1]) if found else None


def _failing_rank(lines: list[str]) -> int | None:
    """The first failing rank the output names, by the patterns in order of trust."""
    for pattern in _RANK_PATTERNS:
        for line in lines:
            found = pattern.search(line)
            if found:
                return int(found[1])
    return None


def _not_seen(seen: list[str], tail: list[str]) -> list[str]:
    """The lines of `tail` (the end of stdout, from the run output) after those already read from the delivered
    stdout (`seen`, its beginning): the longest end of `seen` that begins `tail` is the overlap."""
    seen = seen[-len(tail) :] if tail else []
    for start in range(len(seen)):  # only where the first line matches: linear for all but repeated lines
        overlap = len(seen) - start
        if seen[start] == tail[0] and all(seen[start + i] == tail[i] for i in range(overlap)):
            return tail[overlap:]
    return tail


DRIVER_PREFIX = "[driver] "
#: The driver's files a cluster delivers under `<destination>/<cluster id>/driver/`, and their line prefixes.
_DRIVER_FILES = (("stdout", DRIVER_PREFIX), ("stderr", "[driver stderr] "))
#: `dbfs/read` returns at most 1 MB per call.
_DBFS_READ = 1024 * 1024


class _DriverLogs:
    """The driver's delivered stdout and stderr, each read from the offset where the last read ended: a line is
    yielded once, whole (a line still being written waits for its newline, unless the run has ended)."""

    def __init__(self, w: WorkspaceClient, folder: str, call: Callable[[Callable[[], Any], str], Any]) -> None:
        self.w, self.call = w, call
        self.dbfs = folder.startswith("dbfs:")
        self.folder = "/" + folder.removeprefix("dbfs:").lstrip("/") if self.dbfs else folder
        self.offsets: dict[str, int] = {}
        self.partial: dict[str, bytes] = {}
        self.stdout: list[str] = []  # every stdout line read, to tell what the run output's tail adds

    @classmethod
    def of(cls, run: Run, w: WorkspaceClient, call: Callable[[Callable[[], Any], str], Any]) -> _DriverLogs | None:
        """The reader of the run's delivered driver logs; None until its cluster is known, or for a run whose
        cluster delivers no logs to DBFS or a volume."""
        for task in run.tasks or []:
            conf = task.new_cluster.cluster_log_conf if task.new_cluster else None
            place = (conf.volumes or conf.dbfs) if conf else None
            instance = task.cluster_instance or run.cluster_instance
            if place and place.destination and instance and instance.cluster_id:
                return cls(w, f"{place.destination.rstrip('/')}/{instance.cluster_id}/driver", call)
        return None

    def _size(self, path: str) -> int | None:
        from crosstrain.adaptors import databricks as adaptor

        if self.dbfs:
            info = self.call(partial(adaptor.found_or_none, partial(self.w.dbfs.get_status, path)), f"dbfs {path}")
            return None if info is None else int(info.file_size or 0)
        meta = self.call(partial(adaptor.found_or_none, partial(self.w.files.get_metadata, path)), f"fs {path}")
        return None if meta is None else int(meta.content_length or 0)

    def _chunk(self, path: str, start: int, end: int) -> bytes:
        if self.dbfs:
            data = b""
            while start + len(data) < end:
                at = start + len(data)
                read = partial(self.w.dbfs.read, path, offset=at, length=min(_DBFS_READ, end - at))
                got = base64.b64decode(self.call(read, f"dbfs/read {path}").data or "")
                if not got:
                    break
                data += got
            return data

        def ranged() -> bytes:
            headers = {"Accept": "application/octet-stream", "Range": f"bytes={start}-{end - 1}"}
            if self.w.config.workspace_id:  # as the SDK's own Files API calls send it
                headers["X-Databricks-Workspace-Id"] = self.w.config.workspace_id
            answer = self.w.api_client.do("GET", f"/api/2.0/fs/files{quote(path)}", headers=headers, raw=True)
            assert isinstance(answer, dict)
            data = bytes(answer["contents"].read())
            return data[start:end] if len(data) > end - start else data  # a server that ignored the range

        return bytes(self.call(ranged, f"fs/files {path}"))

    def read(self, *, final: bool = False) -> Iterator[str]:
        """Every whole line delivered since the last read, prefixed, stdout's then stderr's."""
        for name, prefix in _DRIVER_FILES:
            path = f"{self.folder}/{name}"
            size, start = self._size(path), self.offsets.get(name, 0)
            if size is not None and size < start:  # rotated: the active file starts again
                yield f"[crosstrain: the driver's {name} was rotated; lines in between may be missing]"
                start, self.partial[name] = 0, b""
            if size is not None and size > start:
                data = self._chunk(path, start, size)
                self.offsets[name] = start + len(data)
                *lines, rest = (self.partial.pop(name, b"") + data).split(b"\n")
                self.partial[name] = rest
                for raw in lines:
                    yield self._line(name, prefix, raw)
            else:
                self.offsets[name] = start
            if final and self.partial.get(name):
                yield self._line(name, prefix, self.partial.pop(name))

    def _line(self, name: str, prefix: str, raw: bytes) -> str:
        line = raw.decode("utf-8", "replace").rstrip("\r")
        if name == "stdout":
            self.stdout.append(line)
        return prefix + line


def log_destination(settings: DatabricksSettings, identity: str) -> str:
    """Where the run's cluster delivers its logs: `<volume>/logs/<identity>` with a volume, else
    `dbfs:/crosstrain/logs/<identity>` (the cluster adds `/<cluster id>/driver/stdout`, ...)."""
    return f"{settings.volume}/logs/{identity}" if settings.volume else f"{DBFS_LOG_ROOT}/{identity}"


def log_conf(settings: DatabricksSettings, identity: str) -> dict[str, Any]:
    """The cluster's `cluster_log_conf`: a Unity Catalog volume, else DBFS."""
    kind = "volumes" if settings.volume else "dbfs"
    return {kind: {"destination": log_destination(settings, identity)}}


def _under(root: Path, target: str) -> bool:
    """Whether `target`, as written, names a path under `root` (symlinks aside)."""
    return Path(os.path.normpath(root / target)).is_relative_to(root)


def runtime_bundle() -> packaging.Bundle:
    """The bundle of crosstrain's runtime alone, for a job without `code:` (its training file is uploaded on
    its own, or is on the cluster): the same archive for every such job of this crosstrain version."""
    return packaging.bundle(None)


_ARCHIVES: dict[str, bytes] = {}


def archive_of(bundle: packaging.Bundle) -> bytes:
    """The bundle's archive, made once per digest (render measures it, send uploads it)."""
    if bundle.digest not in _ARCHIVES:
        if len(_ARCHIVES) > 4:
            _ARCHIVES.clear()
        _ARCHIVES[bundle.digest] = bundle.archive()
    return _ARCHIVES[bundle.digest]


def _check_call(host: str, path: str, purpose: str) -> HttpCall:
    return HttpCall(
        "GET",
        f"{host}/api/2.0/workspace/get-status?path={quote(path)}",
        None,
        {"Accept": "application/json"},
        purpose=purpose,
    )


def _query_path(url: str) -> str:
    return parse_qs(urlparse(url).query).get("path", [""])[0]


def _files_path(url: str, prefix: str) -> str:
    return unquote(urlparse(url).path.removeprefix(prefix))


def _content(content: Any, bundle: packaging.Bundle) -> bytes:
    """The bytes a rendered upload describes: the bundle's archive, or one of its files, checked against the
    digest the request names (a request edited to name other content is refused)."""
    if isinstance(content, dict) and content.get("archive") == packaging.ARCHIVE_NAME:
        if content.get("sha256 of the bundle") == bundle.digest:
            return archive_of(bundle)
    elif isinstance(content, dict) and "bundle file" in content:
        for file in bundle.files:
            if file.path == content["bundle file"] and file.sha256 == content.get("sha256"):
                return file.read()
    raise SpecError(
        [
            Problem(
                "calls.body.content",
                f"{shown(content)} is not this request's code bundle (sha256 {bundle.short})",
                "render the request again instead of editing what it uploads",
            )
        ]
    )


def _check_upload_call(call: HttpCall, settings: DatabricksSettings, field: str) -> None:
    """A (possibly edited) request writes only under its settings' workspace folder or volume, by a path
    without traversal."""
    if call.method == "GET":
        _check_upload_path(_query_path(call.url), (settings.workspace_dir,), f"{field}.url")
    elif call.method == "HEAD":
        _check_upload_path(_files_path(call.url, "/api/2.0/fs/files"), (settings.volume,), f"{field}.url")
    elif "/fs/directories/" in call.url:
        _check_upload_path(_files_path(call.url, "/api/2.0/fs/directories"), (settings.volume,), f"{field}.url")
    elif "/fs/files/" in call.url:
        path = call.body["path"]
        if _files_path(call.url, "/api/2.0/fs/files") != path:
            raise SpecError([Problem(f"{field}.url", "the URL and the body name other files", "render again")])
        _check_upload_path(path, (settings.volume,), f"{field}.body.path")
    else:
        _check_upload_path(call.body["path"], (settings.workspace_dir,), f"{field}.body.path")


def _check_upload_path(path: str, folders: tuple[str | None, ...], field: str) -> None:
    """`path` is under one of `folders`, without traversal."""
    uploads.check_destination(path, field, absolute=True)
    if not any(folder and path.startswith(f"{folder}/") for folder in folders):
        raise SpecError(
            [
                Problem(
                    field,
                    f"{path!r} is outside {' and '.join(f for f in folders if f) or 'the upload folders'}",
                    "render the request again instead of editing where it uploads",
                )
            ]
        )


def _cluster_tags(run: Run) -> dict[str, str] | None:
    """The custom tags of the run's cluster ({} on a run that crosstrain did not make, or made before it recorded
    fingerprints), or None where the workspace reports no task's cluster."""
    clusters = [task.new_cluster for task in run.tasks or [] if task.new_cluster is not None]
    if not clusters:
        return None
    return {str(k): str(v) for cluster in clusters for k, v in (cluster.custom_tags or {}).items()}
