"""The AI Platform Training backend: render `trainingInput` from the plan, send it over REST, follow the job."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlsplit

from crosstrain import pricing, secrets
from crosstrain.adaptors import google_rest
from crosstrain.backends._google import (
    FINGERPRINT_LABEL,
    IDENTITY_LABEL,
    PYTHON_MODULE,
    SECRET_STORES,
    data_placement,
    labels,
    read_result,
    ship_code,
    staging_check,
    storage_client,
    upload_call,
    upload_problems,
    uploaded_object,
)
from crosstrain.backends.aiplatform import prices
from crosstrain.backends.aiplatform import sweep as aiplatform_sweep
from crosstrain.backends.aiplatform.plan import Plan, _data_notes, _package_args, _plan, _replica_config, scale_tier
from crosstrain.backends.aiplatform.settings import (
    _ENDING,
    _JOBS_PATH,
    _POOL_FIELDS,
    DEFAULT_MACHINE_TYPE,
    GOOGLE_ENDPOINTS,
    SHUTDOWN_NOTE,
    STATE_MAP,
    AIPlatformSettings,
    job_id,
)
from crosstrain.backends.base import (
    FINGERPRINT_WHY,
    IDENTITY_WHY,
    NODES_WHY,
    Backend,
    Capabilities,
    Ids,
)
from crosstrain.backends.binding import Binding, Place
from crosstrain.errors import Problem, SubmitError, Unsupported
from crosstrain.records import HttpCall, JobHandle, JobState, JobStatus, JobSummary, Request

if TYPE_CHECKING:
    from collections.abc import Callable

    import requests
    from google.cloud.storage import Client as StorageClient

    from crosstrain.preflight import Check
    from crosstrain.spec import TrainingJob


class AIPlatformBackend(Backend[AIPlatformSettings, Plan]):
    """Legacy AI Platform Training. Example: `crosstrain render job.yaml --target aiplatform --format gcloud`."""

    emulation_module = "crosstrain.backends.aiplatform.emulate"
    data_placement = data_placement("AI Platform Training", fuse=False)
    # No result_places: its nodes have no Cloud Storage mount, so a file rank 0 writes stays on the node.
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
        frameworks=frozenset({"pytorch", "tensorflow", "deepspeed"}),
        dedupes_create=True,  # the jobId is chosen at render time: a repeated create meets 409 ALREADY_EXISTS
        secret_stores=SECRET_STORES,
        code=True,
        requirements=True,  # the package's install_requires
        environments=True,
        sweeps=aiplatform_sweep.SUPPORT,
    )
    conflict_fix = "submit with --run-id new (or another run_id): AI Platform keeps a jobId for good"
    patch_schema = "crosstrain.backends.aiplatform"  # its schema.json
    price_package = prices.PACKAGE
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
    def plan(self, job: TrainingJob, settings: AIPlatformSettings) -> Plan:
        plan, problems = _plan(job, settings)
        if plan is None or problems:
            raise Unsupported(self.name, problems)
        return plan

    def preflight(self, job: TrainingJob, settings: AIPlatformSettings, plan: Plan) -> list[Check]:
        from crosstrain.backends.aiplatform import preflight

        def get(url: str) -> tuple[int, Any]:
            answer = self._call("GET", url, allow=tuple(range(400, 600)))
            return answer.status_code, answer.json() if answer.content else {}

        def staging() -> Check:
            factory, extra, project = self.storage_client, self.extra or "", settings.project
            bucket = f"gs://{plan.staged[0]}" if plan.staged else None
            found: Check = staging_check(
                bucket, lambda: factory(project) if factory else storage_client(project, extra)
            )
            return found

        return preflight.checks(settings, get, staging)

    def cost(self, job: TrainingJob, settings: AIPlatformSettings, plan: Plan) -> pricing.Cost:
        return prices.cost(job, settings, plan)

    def _render(self, job: TrainingJob, settings: AIPlatformSettings, plan: Plan, ids: Ids) -> Request:
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
            training_input["pythonVersion"] = plan.python
            if not settings.python_version:
                code_notes.append(
                    f"pythonVersion {plan.python}: crosstrain's bootstrap needs it, and runtime versions up to 1.15 "
                    "run Python 2.7 unless told"
                )
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
        sweep_notes: list[str] = []
        if job.sweep is not None:
            training_input["hyperparameters"] = aiplatform_sweep.hyperparameters(job.sweep)
            sweep_notes.append(aiplatform_sweep.note(job.sweep))
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
            notes=(
                SHUTDOWN_NOTE,
                *plan.notes,
                *tier_notes,
                *tf_notes,
                *code_notes,
                *secret_notes,
                *_data_notes(job),
                *sweep_notes,
            ),
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

    # -- where credentials may go -------------------------------------------------------------------------
    binding_settings = ("endpoint", "project")
    binding = Binding(
        origins=re.compile("|".join(map(re.escape, GOOGLE_ENDPOINTS))),
        service=f"Google's endpoint ({', '.join(GOOGLE_ENDPOINTS)})",
        nowhere_else="Google credentials go nowhere else",
        made_for="ml.googleapis.com",
        path=re.compile(r"(?:/[^?#]*)?" + _JOBS_PATH.pattern + "(?::cancel)?"),  # under an endpoint's own path
        url_form="an AI Platform <endpoint>/v1/projects/<project>/jobs URL",
        keys=("project",),
        origin_key="endpoint",
    )

    def handle_places(self, ref: Mapping[str, Any]) -> list[Place]:
        return [Place("handle.ref.url", ref.get("url"))]

    def credential_free(self, request: Request, call: HttpCall) -> bool:
        return call is not request.create and uploaded_object(call) is not None

    def upload_problems(self, request: Request) -> list[Problem]:
        return upload_problems(request.calls, request.code)

    # -- submit (sends) ------------------------------------------------------------------------------------
    def _client(self) -> requests.Session:
        """The injected session (tests), or an AuthorizedSession with Application Default Credentials."""
        return self.session or self.cached_client("session", google_rest.authorized_session)

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

    def result_bytes(self, handle: JobHandle) -> bytes:
        found = _JOBS_PATH.search(urlsplit(str(handle.ref["url"])).path)
        project, factory, extra = unquote(found["project"]) if found else "", self.storage_client, self.extra or ""
        return read_result(handle, lambda: factory(project) if factory else storage_client(project, extra), self.retry)

    def status(self, handle: JobHandle) -> JobStatus:
        self.check_handle(handle)
        job = self._get(handle.ref["url"])
        native = str(job.get("state", "STATE_UNSPECIFIED"))
        state = STATE_MAP.get(native, JobState.UNKNOWN)
        outcome = aiplatform_sweep.trials_outcome(job)
        if outcome is not None and isinstance(handle.ref, dict):  # a sweep: its trials, kept on the handle
            handle.ref["outcome"] = {"state": state.value, **outcome}
        trials = str(outcome["message"]) if outcome else ""
        said = "; ".join(m for m in (trials, str(job.get("errorMessage", ""))) if m)
        return JobStatus(state, native, said)

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
