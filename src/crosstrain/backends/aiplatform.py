"""`aiplatform`: legacy AI Platform Training (`ml.googleapis.com/v1`), a `Job` with a CUSTOM `trainingInput`.

Google shut the service down on 2025-01-31; the backend stays for rendering, offline validation and
projects that still hold its jobs. The same job file renders for Vertex AI with `--target vertex`.

The API has fixed pools (master, workers, parameter servers, evaluators), one `ReplicaConfig` each, an
accelerator enum that ends at `NVIDIA_TESLA_A100`, and no field for environment variables. `jobId` is chosen
by the client and a second create with the same id is refused with `409 ALREADY_EXISTS`, so the jobId
derived from the render-time identity is the idempotency key: a create that meets 409 reads the job and adopts
it only if its `crosstrain-id` label is this identity and its `crosstrain-fp` label this request's fingerprint
(a job made from another request is an `IdentityConflict`, and nothing is created).

A job with `code:` ships the folder as one sdist (`crosstrain.packaging`) to the `staging_bucket` setting, at a
content-addressed object, before the create (google-cloud-storage; an object that already holds the bundle is
not sent again). The job then names it in `trainingInput.packageUris`, with `pythonModule` `crosstrain_code`
(the bundle's bootstrap) and `args` `-- COMMAND...`, on a pre-built PyTorch container as every pool's
`imageUri` (`environment: pytorch[:X.Y]`, `targets.aiplatform.environment`) or your own image, or on a
`runtime_version`. The package carries the job's requirements (its install_requires).

Requests go over REST with google-auth's `AuthorizedSession`, through `crosstrain.adaptors.google_rest`
(imported only when something is sent), which maps every failure to crosstrain's three kinds. A handle or a
request from a file goes only to Google's endpoints (ml.googleapis.com, ml.mtls.googleapis.com) or the
configured `endpoint`, in the configured project where one is set, checked before credentials are loaded.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlsplit

from pydantic import Field, field_validator

from crosstrain import catalog, data, packaging, secrets
from crosstrain.adaptors import google_rest
from crosstrain.backends._google import (
    FINGERPRINT_LABEL,
    IDENTITY_LABEL,
    PYTHON_MODULE,
    SECRET_STORES,
    StagingBucket,
    code_refusals,
    data_node_path,
    data_refusals,
    label_problems,
    labels,
    launch_problems,
    node_command,
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
    origin_of,
    shown,
)
from crosstrain.environments import Runtime, Runtimes
from crosstrain.errors import Problem, SubmitError, Unsupported
from crosstrain.settings import TargetSettings, setting
from crosstrain.uploads import UploadRefused

if TYPE_CHECKING:
    from collections.abc import Callable

    import requests
    from google.cloud.storage import Client as StorageClient

    from crosstrain.spec import PoolView, TrainingJob

STATE_MAP = {
    "STATE_UNSPECIFIED": JobState.UNKNOWN,
    "QUEUED": JobState.QUEUED,
    "PREPARING": JobState.QUEUED,
    "RUNNING": JobState.RUNNING,
    "SUCCEEDED": JobState.SUCCEEDED,
    "FAILED": JobState.FAILED,
    "CANCELLING": JobState.CANCELLING,
    "CANCELLED": JobState.CANCELLED,
}

SHUTDOWN_NOTE = (
    "AI Platform Training was shut down on 2025-01-31; the same job file renders for Vertex AI with --target vertex"
)
#: The machine of a pool that names neither a machine type nor GPUs (the Vertex SDK's default too).
DEFAULT_MACHINE_TYPE = "n1-standard-4"
#: The API's documented minimum for `scheduling.maxWaitTime`.
MIN_MAX_WAIT_SECONDS = 1800
_JOB_ID_MAX = 128
_NETWORK = re.compile(r"projects/\d+/global/networks/[^/]+")
_BOOT_DISK_TYPES = ("pd-ssd", "pd-standard")
#: A job in these states answers a cancel with 400: there is nothing left to cancel.
_ENDING = frozenset({JobState.CANCELLING, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
# trainingInput keys for each crosstrain pool role: (machine type, replica count, replica config).
_POOL_FIELDS = {
    "primary": ("masterType", None, "masterConfig"),
    "workers": ("workerType", "workerCount", "workerConfig"),
    "parameter_servers": ("parameterServerType", "parameterServerCount", "parameterServerConfig"),
    "evaluators": ("evaluatorType", "evaluatorCount", "evaluatorConfig"),
}
#: Google's own API roots: where Google credentials may always go.
GOOGLE_ENDPOINTS = ("https://ml.googleapis.com", "https://ml.mtls.googleapis.com")
_JOBS_PATH = re.compile(r"/v1/projects/(?P<project>[^/]+)/jobs(?:/(?P<job>[^/:]+))?")


# ---- Pre-built PyTorch containers (masterConfig.imageUri of a package job) ------------------------------------
#: Source: https://cloud.google.com/ai-platform/training/docs/getting-started-pytorch and the ai-platform-samples
#: scripts (GoogleCloudPlatform/ai-platform-samples): `pytorch-{cpu,gpu}.1-N`, N from 4 to 10 seen.
#: The service is shut down and its list is gone: each entry below 1-10 is UNVERIFIED, as are the CPU flavours.
_AIP_IMAGE = "gcr.io/cloud-ml-public/training/pytorch-{flavour}.{version}"
_AIP_SOURCE = "https://cloud.google.com/ai-platform/training/docs/getting-started-pytorch"
RUNTIMES = Runtimes(
    "AI Platform Training",
    tuple(
        Runtime(
            f"1.{minor}",
            _AIP_IMAGE.format(flavour="gpu", version=f"1-{minor}"),
            _AIP_IMAGE.format(flavour="cpu", version=f"1-{minor}"),
            _AIP_SOURCE + ("" if minor == 10 else " (UNVERIFIED: seen in samples)"),
        )
        for minor in range(10, 3, -1)
    ),
    "targets.aiplatform.environment (an image URI) or targets.aiplatform.runtime_version",
)


class AIPlatformSettings(TargetSettings):
    project: str = setting(
        description="Google Cloud project id that owns the job.",
        env=("GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT"),
    )
    region: str = setting(
        "us-central1",
        description="Region the job runs in (trainingInput.region).",
        env=("CLOUD_ML_REGION", "GOOGLE_CLOUD_REGION"),
    )
    service_account: str | None = setting(
        None, description="Service account the job runs as; overrides the job's `identity`."
    )
    network: str | None = setting(
        None, description="projects/{number}/global/networks/{name} the job peers with; overrides the job's `network`."
    )
    job_dir: str | None = setting(
        None, description="gs:// path passed to the program as --job-dir; overrides the job's `output_dir`."
    )
    priority: int | None = Field(
        None, ge=0, le=1000, description="Scheduling priority among jobs that want the same accelerators (0-1000)."
    )
    staging_bucket: StagingBucket = setting(
        None,
        description="gs://BUCKET[/PREFIX] the job's `code` is uploaded to (as one content-addressed sdist).",
        env=("CROSSTRAIN_STAGING_BUCKET",),
    )
    environment: str | None = setting(
        None, description="A pre-built container image to run the job's code on; overrides the job's `environment`."
    )
    runtime_version: str | None = setting(
        None,
        description="An AI Platform runtime version to run the job's code on instead of a container "
        "(trainingInput.runtimeVersion; the runtimes hold TensorFlow, scikit-learn and XGBoost, not PyTorch).",
    )
    python_version: str | None = setting(None, description="The runtime's Python version, e.g. 3.7.")
    endpoint: str = setting(
        "https://ml.googleapis.com",
        description="API root (https://ml.mtls.googleapis.com for mTLS).",
        env=("CROSSTRAIN_AIPLATFORM_ENDPOINT",),
    )

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        # Google credentials go to this host: it must be a plain http(s) URL.
        if origin_of(value) is None:
            raise ValueError("the endpoint is not an http(s) URL; use one such as https://ml.googleapis.com")
        return value


def job_id(identity: str) -> str:
    """The jobId for an identity: letters, digits and underscores, starting with a letter, at most 128.

    Deterministic, so a retried or repeated create names the same job and meets 409 instead of making another.
    """
    text = re.sub(r"[^A-Za-z0-9_]", "_", identity)
    if not text[:1].isalpha():
        text = f"j_{text}"
    return text[:_JOB_ID_MAX]


@dataclass(frozen=True)
class _PoolPlan:
    machine: catalog.ResolvedMachine | None  # None: the pool names no machine (the default type)
    image: str | None  # None: a runtime version runs the job's package


@dataclass(frozen=True)
class _Plan:
    pools: dict[str, _PoolPlan]  # by role
    bundle: packaging.Bundle | None  # the code (or function) the job ships
    staged: tuple[str, str] | None  # (bucket, object) it goes to


def _plan(job: TrainingJob, settings: AIPlatformSettings) -> tuple[_Plan | None, list[Problem]]:
    """What the job is on AI Platform Training (each pool's machine and image, where its code goes), or every
    reason it cannot be: the render builds from the plan only. A reduction server is refused by the generic
    capability check, which points to --target vertex."""
    problems = label_problems(job)
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
    problems += secrets.needs_command(job, "AI Platform Training")
    if problems:
        return None, list(dict.fromkeys(problems))  # pools that inherit the same field report it once
    bundle = packaging.for_job(job)
    staged = staged_object(settings.staging_bucket, bundle.short) if bundle and settings.staging_bucket else None
    return _Plan(pools, bundle, staged), []


class AIPlatformBackend(Backend[AIPlatformSettings]):
    """Legacy AI Platform Training. Example: `crosstrain render job.yaml --target aiplatform --format gcloud`."""

    name = "aiplatform"
    title = "AI Platform Training (legacy, shut down 2025-01-31)"
    extra = "aiplatform"
    settings_model = AIPlatformSettings
    formats = ("json", "gcloud")
    handle_ref = {"url": str}  # what status, cancel and logs read
    capabilities = Capabilities(
        parameter_servers=True,
        evaluators=True,
        per_pool_images=True,
        per_pool_machines=True,
        per_pool_commands=True,
        logs=True,
        # AI Platform sets TF_CONFIG on every replica and runs parameter servers itself (google.md 3.2, 4).
        frameworks=frozenset({"pytorch", "tensorflow"}),
        dedupes_create=True,  # the jobId is chosen at render time: a repeated create meets 409 ALREADY_EXISTS
        secret_stores=SECRET_STORES,
        code=True,
        requirements=True,  # the package's install_requires
        environments=True,
    )
    conflict_fix = "submit with --run-id new (or another run_id): AI Platform keeps a jobId for good"
    patch_schema = "aiplatform"
    owned_fields = {
        ("jobId",): IDENTITY_WHY,
        ("labels", IDENTITY_LABEL): IDENTITY_WHY,
        ("labels", FINGERPRINT_LABEL): FINGERPRINT_WHY,
        ("trainingInput", "workerCount"): NODES_WHY,
        ("trainingInput", "parameterServerCount"): NODES_WHY,
        ("trainingInput", "evaluatorCount"): NODES_WHY,
    }
    planned_fields = {
        ("trainingInput",): "what the job runs and where",
        ("trainingInput", "masterConfig"): "the primary's machine and what it runs",
        ("trainingInput", "masterConfig", "imageUri"): "the image the job runs (set `image`)",
        ("trainingInput", "pythonModule"): "the module the job's package runs",
        ("trainingInput", "packageUris"): "the job's package",
    }

    def __init__(
        self,
        *,
        session: requests.Session | None = None,
        storage_client: Callable[[str], StorageClient] | None = None,
        **kwargs: Any,
    ) -> None:
        """`session`: the `requests.Session` calls go through; by default google-auth's `AuthorizedSession`
        with Application Default Credentials, made on the first call (tests pass one aimed at a loopback server).
        `storage_client(project)`: the Cloud Storage client a job's code is uploaded with; by default
        google-cloud-storage's, which honours STORAGE_EMULATOR_HOST."""
        super().__init__(**kwargs)
        self.session = session
        self.storage_client = storage_client

    # -- render (pure) -------------------------------------------------------------------------------------
    def platform_refusals(self, job: TrainingJob, settings: AIPlatformSettings) -> list[Problem]:
        return _plan(job, settings)[1]

    def data_refusals(self, job: TrainingJob, settings: AIPlatformSettings) -> list[Problem]:
        return data_refusals(job, "AI Platform Training", fuse=False)

    def node_path(
        self, job: TrainingJob, settings: AIPlatformSettings, direction: str, name: str, location: Any
    ) -> str:
        return data_node_path(location, fuse=False)

    def _render(self, job: TrainingJob, settings: AIPlatformSettings, ids: Ids) -> Request:
        plan, problems = _plan(job, settings)
        if plan is None:
            raise Unsupported(self.name, problems)
        identity = ids.identity
        tier = scale_tier(job)
        training_input: dict[str, Any] = {"scaleTier": tier.name if tier else "CUSTOM", "region": settings.region}
        secret_notes = [f"{p.role}: {secrets.runtime_note(p)}" for p in job.pools() if p.secrets]
        bundle = plan.bundle
        calls: list[HttpCall] = []
        code_notes: list[str] = []
        if bundle is not None and plan.staged is not None:
            bucket, name = plan.staged
            calls.append(upload_call(bucket, name, bundle.ref))
            training_input["packageUris"] = [f"gs://{bucket}/{name}"]
            training_input["pythonModule"] = PYTHON_MODULE
            primary = job.pools()[0]
            training_input["args"] = _package_args(job, primary, plan.pools[primary.role].machine)
            code_notes.append(f"ships {bundle.describe()} to gs://{bucket}/{name}")
            code_notes.append(
                "AI Platform pip-installs the package (with the job's requirements) and runs python -m "
                f"{PYTHON_MODULE} on every pool"
            )
        for pool in job.pools():
            type_key, count_key, config_key = _POOL_FIELDS[pool.role]
            machine, image = plan.pools[pool.role].machine, plan.pools[pool.role].image
            if tier is None:  # a scale tier picks the machines and their counts itself
                training_input[type_key] = (machine.machine_type if machine else None) or DEFAULT_MACHINE_TYPE
                if count_key:
                    training_input[count_key] = str(pool.replicas)
            training_input[config_key] = _replica_config(job, pool, machine, image=image, package=bundle is not None)
        if bundle is not None and not (training_input["masterConfig"].get("imageUri")):
            training_input["runtimeVersion"] = settings.runtime_version
            if settings.python_version:
                training_input["pythonVersion"] = settings.python_version
        scheduling: dict[str, Any] = {}
        if job.scheduling.timeout:
            scheduling["maxRunningTime"] = f"{job.scheduling.timeout}s"
        if job.scheduling.max_wait:
            scheduling["maxWaitTime"] = f"{job.scheduling.max_wait}s"
        if settings.priority is not None:
            scheduling["priority"] = settings.priority
        if scheduling:
            training_input["scheduling"] = scheduling
        optional = {
            "serviceAccount": settings.service_account or job.identity,
            "network": settings.network or job.network,
            "jobDir": settings.job_dir or job.output_dir,
        }
        training_input.update({k: v for k, v in optional.items() if v})
        tf_notes = []
        tensorflow_1 = (settings.runtime_version or "").split(".")[0] in {"1", "0"}
        if job.launch.framework == "tensorflow" and len(job.pools()) > 1 and not tensorflow_1:
            training_input["useChiefInTfConfig"] = True
            tf_notes.append(
                "TF_CONFIG names the primary `chief` (useChiefInTfConfig), as TensorFlow 2's tf.distribute expects; "
                "AI Platform sets TF_CONFIG on every replica (runtime versions 1.x keep `master`, which TensorFlow 1's "
                "Estimator expects)"
            )
        body = {
            "jobId": job_id(identity),
            "labels": labels(job, identity, ids.fingerprint),
            "trainingInput": training_input,
        }
        url = f"{settings.endpoint.rstrip('/')}/v1/projects/{quote(settings.project, safe='')}/jobs"
        call = HttpCall(
            "POST",
            url,
            body,
            {"Content-Type": "application/json"},
            purpose="create the job; a retry that meets 409 ALREADY_EXISTS for this jobId adopts it",
        )
        tier_notes = (
            [f"scale tier {tier.name}: {tier.description}; the service picks the machine types"] if tier else []
        )
        return Request(
            self.name,
            identity,
            job.name,
            (*calls, call),
            settings.model_dump(mode="json"),
            notes=(SHUTDOWN_NOTE, *tier_notes, *tf_notes, *code_notes, *secret_notes, *_data_notes(job)),
            code=bundle.ref if bundle else None,
        )

    def fingerprint_view(self, request: Request) -> Any:
        """The calls as the platform receives them, less the endpoint's host: the same job sent through
        ml.mtls.googleapis.com (or a regional or private endpoint) is the same job, under the same jobId."""
        views = super().fingerprint_view(request)
        return [
            {**view, "url": call.url if uploaded_object(call) else urlsplit(call.url).path}
            for view, call in zip(views, request.calls, strict=True)
        ]

    def format(self, request: Request, fmt: str) -> str:
        if fmt != "gcloud":
            return super().format(request, fmt)
        import yaml

        body = request.create.body
        config_file = f"{body['jobId']}.yaml"
        config = {"labels": body["labels"], "trainingInput": body["trainingInput"]}
        command = [
            "gcloud",
            "ai-platform",
            "jobs",
            "submit",
            "training",
            body["jobId"],
            f"--project={self.request_settings(request).project}",
            f"--region={body['trainingInput']['region']}",
            f"--config={config_file}",
        ]
        return (
            f"# {SHUTDOWN_NOTE}.\n"
            "# gcloud flags cannot express container commands, disks or scheduling, so the job is a --config file.\n"
            + "".join(
                f"# crosstrain submit uploads the code package first (gcloud does not): gs://{bucket}/{name}\n"
                for bucket, name in filter(None, map(uploaded_object, request.calls[:-1]))
            )
            + f"cat > {config_file} <<'EOF'\n{yaml.safe_dump(config, sort_keys=True)}EOF\n"
            f"{shlex.join(command)}\n"
        )

    # -- submit (sends) ------------------------------------------------------------------------------------
    # -- where credentials may go -------------------------------------------------------------------------
    binding_settings = ("endpoint", "project")

    def _url_problems(self, url: Any, path: str, what: str, *, job: bool) -> list[Problem]:
        """Whether `url` is on Google's or the configured endpoint, in the configured project if one is set."""
        configured = self.configured()
        mine = origin_of(configured.get("endpoint"))  # validated: None only where none is configured
        allowed = [*GOOGLE_ENDPOINTS, *([mine] if mine else [])]
        origin = origin_of(url)
        parts = _JOBS_PATH.search(urlsplit(url).path) if isinstance(url, str) and origin else None
        if origin is None or parts is None or bool(parts["job"]) != job:
            form = "<endpoint>/v1/projects/<project>/jobs" + ("/<jobId>" if job else "")
            return [
                Problem(path, f"{shown(url)} is not an AI Platform {form} URL", f"use the {what} as crosstrain made it")
            ]
        problems = []
        if origin not in allowed:
            problems.append(
                Problem(
                    path,
                    f"the {what} sends to {origin}, which is neither Google's endpoint nor the configured one "
                    f"({', '.join(dict.fromkeys(allowed))})",
                    f"if {origin} is your endpoint, set CROSSTRAIN_AIPLATFORM_ENDPOINT={origin} (or pass --set "
                    f"endpoint={origin}); else use a {what} made for ml.googleapis.com",
                )
            )
        project = unquote(parts["project"])
        if "project" in configured and project != configured["project"]:
            problems.append(
                Problem(
                    path,
                    f"the {what} is for project {project!r}, this machine is configured for {configured['project']!r}",
                    f"pass --set project={project} (or set GOOGLE_CLOUD_PROJECT) if that project is meant",
                )
            )
        return problems

    def handle_problems(self, handle: JobHandle) -> list[Problem]:
        url = handle.ref.get("url")
        problems = self._url_problems(url, "handle.ref.url", "handle", job=True)
        project = handle.ref.get("project")
        parts = _JOBS_PATH.search(urlsplit(url).path) if isinstance(url, str) and not problems else None
        if parts and project is not None and project != unquote(parts["project"]):
            problems.append(
                Problem(
                    "handle.ref.project",
                    f"{shown(project)} is not the project of the handle's URL",
                    "use the handle as made",
                )
            )
        return problems

    def request_problems(self, request: Request) -> list[Problem]:
        return upload_problems(request.calls, request.code) + [
            problem
            for i, call in enumerate(request.calls)
            if call is request.create or uploaded_object(call) is None  # uploads: upload_problems
            for problem in self._url_problems(
                call.url, f"request.calls[{i}].url", "request", job=call is not request.create
            )
        ]

    def _client(self) -> requests.Session:
        """The injected session (tests), or an AuthorizedSession with Application Default Credentials."""
        if self.session is None:
            self.session = google_rest.authorized_session()
        return self.session

    def _call(self, method: str, url: str, body: Any = None, *, allow: tuple[int, ...] = ()) -> requests.Response:
        return google_rest.call(self._client(), method, url, body, timeout=self.retry.call_timeout, allow=allow)

    def _get(self, url: str) -> dict[str, Any]:
        return google_rest.json_of(self._call("GET", url))

    def _upload(self, request: Request) -> None:
        """Upload the request's code to each upload call's object, unless it is there already."""
        project = self.request_settings(request).project
        factory, extra = self.storage_client, self.extra or ""
        ship_code(request, lambda: factory(project) if factory else storage_client(project, extra), self.retry)

    def send(self, request: Request) -> JobHandle:
        self.check_request(request)
        self._upload(request)
        settings = self.request_settings(request)
        call = request.create
        body = call.body
        job_url = f"{call.url}/{body['jobId']}"

        def adopt(job: dict[str, Any]) -> tuple[dict[str, Any], bool]:
            self._check_ours(request, job, job_url)
            return job, True

        def create() -> tuple[dict[str, Any], bool]:
            response = self._call("POST", call.url, body, allow=(409,))
            if response.status_code == 409:  # the jobId is taken: ours from an earlier attempt, or not ours
                return adopt(self.retry.poll(lambda: self._get(job_url)))
            return google_rest.json_of(response), False

        def find() -> tuple[dict[str, Any], bool] | None:
            response = self._call("GET", job_url, allow=(404,))
            return None if response.status_code == 404 else adopt(google_rest.json_of(response))

        _, adopted = self.retry.create(
            create, dedupes=self.capabilities.dedupes_create, find=find, identity=request.identity
        )
        return self.issue(
            JobHandle(
                self.name,
                request.identity,
                body["jobId"],
                console_url=f"https://console.cloud.google.com/ai-platform/jobs/{body['jobId']}?project={settings.project}",
                ref={"url": job_url, "project": settings.project},
                adopted=adopted,
            )
        )

    def _check_ours(self, request: Request, job: dict[str, Any], where: str) -> None:
        """Adopt only the job this request made: our identity label (else the jobId is someone else's) and our
        fingerprint label (else it was made from a different request)."""
        found = job.get("labels") or {}
        wanted_id = request.create.body["jobId"]
        if found.get(IDENTITY_LABEL) != request.identity:
            raise SubmitError(
                f"AI Platform already has a job {wanted_id!r} ({where}) that crosstrain did not make for this job: "
                f"its {IDENTITY_LABEL} label is {found.get(IDENTITY_LABEL)!r}, not {request.identity!r}. Nothing "
                f"was created. To run this job, {self.conflict_fix}"
            )
        self.check_same_request(request, found.get(FINGERPRINT_LABEL), where)

    def status(self, handle: JobHandle) -> JobStatus:
        self.check_handle(handle)
        job = self._get(handle.ref["url"])
        native = str(job.get("state", "STATE_UNSPECIFIED"))
        return JobStatus(STATE_MAP.get(native, JobState.UNKNOWN), native, str(job.get("errorMessage", "")))

    def cancel(self, handle: JobHandle) -> None:
        self.check_handle(handle)
        url = f"{handle.ref['url']}:cancel"

        def cancel_once() -> None:
            response = self._call("POST", url, {}, allow=(400,))
            if response.status_code == 400 and self.status(handle).state not in _ENDING:
                raise google_rest.failure(response)
            # a 400 for a job that has ended or is being cancelled: nothing left to cancel

        self.retry.poll(cancel_once)

    def list_jobs(self, overrides: Mapping[str, Any] | None = None) -> Iterator[JobSummary]:
        """Refused: the service is shut down, so there are no jobs to list."""
        raise Unsupported(
            self.name,
            [Problem("list", f"there are no jobs to list: {SHUTDOWN_NOTE}", "crosstrain list -t vertex")],
        )

    def logs(self, handle: JobHandle, *, follow: bool = False) -> Iterator[str]:
        """Where the logs are: AI Platform wrote them to Cloud Logging under the `ml_job` resource (the service is
        shut down, so nothing is followed)."""
        self.check_handle(handle)
        query = f'resource.type="ml_job"\nresource.labels.job_id="{handle.job_id}"'
        project = handle.ref.get("project", "")
        yield f"Cloud Logging filter: {' AND '.join(query.splitlines())}"
        yield f"gcloud logging read {shlex.quote(' AND '.join(query.splitlines()))} --project={project}"
        yield f"console: https://console.cloud.google.com/logs/query;query={quote(query, safe='')}?project={project}"


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
