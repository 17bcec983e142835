"""`vertex`: Vertex AI CustomJobs, with Reduction Server, through `google.cloud.aiplatform_v1.JobServiceClient`.

Render builds the `customJobs.create` call in the API's own JSON encoding (camelCase, int64 as strings,
durations as `"<seconds>s"`, enums by name). Vertex has no idempotency key, so the render-time identity goes
into a label (`crosstrain-id`) and the request's fingerprint into another (`crosstrain-fp`). Submit lists jobs
by the identity label first and adopts the earliest live one if its fingerprint is this request's (cancelled
jobs do not count: cancelling frees the identity). After a create whose outcome is unknown it looks for the label
for a settling window before creating again. After every create it lists the label again, keeps the earliest
job (creation time, then name) and cancels the others, so concurrent submitters all return the same job.
Every call goes through `crosstrain.adaptors.gapic`, with a client timeout and no GAPIC retry of its own.

A handle or a request from a file is sent only to Vertex AI's regional endpoints
(`<region>-aiplatform.googleapis.com`), in the configured project where one is set, checked before any
credential is loaded.

A job with `code:` ships the folder as one sdist (`crosstrain.packaging`) to the `staging_bucket` setting,
at a content-addressed object (`<prefix>/crosstrain/code/<digest>/crosstrain_code-1.0.tar.gz`), before the
create; the upload is the request's first call, and an object that already holds the bundle is not sent again.
A pool on a pre-built PyTorch container (`environment: pytorch[:X.Y]`, or `targets.vertex.environment` naming
an executor image) gets a `pythonPackageSpec`: Vertex pip-installs the package (and the job's requirements, its
install_requires) and runs `python -m crosstrain_code -- COMMAND`. A pool on your own `image` gets a
`containerSpec` whose command unpacks the sdist from the Cloud Storage FUSE mount (`/gcs/<bucket>/<object>`)
with the standard library and runs the same bootstrap (`--install` pip-installs the requirements there).

Pool positions are Vertex's: [0] primary (one replica), [1] workers, [2] reduction server or parameter
servers, [3] evaluators; a skipped pool before a used one is `{}`, trailing empty pools are left out.
Sources: ../shared/reference/google.md sections 1, 2 and 5.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlencode, urlparse, urlsplit

from pydantic import field_validator

from crosstrain import catalog, packaging, secrets
from crosstrain.adaptors import gapic
from crosstrain.backends._google import (
    FINGERPRINT_LABEL,
    IDENTITY_LABEL,
    PYTHON_MODULE,
    SECRET_STORES,
    StagingBucket,
    code_refusals,
    data_node_path,
    data_refusals,
    fuse_command,
    label_problems,
    labels,
    launch_problems,
    node_command,
    runs_under_launcher,
    ship_code,
    staged_object,
    storage_client,
    upload_call,
    upload_problems,
    uploaded_object,
)
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
    shown,
)
from crosstrain.environments import Runtime, Runtimes
from crosstrain.errors import CrosstrainError, Problem, SubmitError, TransientError, Unsupported
from crosstrain.failures import last_lines, summary
from crosstrain.settings import TargetSettings, resolve_settings, setting
from crosstrain.uploads import UploadRefused

if TYPE_CHECKING:
    from collections.abc import Callable

    from google.cloud.aiplatform_v1 import CustomJob, JobServiceClient
    from google.cloud.storage import Client as StorageClient

    from crosstrain.retry import RetryPolicy
    from crosstrain.spec import PoolView, TrainingJob

STATE_MAP = {
    "JOB_STATE_UNSPECIFIED": JobState.UNKNOWN,
    "JOB_STATE_QUEUED": JobState.QUEUED,
    "JOB_STATE_PENDING": JobState.QUEUED,
    "JOB_STATE_PAUSED": JobState.QUEUED,
    "JOB_STATE_RUNNING": JobState.RUNNING,
    "JOB_STATE_UPDATING": JobState.RUNNING,
    "JOB_STATE_SUCCEEDED": JobState.SUCCEEDED,
    "JOB_STATE_PARTIALLY_SUCCEEDED": JobState.FAILED,
    "JOB_STATE_FAILED": JobState.FAILED,
    "JOB_STATE_EXPIRED": JobState.FAILED,
    "JOB_STATE_CANCELLING": JobState.CANCELLING,
    "JOB_STATE_CANCELLED": JobState.CANCELLED,
}
#: States of a job that no longer holds its identity: duplicates crosstrain cancelled, or a job the user
#: cancelled to free the identity.
_CANCELLED = frozenset({"JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED"})
#: Vertex AI's regional API hosts: the only place a handle or a request from a file may send Google credentials.
_GOOGLE_HOST = re.compile(r"[a-z]+(?:-[a-z0-9]+)+-aiplatform(?:\.mtls)?\.googleapis\.com")
_PARENT = re.compile(r"projects/(?P<project>[^/]+)/locations/[^/]+")

REDUCTION_SERVER_IMAGE = "{geo}-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"

# Region prefix -> the reduction-server image's multi-region (the docs: "pick the multi-region nearest").
_NEAREST_GEO = (
    (("europe-", "me-", "africa-"), "europe"),
    (("asia-", "australia-"), "asia"),
)

# ---- Pre-built PyTorch training containers (executor images of a pythonPackageSpec) ----------------------
#: `{geo}` is the multi-region nearest the job's region (us, europe, asia). Source: the URI shape and the images
#: below are those of https://cloud.google.com/vertex-ai/docs/training/pre-built-containers as seen in public
#: code and google-cloud-aiplatform 2.7.0 (`google/cloud/aiplatform/jobs.py`, the prebuilt-image check). The
#: official list was not in reach: which release is newest is UNVERIFIED (2.5 was seen for GPUs only), so the
#: table is overridable with targets.vertex.environment.
PREBUILT = "{geo}-docker.pkg.dev/vertex-ai/training/"
RUNTIMES = Runtimes(
    "Vertex AI",
    (
        Runtime(
            "2.5",
            PREBUILT + "pytorch-gpu.2-5.py310:latest",
            None,  # no CPU image of 2.5 was seen: UNVERIFIED
            "https://cloud.google.com/vertex-ai/docs/training/pre-built-containers (UNVERIFIED: seen in public code)",
        ),
        Runtime(
            "2.4",
            PREBUILT + "pytorch-gpu.2-4.py310:latest",
            PREBUILT + "pytorch-cpu.2-4.py310:latest",
            "https://cloud.google.com/vertex-ai/docs/training/pre-built-containers",
        ),
    ),
    "targets.vertex.environment (an executor image URI)",
)

# ---- Reduction Server sizing -------------------------------------------------------------------------------
# Maximum egress bandwidth per node, in Gbps. Sources:
#   [vertex] https://cloud.google.com/vertex-ai/docs/training/distributed-training#reduce_training_time_with_reduction_server
#            (seed 004): n1-highmem-96 + 8 x V100 = 100 Gbps; n1-highcpu-16 = 32 Gbps.
#   [gpu-bw] https://cloud.google.com/compute/docs/gpus/gpu-network-bandwidth : A2/G2 up to 100 Gbps by machine
#            type; A3 High 1,000, A3 Mega 1,800, A3 Ultra 3,600; N1 + P100/P4 32; N1 + T4/V100 up to 100 by GPU
#            and vCPU count. Per machine type figures below A2/G2/N1 maxima are from the same page as recorded in
#            ../shared/reference/google.md section 2 (marked UNVERIFIED there).
#   [egress] https://cloud.google.com/compute/docs/network-bandwidth : general-purpose VMs get 2 Gbps per vCPU,
#            at most 32 Gbps without Tier_1 networking (N1/N2 with >= 16 vCPUs: 32 Gbps).
GPU_MACHINE_EGRESS_GBPS: Mapping[str, int] = {
    "a2-highgpu-1g": 24,
    "a2-highgpu-2g": 32,
    "a2-highgpu-4g": 50,
    "a2-highgpu-8g": 100,
    "a2-megagpu-16g": 100,
    "a2-ultragpu-1g": 24,
    "a2-ultragpu-2g": 32,
    "a2-ultragpu-4g": 50,
    "a2-ultragpu-8g": 100,
    "a3-highgpu-8g": 1000,
    "a3-megagpu-8g": 1800,
    "a3-ultragpu-8g": 3600,
    "g2-standard-4": 10,
    "g2-standard-8": 16,
    "g2-standard-12": 16,
    "g2-standard-16": 32,
    "g2-standard-24": 32,
    "g2-standard-32": 32,
    "g2-standard-48": 50,
    "g2-standard-96": 100,
}
#: N1 machines with attached GPUs: (GPU kind, GPUs per node) -> Gbps. P100 is 32 at any count.
N1_GPU_EGRESS_GBPS: Mapping[tuple[str, int], int] = {
    ("V100", 1): 24,
    ("V100", 2): 32,
    ("V100", 4): 50,
    ("V100", 8): 100,
    ("P100", 1): 32,
    ("P100", 2): 32,
    ("P100", 4): 32,
}
#: CPU machine families whose egress is 2 Gbps per vCPU up to 32 Gbps.
_CPU_FAMILIES = ("n1-", "n2-", "n2d-", "c2-", "c2d-")
_CPU_MAX_GBPS = 32


def egress_gbps(machine_type: str, gpu: str | None = None, gpu_count: int = 0) -> int | None:
    """A node's maximum egress bandwidth in Gbps, or None where crosstrain's table has no figure."""
    if machine_type in GPU_MACHINE_EGRESS_GBPS:
        return GPU_MACHINE_EGRESS_GBPS[machine_type]
    if gpu:
        return N1_GPU_EGRESS_GBPS.get((gpu, gpu_count)) if machine_type.startswith("n1-") else None
    vcpus = re.fullmatch(r"[a-z0-9]+-[a-z]+-(\d+)", machine_type)
    if machine_type.startswith(_CPU_FAMILIES) and vcpus:
        return min(2 * int(vcpus.group(1)), _CPU_MAX_GBPS)
    return None


class VertexSettings(TargetSettings):
    project: str = setting(
        description="Google Cloud project that runs the job.",
        env=("CLOUDSDK_CORE_PROJECT", "GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT"),
    )
    region: str = setting(
        "us-central1",
        description="Vertex AI region; the job is created on that region's endpoint.",
        env=("CLOUDSDK_AI_REGION", "GOOGLE_CLOUD_REGION"),
    )
    service_account: str | None = setting(
        None, description="Service account the job runs as; overrides the job's `identity`."
    )
    network: str | None = setting(
        None,
        description="VPC to peer with, projects/{project number}/global/networks/{name}; overrides `network`.",
    )
    base_output_dir: str | None = setting(
        None, description="gs:// prefix for AIP_MODEL_DIR and friends; overrides the job's `output_dir`."
    )
    staging_bucket: StagingBucket = setting(
        None,
        description="gs://BUCKET[/PREFIX] the job's `code` is uploaded to (as one content-addressed sdist).",
        env=("CROSSTRAIN_STAGING_BUCKET",),
    )
    environment: str | None = setting(
        None,
        description="A pre-built training container (executor image URI) to run the job's code on; overrides "
        "the job's `environment`.",
    )

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        # The region becomes part of the endpoint's host name, so a typo must not become a request elsewhere.
        if not re.fullmatch(r"[a-z]+(-[a-z0-9]+)+", value):
            raise ValueError(f"{value!r} is not a Google Cloud region; use one such as us-central1 or europe-west4")
        return value


@dataclass(frozen=True)
class _Machine:
    machine_type: str
    gpu: str | None
    gpu_count: int
    accelerator: str | None


@dataclass(frozen=True)
class _PoolPlan:
    machine: _Machine
    image: str  # the pool's own image, or the pre-built container it runs on


@dataclass(frozen=True)
class _Plan:
    pools: dict[str, _PoolPlan]  # by role
    bundle: packaging.Bundle | None  # the code (or function) the job ships
    staged: tuple[str, str] | None  # (bucket, object) it goes to
    reducer: tuple[int, str] | None  # the reduction server's replicas, and why that many


def _plan(job: TrainingJob, settings: VertexSettings) -> tuple[_Plan | None, list[Problem]]:
    """What the job is on Vertex AI (each pool's machine and image, the bucket its code goes to, the reduction
    server's size), or every reason it cannot be: the render builds from the plan only."""
    problems = label_problems(job)
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
    problems += secrets.needs_command(job, "Vertex AI")
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
    return _Plan(pools, bundle, staged, reducer), []


class VertexBackend(Backend[VertexSettings]):
    """Vertex AI CustomJobs. Example: `crosstrain submit job.yaml --target vertex --set project=my-proj`."""

    name = "vertex"
    title = "Vertex AI custom training"
    extra = "vertex"
    settings_model = VertexSettings
    formats = ("json", "gcloud")
    handle_ref = {"name": str, "endpoint": str}  # what status, cancel and logs read
    capabilities = Capabilities(
        reduction_server=True,
        parameter_servers=True,
        evaluators=True,
        per_pool_images=True,
        per_pool_machines=True,
        per_pool_commands=True,
        spot=True,
        logs=True,
        frameworks=frozenset({"pytorch", "tensorflow"}),
        secret_stores=SECRET_STORES,
        code=True,
        requirements=True,  # the package's install_requires, or the bootstrap's --install on your own image
        environments=True,
    )
    conflict_fix = (
        "submit with --run-id new (or another run_id), or cancel the old job (a cancelled job frees its identity)"
    )
    patch_schema = "vertex"
    owned_fields = {
        ("labels", IDENTITY_LABEL): IDENTITY_WHY,
        ("labels", FINGERPRINT_LABEL): FINGERPRINT_WHY,
        ("jobSpec", "workerPoolSpecs", "*", "replicaCount"): NODES_WHY,
    }
    planned_fields = {
        ("jobSpec", "workerPoolSpecs", "*"): "one pool per role, in the order Vertex AI numbers the nodes",
        ("jobSpec", "workerPoolSpecs", "*", "machineSpec", "machineType"): "the pool's machine (set `machine`)",
        ("jobSpec", "workerPoolSpecs", "*", "containerSpec"): "what the pool runs (set `image` and `command`)",
        ("jobSpec", "workerPoolSpecs", "*", "pythonPackageSpec"): "what the pool runs (the job's package)",
    }

    def __init__(
        self,
        *,
        client_factory: Callable[[str], JobServiceClient] | None = None,
        storage_client: Callable[[str], StorageClient] | None = None,
        retry: RetryPolicy | None = None,
        environ: Mapping[str, str] | None = None,
        settings: Mapping[str, Any] | None = None,
        logging_client: Callable[[str], Any] | None = None,
        log_interval: float = 5.0,
        log_lookback: float = 60.0,
        log_grace: float = 15.0,
        log_page_size: int = 1000,
    ) -> None:
        """`client_factory(endpoint)` makes the job service client for a regional endpoint (a host name, as
        the rendered URL has it); by default the GAPIC client on its REST transport with Application Default
        Credentials. Tests pass one pointed at a loopback service. `storage_client(project)` makes the Cloud
        Storage client a job's code is uploaded with; by default google-cloud-storage's, which honours
        STORAGE_EMULATOR_HOST. `logging_client(project)` makes the Cloud Logging client `logs` reads with; by
        default google-cloud-logging's on its REST transport. `log_interval`, `log_lookback`, `log_grace`: see
        `logs`."""
        super().__init__(retry=retry, environ=environ, settings=settings)
        self.client_factory = client_factory
        self.storage_client = storage_client
        self.logging_client = logging_client
        self.log_interval = log_interval  # how often `logs(follow=True)` reads new entries
        self.log_lookback = log_lookback
        self.log_grace = log_grace
        self.log_page_size = log_page_size
        self._clients: dict[str, JobServiceClient] = {}
        self._logging_clients: dict[str, Any] = {}

    # -- render (pure) -------------------------------------------------------------------------------------
    def platform_refusals(self, job: TrainingJob, settings: VertexSettings) -> list[Problem]:
        return _plan(job, settings)[1]

    def data_refusals(self, job: TrainingJob, settings: VertexSettings) -> list[Problem]:
        return data_refusals(job, "Vertex AI", fuse=True)

    def node_path(self, job: TrainingJob, settings: VertexSettings, direction: str, name: str, location: Any) -> str:
        return data_node_path(location, fuse=True)

    def _render(self, job: TrainingJob, settings: VertexSettings, ids: Ids) -> Request:
        plan, problems = _plan(job, settings)
        if plan is None:
            raise Unsupported(self.name, problems)
        identity = ids.identity
        notes: list[str] = []
        pools: list[dict[str, Any]] = [{}, {}, {}, {}]
        bundle, staged = plan.bundle, plan.staged
        calls: list[HttpCall] = []
        if bundle is not None and staged is not None:
            calls.append(upload_call(*staged, bundle.ref))
            notes.append(f"ships {bundle.describe()} to gs://{staged[0]}/{staged[1]}")
        forms: set[str] = set()
        for pool in job.pools():
            machine, image = plan.pools[pool.role].machine, plan.pools[pool.role].image
            index = {"primary": 0, "workers": 1, "parameter_servers": 2, "evaluators": 3}[pool.role]
            command = node_command(job, pool, machine.gpu_count)
            if pool.secrets and (pool.role == "primary" or pool.secrets != job.pools()[0].secrets):
                notes.append(f"{pool.role}: {secrets.runtime_note(pool)}")
            if pool.role == "primary" and pool.command and runs_under_launcher(job, machine.gpu_count):
                notes.append(
                    f"Vertex AI starts one process per node: the command runs under crosstrain's launcher, which "
                    f"starts {job.processes_per_node(machine.gpu_count)} per node "
                    + (
                        "(crosstrain travels in the code package)"
                        if job.code
                        else "(the image needs crosstrain installed)"
                    )
                )
            package = None
            if staged is not None and bundle is not None and command:
                if pool.image is None:
                    package = (f"gs://{staged[0]}/{staged[1]}", command)
                    forms.add("package")
                else:
                    command = fuse_command(*staged, command, install=bool(bundle.requirements))
                    forms.add("fuse")
            pools[index] = _pool_spec(pool.replicas, machine, pool, command, image=image, package=package)
        if job.reduction_server is not None and plan.reducer is not None:
            replicas, why = plan.reducer
            notes.append(why)
            image = job.reduction_server.image or reduction_server_image(settings.region)
            pools[2] = {
                "replicaCount": str(replicas),
                "machineSpec": {"machineType": job.reduction_server.machine_type},
                "containerSpec": {"imageUri": image},
            }
        if "package" in forms:
            notes.append(
                "pools on a pre-built container run the code as a Python package: Vertex AI pip-installs it "
                "(with the job's requirements) and runs python -m crosstrain_code"
            )
        if "fuse" in forms:
            install = bundle is not None and bool(bundle.requirements)
            notes.append(
                "pools on your own image unpack the code from the Cloud Storage FUSE mount (/gcs/...) with python3 "
                "(the job's service account needs read access to the staging bucket)"
                + ("; the bootstrap pip-installs the requirements, so the image needs pip" if install else "")
            )
        while not pools[-1]:
            pools.pop()
        job_spec: dict[str, Any] = {"workerPoolSpecs": pools}
        scheduling = _scheduling(job, notes)
        if scheduling:
            job_spec["scheduling"] = scheduling
        service_account = settings.service_account or job.identity
        if service_account:
            job_spec["serviceAccount"] = service_account
        network = settings.network or job.network
        if network:
            job_spec["network"] = network
        output = settings.base_output_dir or job.output_dir
        if output:
            job_spec["baseOutputDirectory"] = {"outputUriPrefix": output}
        body = {"displayName": job.name, "labels": labels(job, identity, ids.fingerprint), "jobSpec": job_spec}
        parent = f"projects/{settings.project}/locations/{settings.region}"
        base = f"https://{settings.region}-aiplatform.googleapis.com/v1/{parent}/customJobs"
        find = HttpCall(
            "GET",
            f"{base}?{urlencode({'filter': _label_filter(identity)})}",
            purpose="find a job with this identity: a repeated submit adopts it (Vertex has no idempotency key)",
        )
        create = HttpCall(
            "POST",
            base,
            body,
            {"Content-Type": "application/json"},
            purpose="create the job; after an unknown outcome, look for the identity label before creating again; "
            "then list the label again, keep the earliest job and cancel any later duplicate",
        )
        return Request(
            "vertex",
            identity,
            job.name,
            (*calls, find, create),
            settings.model_dump(mode="json"),
            tuple(notes),
            code=bundle.ref if bundle else None,
        )

    def format(self, request: Request, fmt: str) -> str:
        if fmt == "gcloud":
            return gcloud_command(request)
        return super().format(request, fmt)

    # -- where credentials may go -------------------------------------------------------------------------
    binding_settings = ("project",)

    def _project_problems(self, project: str, path: str, what: str) -> list[Problem]:
        """A project id other than the configured one (a project number cannot be compared, and passes)."""
        configured = self.configured().get("project")
        if configured is None or project == configured or project.isdigit():
            return []
        return [
            Problem(
                path,
                f"the {what} is for project {project!r}, this machine is configured for {configured!r}",
                f"pass --set project={project} (or set CLOUDSDK_CORE_PROJECT) if that project is meant",
            )
        ]

    @staticmethod
    def _endpoint_problems(endpoint: Any, path: str, what: str) -> list[Problem]:
        if isinstance(endpoint, str) and _GOOGLE_HOST.fullmatch(endpoint):
            return []
        return [
            Problem(
                path,
                f"the {what} sends to {shown(endpoint)}, which is not a Vertex AI endpoint "
                "(<region>-aiplatform.googleapis.com); Google credentials go nowhere else",
                f"use a {what} made by crosstrain for Vertex AI",
            )
        ]

    def handle_problems(self, handle: JobHandle) -> list[Problem]:
        problems = self._endpoint_problems(handle.ref.get("endpoint"), "handle.ref.endpoint", "handle")
        name = handle.ref.get("name")
        parent = _PARENT.match(name) if isinstance(name, str) else None
        if parent is None or not re.fullmatch(r"projects/[^/]+/locations/[^/]+/customJobs/[^/]+", str(name)):
            return [
                *problems,
                Problem("handle.ref.name", f"{shown(name)} is not a CustomJob name", "use the handle as made"),
            ]
        project = handle.ref.get("project", parent["project"])
        return problems + self._project_problems(str(project), "handle.ref.project", "handle")

    def request_problems(self, request: Request) -> list[Problem]:
        problems = upload_problems(request.calls, request.code)
        for i, call in enumerate(request.calls):
            if call is not request.create and uploaded_object(call) is not None:
                continue  # an upload to storage.googleapis.com of this request's own code (upload_problems)
            url = urlsplit(call.url) if isinstance(call.url, str) else None
            endpoint = url.netloc if url is not None and url.scheme == "https" else call.url
            problems += self._endpoint_problems(endpoint, f"request.calls[{i}].url", "request")
            parent = _PARENT.fullmatch(url.path.removeprefix("/v1/").removesuffix("/customJobs")) if url else None
            if parent is None:
                problems.append(
                    Problem(f"request.calls[{i}].url", f"{shown(call.url)} is not a customJobs URL", "render it again")
                )
            else:
                problems += self._project_problems(unquote(parent["project"]), f"request.calls[{i}].url", "request")
        return problems

    # -- submit (sends) ------------------------------------------------------------------------------------
    def _client(self, endpoint: str) -> JobServiceClient:
        """The job service client on a regional endpoint, one per endpoint for this backend's life."""
        client = self._clients.get(endpoint)
        if client is None:
            client = self.client_factory(endpoint) if self.client_factory else gapic.job_service_client(endpoint)
            self._clients[endpoint] = client
        return client

    def _jobs(self, client: JobServiceClient, parent: str, identity: str) -> list[CustomJob]:
        """Every job in `parent` that carries `identity` in its identity label (cancelled ones too), earliest
        first: by creation time, then by name."""
        query = {"parent": parent, "filter": _label_filter(identity)}
        timeout = self.retry.call_timeout
        with gapic.calling(f"list jobs labelled {IDENTITY_LABEL}={identity}"):
            pager = client.list_custom_jobs(request=query, retry=None, timeout=timeout)
            found = [job for job in pager if job.labels.get(IDENTITY_LABEL) == identity]
        return sorted(found, key=_creation_order)

    def _cancel_duplicates(self, client: JobServiceClient, duplicates: list[CustomJob], survivor: CustomJob) -> None:
        """Cancel the jobs that carry the survivor's identity and were created after it."""
        for duplicate in duplicates:
            error = self._cancel(client, duplicate.name)
            if error is not None:
                raise SubmitError(
                    f"{duplicate.name} duplicates {survivor.name} (concurrent submits each created a job with "
                    f"{IDENTITY_LABEL}={survivor.labels.get(IDENTITY_LABEL)}) and could not be cancelled ({error}): "
                    "cancel it in the console, then submit again to adopt the earliest job",
                    job_may_exist=True,
                ) from error

    def _cancel(self, client: JobServiceClient, name: str) -> SubmitError | None:
        """Cancel a job. None when it is cancelled, being cancelled, or has ended (Vertex refuses to cancel a job
        that ended); else the error that kept it from being cancelled."""
        timeout = self.retry.call_timeout

        def cancel() -> None:
            with gapic.calling(f"cancel {name}"):
                client.cancel_custom_job(name=name, retry=None, timeout=timeout)

        try:
            self.retry.poll(cancel)
        except TransientError as error:
            return error
        except SubmitError as error:
            state = STATE_MAP.get(self._get(client, name).state.name, JobState.UNKNOWN)
            return None if state is JobState.CANCELLING or state.terminal else error
        return None

    def _get(self, client: JobServiceClient, name: str) -> CustomJob:
        def get() -> CustomJob:
            with gapic.calling(f"get {name}"):
                return client.get_custom_job(name=name, retry=None, timeout=self.retry.call_timeout)

        return self.retry.poll(get)

    def _upload(self, request: Request) -> None:
        """Upload the request's code to each upload call's object, unless it is there already."""
        project = self.request_settings(request).project
        factory, extra = self.storage_client, self.extra or ""
        ship_code(request, lambda: factory(project) if factory else storage_client(project, extra), self.retry)

    def send(self, request: Request) -> JobHandle:
        self.check_request(request)
        self._upload(request)
        create = request.create
        url = urlparse(create.url)
        endpoint = url.netloc
        parent = url.path.removeprefix("/v1/").removesuffix("/customJobs")
        custom_job = gapic.custom_job(create.body)
        client = self._client(endpoint)
        identity = request.identity

        def live() -> list[CustomJob]:
            return [job for job in self._jobs(client, parent, identity) if job.state.name not in _CANCELLED]

        def find() -> CustomJob | None:
            return next(iter(live()), None)

        def send_create() -> CustomJob:
            with gapic.calling(f"create a job in {parent}"):
                return client.create_custom_job(
                    parent=parent, custom_job=custom_job, retry=None, timeout=self.retry.call_timeout
                )

        # A live job that carries the identity is an earlier submit: adopt it if it was made from this request.
        # Cancelled jobs are skipped, so cancelling a job frees its identity.
        existing = self.retry.poll(live)
        if existing:
            survivor = existing[0]
            self.check_same_request(request, survivor.labels.get(FINGERPRINT_LABEL), survivor.name)
            self._cancel_duplicates(client, existing[1:], survivor)
            return self.issue(_handle(identity, survivor.name, endpoint, parent, adopted=True))

        # No idempotency key: after an unknown outcome `create` looks for the label for the settle window
        # before creating again. Concurrent submits may still each create a job, so every submit then lists
        # the label and keeps the earliest job, cancelling the others: all of them return the same survivor.
        created = self.retry.create(send_create, dedupes=self.capabilities.dedupes_create, find=find, identity=identity)
        try:
            listed = self.retry.poll(lambda: self._jobs(client, parent, identity))
        except SubmitError as error:
            raise SubmitError(
                f"{created.name} was created, and listing {IDENTITY_LABEL}={identity} to check for a duplicate from "
                f"a concurrent submit failed ({error}): submit again to adopt the earliest job",
                job_may_exist=True,
            ) from error
        if created.name not in {job.name for job in listed}:  # not listed yet
            listed = sorted([*listed, created], key=_creation_order)
        survivors = [job for job in listed if job.state.name not in _CANCELLED]
        if not survivors:
            raise SubmitError(
                f"{created.name} was created with identity {identity} and then cancelled by someone else; "
                f"nothing with this identity runs. To run it, {self.conflict_fix}",
                job_may_exist=True,
            )
        survivor = survivors[0]
        self._cancel_duplicates(client, survivors[1:], survivor)
        found = survivor.labels.get(FINGERPRINT_LABEL)
        if found != request.fingerprint:  # a concurrent submit of another request under the same identity won
            mine = "" if survivor.name == created.name else f"; this submit's own {created.name} was cancelled"
            self.check_same_request(request, found, f"{survivor.name}, created by a concurrent submit{mine}")
        return self.issue(_handle(identity, survivor.name, endpoint, parent, adopted=survivor.name != created.name))

    def status(self, handle: JobHandle) -> JobStatus:
        self.check_handle(handle)
        job = self._get(self._client(handle.ref["endpoint"]), handle.ref["name"])
        native = job.state.name
        state = STATE_MAP.get(native, JobState.UNKNOWN)
        if state is JobState.FAILED:
            return JobStatus(state, native, self._failure(handle, job))
        return JobStatus(state, native, job.error.message)

    def _failure(self, handle: JobHandle, job: CustomJob) -> str:
        """Why a failed job failed: the replica Vertex names in the job's error (`The replica workerpool0-0
        exited with a non-zero status of 1 ...`), that replica's last log lines from Cloud Logging where they can
        be read, and the kind of failure with what to do next."""
        recorded = job.error.message or ""
        replica = _REPLICA.search(recorded)
        task = replica[1] if replica else None
        tail: list[str] = []
        if task is not None:
            try:
                since = _rfc3339(_created(job) or datetime.now(timezone.utc) - timedelta(days=30))
                entries = self._read(handle, since, task=task, newest=_FAILURE_ENTRIES)
                lines = [line for entry in entries for line in _entry_lines(entry, prefixed=False)]
                tail = last_lines(lines, _TAIL)
            except CrosstrainError:  # the logs are an aid here: the state and the job's error stand without them
                tail = []
        what = f"replica {_who(task)} failed" if task else "the job failed"
        return summary(f"the first failure seen: {what}", recorded, tail, handle.console_url)

    def cancel(self, handle: JobHandle) -> None:
        """Cancel the job; a job that has already ended is left as it is."""
        self.check_handle(handle)
        error = self._cancel(self._client(handle.ref["endpoint"]), handle.ref["name"])
        if error is not None:
            raise error

    def list_jobs(self, overrides: Mapping[str, Any] | None = None) -> Iterator[JobSummary]:
        """The jobs in the configured project and region that carry crosstrain's identity label
        (`customJobs.list` with the filter `labels.crosstrain-id:*`), newest first."""
        settings = resolve_settings(
            self.settings_model, self.name, overrides={**self.overrides, **(overrides or {})}, environ=self.environ
        )
        parent = f"projects/{settings.project}/locations/{settings.region}"
        endpoint = f"{settings.region}-aiplatform.googleapis.com"
        client = self._client(endpoint)
        query = {"parent": parent, "filter": f"labels.{IDENTITY_LABEL}:*"}

        def listed() -> list[CustomJob]:
            with gapic.calling(f"list the crosstrain jobs in {parent}"):
                pager = client.list_custom_jobs(request=query, retry=None, timeout=self.retry.call_timeout)
                return [job for job in pager if job.labels.get(IDENTITY_LABEL)]

        for job in sorted(self.retry.poll(listed), key=_creation_order, reverse=True):
            native = job.state.name
            created = type(job).pb(job).create_time
            handle = _handle(job.labels[IDENTITY_LABEL], job.name, endpoint, parent, adopted=False)
            yield JobSummary(
                handle.identity,
                STATE_MAP.get(native, JobState.UNKNOWN),
                native,
                created.seconds + created.nanos / 1e9,
                handle.console_url,
                handle,
            )

    def logs(self, handle: JobHandle, *, follow: bool = False) -> Iterator[str]:
        """The job's log entries from Cloud Logging (`entries:list` with the filter `resource.type="ml_job" AND
        resource.labels.job_id="<id>"`, oldest first), each line prefixed with the replica that wrote it
        (`[workerpool1-0 node 1]`, from the entry's `task_name` label). With `follow`, the entries are read
        again every `log_interval` seconds while the job runs, from a cursor `log_lookback` seconds behind the
        newest entry seen (Cloud Logging may ingest an entry after a later one): an entry already yielded (by
        its timestamp, log and insertId) is not yielded again. Once the job has ended, reading goes on for
        `log_grace` seconds (the last entries reach Cloud Logging after the job ends), then ends."""
        self.check_handle(handle)
        client = self._client(handle.ref["endpoint"])
        job = self._get(client, handle.ref["name"])
        cursor = _created(job) or datetime.now(timezone.utc) - timedelta(days=30)
        seen: dict[tuple[str, str, str], datetime] = {}
        ended_at: float | None = None
        while True:
            ended = not follow or STATE_MAP.get(job.state.name, JobState.UNKNOWN).terminal
            if ended and ended_at is None:
                ended_at = time.monotonic()
            for entry in self._read(handle, _rfc3339(cursor)):
                key = (str(entry.timestamp), str(entry.log_name), str(entry.insert_id))
                if key in seen:
                    continue
                seen[key] = entry.timestamp or cursor
                yield from _entry_lines(entry, prefixed=True)
            if seen:
                newest = max(seen.values())
                cursor = max(cursor, newest - timedelta(seconds=self.log_lookback))
                for key in [key for key, at in seen.items() if at < cursor]:
                    del seen[key]  # older than any later read can return
            if ended and (not follow or ended_at is None or time.monotonic() - ended_at >= self.log_grace):
                return
            self.retry.sleep(self.log_interval)
            if not ended:
                job = self._get(client, handle.ref["name"])

    def _read(self, handle: JobHandle, since: str, *, task: str | None = None, newest: int = 0) -> list[Any]:
        """The job's log entries at or after `since` (an RFC 3339 time), oldest first: every replica's, or only
        `task`'s; `newest`: only the last that many. One read (`entries:list`, paged), retried as a poll."""
        project = str(handle.ref.get("project") or handle.ref["name"].split("/")[1])
        client = self._logging(project)
        clauses = ['resource.type="ml_job"', f'resource.labels.job_id="{handle.job_id}"', f'timestamp>="{since}"']
        if task is not None:
            clauses.append(f'resource.labels.task_name="{task}"')

        def read() -> list[Any]:
            with gapic.calling(f"read the logs of job {handle.job_id} from Cloud Logging"):
                return list(
                    client.list_entries(
                        resource_names=[f"projects/{project}"],
                        filter_=" AND ".join(clauses),
                        order_by="timestamp desc" if newest else "timestamp asc",
                        page_size=newest or self.log_page_size,
                        max_results=newest or None,
                    )
                )

        entries: list[Any] = self.retry.poll(read)
        return entries[::-1] if newest else entries

    def _logging(self, project: str) -> Any:
        """google-cloud-logging's client for `project`, one per project for this backend's life."""
        client = self._logging_clients.get(project)
        if client is None:
            client = self.logging_client(project) if self.logging_client else gapic.logging_client(project)
            self._logging_clients[project] = client
        return client


#: The replica Vertex AI names in a failed job's error ("The replica workerpool0-0 exited with a non-zero status
#: of 1. ..."), and the pool and index in a replica's name.
_REPLICA = re.compile(r"\breplica (workerpool\d+-\d+)")
_TASK = re.compile(r"workerpool(\d+)-(\d+)")
#: How many of the failing replica's last entries are read, and how many lines of them a status shows.
_FAILURE_ENTRIES = 50
_TAIL = 5


def _who(task: str) -> str:
    """A replica's name with the node it is, for the training pools (0: node 0; 1: node 1 + index)."""
    match = _TASK.fullmatch(task)
    if match is None or match[1] not in ("0", "1"):
        return task
    node = 0 if match[1] == "0" else 1 + int(match[2])
    return f"{task} node {node}"


def _entry_task(entry: Any) -> str:
    """The replica that wrote a log entry (`resource.labels.task_name`, else the entry's `task_name` label, as
    gcloud ai custom-jobs stream-logs reads them); `service` for Vertex AI's own messages; empty if neither."""
    resource = getattr(entry, "resource", None)
    labels = getattr(entry, "labels", None) or {}
    task = (getattr(resource, "labels", None) or {}).get("task_name") or labels.get("task_name") or ""
    trial = labels.get("ml.googleapis.com/trial_id")
    who = _who(str(task)) if task else ""
    return f"trial {trial} {who}".strip() if trial else who


def _entry_lines(entry: Any, *, prefixed: bool) -> list[str]:
    """A log entry's lines: its text payload, or a JSON payload's `message` (the whole JSON where it has
    none), each prefixed with `[replica]` where `prefixed` and the entry names one."""
    payload = entry.payload
    if isinstance(payload, Mapping):
        text = str(payload.get("message") or json.dumps(dict(payload), sort_keys=True))
    else:
        text = "" if payload is None else str(payload)
    who = _entry_task(entry) if prefixed else ""
    prefix = f"[{who}] " if who else ""
    return [prefix + line for line in text.rstrip("\n").splitlines() or [""]]


def _created(job: CustomJob) -> datetime | None:
    """When the job was created (where the API said)."""
    pb = type(job).pb(job)
    return pb.create_time.ToDatetime(timezone.utc) if pb.HasField("create_time") else None


def _rfc3339(moment: datetime) -> str:
    """A time as Cloud Logging's filters take it (UTC, microseconds)."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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
        which = "neither primary nor workers have" if len(without) == 2 else f"{without[0]} has"
        pools = job.pools()
        path = next(p.machine_path for p in pools if p.role == without[0]) if len(without) == 1 else "reduction_server"
        problems.append(
            Problem(
                path,
                f"the reduction server speeds up NCCL all-reduce between GPU nodes, and {which} no GPUs",
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
    reducer = catalog.resolve("vertex", machine_type=server.machine_type, gpu=None, gpu_count=None)
    if reducer.gpu:
        problems.append(
            Problem(
                "reduction_server.machine_type",
                f"{server.machine_type} carries GPUs; reducers run on CPU machines",
                "use n1-highcpu-16 (the recommended reducer)",
            )
        )
    sizable = "primary" in machines and (not job.workers.replicas or "workers" in machines)
    if server.replicas == "auto" and sizable and not problems and _reducer_count(job, machines) is None:
        problems.append(_unsized(job, machines))
    return problems


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


# ---- --format gcloud ---------------------------------------------------------------------------------------
_FLAG_POOL_KEYS = {"replicaCount", "machineSpec", "containerSpec"}
_FLAG_SPEC_KEYS = {"workerPoolSpecs", "serviceAccount", "network"}


def gcloud_command(request: Request) -> str:
    """`gcloud ai custom-jobs create` for the request: flags where they express it all, else a `--config` file.

    gcloud applies `--command`/`--args` to every pool and has no flags for env, disks, scheduling or the output
    directory, so any of those (or a reduction server, whose pool takes no command) needs the config file.
    """
    body = request.create.body
    spec = body["jobSpec"]
    parent = urlparse(request.create.url).path.split("/")
    project, region = parent[3], parent[5]
    head = [
        "gcloud ai custom-jobs create",
        f"--project={project}",
        f"--region={region}",
        f"--display-name={body['displayName']}",
        "--labels=" + ",".join(f"{k}={v}" for k, v in body["labels"].items()),
    ]
    uploads = [where for call in request.calls[:-1] if (where := uploaded_object(call))]
    first = "".join(
        f"# crosstrain submit uploads the code package first (gcloud does not): gs://{bucket}/{name}\n"
        for bucket, name in uploads
    )
    unsent = sorted(set(body) - {"displayName", "labels", "jobSpec"})  # from targets.vertex.patch
    if unsent:
        first += f"# gcloud has no flag or config field for {', '.join(unsent)}; crosstrain submit sends them\n"
    flags = _pool_flags(spec)
    if flags is not None:
        return first + _shell(head + flags)
    config = f"{request.identity}.vertex.yaml"
    import yaml

    text = yaml.safe_dump(spec, sort_keys=False, default_flow_style=False, width=1000)
    lines = [f"cat > {shlex.quote(config)} <<'EOF'", text.rstrip("\n"), "EOF"]
    return first + "\n".join(lines) + "\n" + _shell([*head, f"--config={config}"])


def _shell(parts: list[str]) -> str:
    """One command per line group; the first part is the literal command, the rest are quoted arguments."""
    return " \\\n  ".join([parts[0], *(shlex.quote(part) for part in parts[1:])])


def _pool_flags(spec: Mapping[str, Any]) -> list[str] | None:
    """One `--worker-pool-spec` per pool plus the job-wide flags, or None where flags cannot say it all."""
    pools = spec["workerPoolSpecs"]
    if set(spec) - _FLAG_SPEC_KEYS or any(not pool or set(pool) - _FLAG_POOL_KEYS for pool in pools):
        return None
    if any(set(pool["machineSpec"]) - {"machineType", "acceleratorType", "acceleratorCount"} for pool in pools):
        return None  # e.g. a TPU topology from targets.vertex.patch
    containers = [pool["containerSpec"] for pool in pools]
    if any(set(c) - {"imageUri", "command", "args"} for c in containers):
        return None
    commands = {json.dumps([c.get("command"), c.get("args")]) for c in containers}
    if len(commands) > 1 or any("," in part for c in containers for part in c.get("command", []) + c.get("args", [])):
        return None  # gcloud sends one command to every pool, and splits list flags on commas
    flags = []
    for pool in pools:
        machine = pool["machineSpec"]
        parts = [f"machine-type={machine['machineType']}", f"replica-count={pool['replicaCount']}"]
        if "acceleratorType" in machine:
            parts += [
                f"accelerator-type={machine['acceleratorType']}",
                f"accelerator-count={machine['acceleratorCount']}",
            ]
        parts.append(f"container-image-uri={pool['containerSpec']['imageUri']}")
        flags.append("--worker-pool-spec=" + ",".join(parts))
    command, args = containers[0].get("command"), containers[0].get("args")
    if command:
        flags.append("--command=" + ",".join(command))
    if args:
        flags.append("--args=" + ",".join(args))
    for key, flag in (("serviceAccount", "--service-account"), ("network", "--network")):
        if key in spec:
            flags.append(f"{flag}={spec[key]}")
    return flags
