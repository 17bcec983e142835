"""The plan: the cluster's shape and the TorchDistributor call, or every reason the job cannot run."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from crosstrain import catalog, packaging, uploads
from crosstrain.backends.databricks import wire
from crosstrain.backends.databricks.settings import (
    _CLUSTER_PATHS,
    _NOTEBOOK_HEADER,
    _PYTHON,
    DEFAULT_SPARK_VERSION,
    IMPORT_LIMIT,
    RUNTIMES,
    VOLUME_FIX,
    WORKSPACE_CODE_LIMITS,
    DatabricksSettings,
)
from crosstrain.backends.databricks.wire import _under, archive_of
from crosstrain.databricks_task import DistributorCall
from crosstrain.errors import Problem
from crosstrain.frozen import frozen
from crosstrain.spec import TrainingJob


def _library(spec: str) -> dict[str, Any]:
    """A cluster library from a PyPI requirement or a wheel path."""
    if spec.endswith(".whl"):
        return {"whl": spec}
    return {"pypi": {"package": spec}}


@frozen
class Planned:
    """A plan that runs: its shape, and the TorchDistributor call and code bundle it found."""

    shape: Plan
    call: DistributorCall
    bundle: packaging.Bundle


class Plan:
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
                self.bundle = wire.runtime_bundle()
            requirements = packaging.requirements_of(job)
        except uploads.UploadRefused as refused:
            self.problems.append(refused.problem)
            return
        for line in requirements:
            if os.sep in line and "://" not in line and "@" not in line:  # a path: pip options are refused for all
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
            deepspeed: dict[str, Any] = {}
            if job.launch.framework == "deepspeed":
                deepspeed = {"deepspeed": True, "nodes": 1 if self.single_node else self.nodes}
                deepspeed["deepspeed_config"] = job.launch.deepspeed_config or ""
                self._deepspeed_runtime()
            self.call = DistributorCall(
                num, self.single_node, not self.single_node, kind, target, tuple(args), **deepspeed
            )

    def _deepspeed_runtime(self) -> None:
        """DeepspeedTorchDistributor came with pyspark 3.5: Databricks Runtime 14.0 ML."""
        found = re.match(r"(\d+)\.(\d+)\.", self.spark_version)
        if found and (int(found[1]), int(found[2])) < (14, 0):
            self.problems.append(
                Problem(
                    "targets.databricks.spark_version",
                    f"{self.spark_version} has no DeepspeedTorchDistributor, which came with Databricks Runtime "
                    "14.0 ML (pyspark 3.5)",
                    f"use 14.0 ML or later, e.g. {DEFAULT_SPARK_VERSION}",
                )
            )

    def _file(self, target: str, job: TrainingJob) -> str:
        if target.startswith("dbfs:/"):
            return "/dbfs/" + target.removeprefix("dbfs:/").lstrip("/")
        if target.startswith(_CLUSTER_PATHS):
            return target
        if job.code is not None:  # the command runs in the shipped folder (its files checked for every target)
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
