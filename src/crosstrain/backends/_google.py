"""What the Google backends (Vertex AI, AI Platform Training) share: labels, the identity label, and how a
training command runs where the platform starts one process per node."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from crosstrain import secrets
from crosstrain.backends.base import launcher_command
from crosstrain.errors import Problem

if TYPE_CHECKING:
    from crosstrain.spec import PoolView, TrainingJob

# The label that carries crosstrain's render-time identity, so a job can be found again after a lost response,
# and the one that carries the request's fingerprint, so a job made from another request is never adopted.
IDENTITY_LABEL = "crosstrain-id"
FINGERPRINT_LABEL = "crosstrain-fp"
_LABEL = re.compile(r"^[a-z0-9_-]{0,63}$")
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")


def label_problems(job: TrainingJob) -> list[Problem]:
    """Google's label rules: keys start with a lowercase letter; keys and values are at most 63 characters of
    lowercase letters, digits, `_` and `-`. Refused rather than rewritten, so the labels you search by are yours."""
    problems = []
    for key, value in job.labels.items():
        if not _LABEL_KEY.match(key):
            problems.append(
                Problem(
                    f"labels.{key}",
                    "is not a valid Google label key",
                    "use a lowercase letter, then up to 62 lowercase letters, digits, '_' or '-'",
                )
            )
        if not _LABEL.match(value):
            problems.append(
                Problem(
                    f"labels.{key}",
                    f"value {value!r} is not a valid Google label value",
                    "use at most 63 lowercase letters, digits, '_' or '-'",
                )
            )
        if key in (IDENTITY_LABEL, FINGERPRINT_LABEL):
            problems.append(Problem(f"labels.{key}", "is reserved for crosstrain's job identity", "rename the label"))
    return problems


def labels(job: TrainingJob, identity: str, fingerprint: str) -> dict[str, str]:
    """The job's labels plus the identity and fingerprint labels, sorted for a deterministic body."""
    return dict(sorted({**job.labels, IDENTITY_LABEL: identity[:63], FINGERPRINT_LABEL: fingerprint}.items()))


#: Secrets in Google Secret Manager are read at start by crosstrain's runtime, with the job's service account.
SECRET_STORES = frozenset({"gcp"})

# Vertex AI and AI Platform Training both start one process per node of the primary and worker pools.
TRAINING_ROLES = ("primary", "workers")


def runs_under_launcher(job: TrainingJob, gpu_count: int) -> bool:
    """Whether a training pool's command runs under crosstrain's per-node launcher: PyTorch jobs in per-node
    mode, or in auto mode where a node runs more than one process. TensorFlow and MPI start their own."""
    if job.launch.framework != "pytorch":
        return False
    if job.launch.mode == "per-node":
        return True
    return job.launch.mode == "auto" and job.processes_per_node(gpu_count) > 1


def node_command(job: TrainingJob, pool: PoolView, gpu_count: int) -> list[str] | None:
    """The pool's container command, wrapped in the launcher where `runs_under_launcher` says so, and in the
    secret resolver (outermost, so it runs once per node) where the pool has secrets."""
    command = pool.command
    if command and pool.role in TRAINING_ROLES and runs_under_launcher(job, gpu_count):
        command = launcher_command(command, nproc_per_node=job.processes_per_node(gpu_count))
    if command and pool.secrets:
        command = secrets.resolver_command(command)
    return command


def launch_problems(job: TrainingJob, pool: PoolView, gpu_count: int, platform: str) -> list[Problem]:
    """What a platform that starts one process per node cannot run: several processes it should start itself,
    or a launcher with no command to start."""
    if pool.role not in TRAINING_ROLES:
        return []
    problems = []
    processes = job.processes_per_node(gpu_count)
    if job.launch.mode == "per-process" and processes > 1:
        problems.append(
            Problem(
                "launch.mode",
                f"{platform} starts one process per node, not the {processes} per node of {pool.role}",
                "use launch.mode auto or per-node (crosstrain's launcher starts one process per GPU), "
                "or set launch.processes_per_node: 1 and start them yourself",
            )
        )
    if runs_under_launcher(job, gpu_count) and not pool.command:
        problems.append(
            Problem(
                "command",
                "crosstrain's per-node launcher needs the command to start on each GPU, and the job leaves it to "
                "the image's entrypoint: it needs a command",
                "set `command` (the image needs crosstrain installed), or launch.mode: per-process with "
                "processes_per_node: 1",
            )
        )
    return problems
