"""The Vertex AI backend: render the CustomJob from the plan, send it through the GAPIC client, follow the job."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlparse

from crosstrain import pricing, secrets
from crosstrain.adaptors import gapic, google_rest
from crosstrain.backends._google import (
    FINGERPRINT_LABEL,
    IDENTITY_LABEL,
    SECRET_STORES,
    data_placement,
    fuse_command,
    labels,
    node_command,
    read_result,
    runs_under_launcher,
    ship_code,
    staging_check,
    storage_client,
    upload_call,
    upload_problems,
    uploaded_object,
)
from crosstrain.backends.base import FINGERPRINT_WHY, IDENTITY_WHY, NODES_WHY, Backend, Capabilities, Ids
from crosstrain.backends.binding import Binding, Place
from crosstrain.backends.vertex import prices
from crosstrain.backends.vertex import sweep as vertex_sweep
from crosstrain.backends.vertex.gcloud import gcloud_command
from crosstrain.backends.vertex.plan import (
    Plan,
    _creation_order,
    _handle,
    _label_filter,
    _plan,
    _pool_spec,
    _scheduling,
    reduction_server_image,
)
from crosstrain.backends.vertex.settings import _BARE_HOST, _CANCELLED, _GOOGLE_HOST, STATE_MAP, VertexSettings
from crosstrain.errors import CrosstrainError, Problem, SubmitError, TransientError, Unsupported
from crosstrain.records import HttpCall, JobHandle, JobState, JobStatus, JobSummary, Request

if TYPE_CHECKING:
    from collections.abc import Callable

    from google.cloud.aiplatform_v1 import CustomJob, JobServiceClient
    from google.cloud.storage import Client as StorageClient

    from crosstrain.preflight import Check
    from crosstrain.retry import RetryPolicy
    from crosstrain.spec import TrainingJob


#: The GAPIC method suffix of a sweep's HyperparameterTuningJob (a job's is `custom_job`).
TUNING = "hyperparameter_tuning_job"


def _kind(name: str) -> str:
    """Which kind of job a name or URL path names: `custom_job`, or `hyperparameter_tuning_job` (a sweep)."""
    return TUNING if "/hyperparameterTuningJobs/" in name else "custom_job"


class VertexBackend(Backend[VertexSettings, Plan]):
    """Vertex AI CustomJobs. Example: `crosstrain submit job.yaml --target vertex --set project=my-proj`."""

    emulation_module = "crosstrain.backends.vertex.emulate"
    data_placement = data_placement("Vertex AI", fuse=True)
    result_places = {"gs": "gs://my-bucket/runs"}  # written through the FUSE mount, read with the storage client
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
        frameworks=frozenset({"pytorch", "tensorflow", "deepspeed"}),
        secret_stores=SECRET_STORES,
        code=True,
        requirements=True,  # the package's install_requires, or the bootstrap's --install on your own image
        environments=True,
        sweeps=vertex_sweep.SUPPORT,
    )
    conflict_fix = (
        "submit with --run-id new (or another run_id), or cancel the old job (a cancelled job frees its identity)"
    )
    patch_schema = "crosstrain.backends.vertex"  # its schema.json
    price_package = prices.PACKAGE
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
        config_profile: str | None = None,
        logging_client: Callable[[str], Any] | None = None,
        log_interval: float = 5.0,
        log_lookback: float = 60.0,
        log_grace: float = 15.0,
        log_page_size: int = 1000,
        quota_session: Callable[[], Any] | None = None,
        quota_url: str = "https://cloudquotas.googleapis.com",
    ) -> None:
        """`client_factory(endpoint)` makes the job service client for a regional endpoint (a host name, as
        the rendered URL has it); by default the GAPIC client on its REST transport with Application Default
        Credentials. Tests pass one pointed at a loopback service. `storage_client(project)` makes the Cloud
        Storage client a job's code is uploaded with; by default google-cloud-storage's, which honours
        STORAGE_EMULATOR_HOST. `logging_client(project)` makes the Cloud Logging client `logs` reads with; by
        default google-cloud-logging's on its REST transport. `log_interval`, `log_lookback`, `log_grace`: see
        `logs`."""
        super().__init__(retry=retry, environ=environ, settings=settings, config_profile=config_profile)
        self.client_factory = client_factory
        self.storage_client = storage_client
        self.logging_client = logging_client
        self.log_interval = log_interval  # how often `logs(follow=True)` reads new entries
        self.log_lookback = log_lookback
        self.log_grace = log_grace
        self.log_page_size = log_page_size
        #: `crosstrain check`'s Cloud Quotas reads: a `requests.Session` that authenticates (google-auth's
        #: `AuthorizedSession` by default), and where the API is (tests: a loopback server).
        self.quota_session, self.quota_url = quota_session, quota_url

    # -- render (pure) -------------------------------------------------------------------------------------
    def plan(self, job: TrainingJob, settings: VertexSettings) -> Plan:
        plan, problems = _plan(job, settings)
        if plan is None or problems:
            raise Unsupported(self.name, problems)
        return plan

    def preflight(self, job: TrainingJob, settings: VertexSettings, plan: Plan) -> list[Check]:
        from crosstrain.backends.vertex import preflight

        def list_jobs(parent: str) -> Any:
            client = self._client(f"{settings.region}-aiplatform.googleapis.com")
            pager = client.list_custom_jobs(request={"parent": parent, "page_size": 1}, timeout=self.retry.call_timeout)
            return next(iter(pager.pages), None)

        def quota_infos(project: str) -> list[dict[str, Any]]:
            session = (self.quota_session or google_rest.authorized_session)()
            url = f"{self.quota_url}/v1/projects/{project}/locations/global/services/{preflight.SERVICE}/quotaInfos"
            timeout = self.retry.call_timeout

            def page(query: str) -> tuple[int, Any]:
                answer = google_rest.call(session, "GET", f"{url}?{query}", timeout=timeout, allow=range(400, 600))
                return answer.status_code, answer.json() if answer.content else {}

            return preflight.read_pages(page, "quotaInfos")

        def staging() -> Check:
            factory, extra = self.storage_client, self.extra or ""
            bucket = f"gs://{plan.staged[0]}" if plan.staged else None
            project = settings.project
            found: Check = staging_check(
                bucket, lambda: factory(project) if factory else storage_client(project, extra)
            )
            return found

        return preflight.checks(job, settings, plan, list_jobs, quota_infos, staging)

    def cost(self, job: TrainingJob, settings: VertexSettings, plan: Plan) -> pricing.Cost:
        return prices.cost(job, settings, plan)

    def _render(self, job: TrainingJob, settings: VertexSettings, plan: Plan, ids: Ids) -> Request:
        identity = ids.identity
        notes: list[str] = list(plan.notes)
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
        job_labels = labels(job, identity, ids.fingerprint)
        body: dict[str, Any] = {"displayName": job.name, "labels": job_labels, "jobSpec": job_spec}
        parent = f"projects/{settings.project}/locations/{settings.region}"
        base = f"https://{settings.region}-aiplatform.googleapis.com/v1/{parent}/customJobs"
        if job.sweep is not None:
            body = vertex_sweep.tuning_body(job.sweep, job.name, job_labels, job_spec)
            base = base.removesuffix("/customJobs") + "/hyperparameterTuningJobs"
            notes += vertex_sweep.notes(job.sweep, plan.reducer is not None)
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
    binding = Binding(
        origins=re.compile(r"https://" + _GOOGLE_HOST.pattern),
        service="a Vertex AI endpoint (<region>-aiplatform.googleapis.com)",
        nowhere_else="Google credentials go nowhere else",
        made_for="Vertex AI",
        path=re.compile(
            r"/v1/projects/(?P<project>[^/]+)/locations/[^/]+/(?:customJobs|hyperparameterTuningJobs)(?:/[^/]+)?"
        ),
        url_form="a CustomJob name or customJobs URL (projects/<project>/locations/<region>/customJobs)",
        keys=("project",),
        numbered=True,
    )

    def handle_places(self, ref: Mapping[str, Any]) -> list[Place]:
        """The job's endpoint (a host name) and its name, the path every read of the job goes to."""
        endpoint, name = ref.get("endpoint"), ref.get("name")
        bare = isinstance(endpoint, str) and _BARE_HOST.fullmatch(endpoint)
        path = f"/v1/{name}" if isinstance(name, str) else name
        return [
            Place("handle.ref.endpoint", f"https://{endpoint}" if bare else None, endpoint, path, "handle.ref.name")
        ]

    def credential_free(self, request: Request, call: HttpCall) -> bool:
        return call is not request.create and uploaded_object(call) is not None

    def upload_problems(self, request: Request) -> list[Problem]:
        return upload_problems(request.calls, request.code)

    # -- submit (sends) ------------------------------------------------------------------------------------
    def _client(self, endpoint: str) -> JobServiceClient:
        """The job service client on a regional endpoint, one per endpoint for this backend's life."""
        factory = self.client_factory or gapic.job_service_client
        return self.cached_client(("jobs", endpoint), lambda: factory(endpoint))

    def _jobs(self, client: JobServiceClient, parent: str, identity: str, kind: str = "custom_job") -> list[Any]:
        """Every job in `parent` that carries `identity` in its identity label (cancelled ones too), earliest
        first: by creation time, then by name. `kind`: custom_job, or hyperparameter_tuning_job (a sweep)."""
        query = {"parent": parent, "filter": _label_filter(identity)}
        timeout = self.retry.call_timeout
        with gapic.calling(f"list jobs labelled {IDENTITY_LABEL}={identity}"):
            pager = getattr(client, f"list_{kind}s")(request=query, retry=None, timeout=timeout)
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
                getattr(client, f"cancel_{_kind(name)}")(name=name, retry=None, timeout=timeout)

        try:
            self.retry.poll(cancel)
        except TransientError as error:
            return error
        except SubmitError as error:
            state = STATE_MAP.get(self._get(client, name).state.name, JobState.UNKNOWN)
            return None if state is JobState.CANCELLING or state.terminal else error
        return None

    def _get(self, client: JobServiceClient, name: str) -> Any:
        def get() -> Any:
            with gapic.calling(f"get {name}"):
                return getattr(client, f"get_{_kind(name)}")(name=name, retry=None, timeout=self.retry.call_timeout)

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
        collection = url.path.rsplit("/", 1)[1]
        parent = url.path.removeprefix("/v1/").removesuffix(f"/{collection}")
        kind = _kind(url.path + "/")
        body = gapic.tuning_job(create.body) if kind == TUNING else gapic.custom_job(create.body)
        client = self._client(endpoint)
        identity = request.identity

        def live() -> list[CustomJob]:
            return [job for job in self._jobs(client, parent, identity, kind) if job.state.name not in _CANCELLED]

        def find() -> CustomJob | None:
            return next(iter(live()), None)

        def send_create() -> Any:
            with gapic.calling(f"create a job in {parent}"):
                return getattr(client, f"create_{kind}")(
                    parent=parent, **{kind: body}, retry=None, timeout=self.retry.call_timeout
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
            listed = self.retry.poll(lambda: self._jobs(client, parent, identity, kind))
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

    def result_bytes(self, handle: JobHandle) -> bytes:
        project, factory, extra = str(handle.ref["project"]), self.storage_client, self.extra or ""
        return read_result(handle, lambda: factory(project) if factory else storage_client(project, extra), self.retry)

    def status(self, handle: JobHandle) -> JobStatus:
        self.check_handle(handle)
        job = self._get(self._client(handle.ref["endpoint"]), handle.ref["name"])
        native = job.state.name
        state = STATE_MAP.get(native, JobState.UNKNOWN)
        if _kind(handle.ref["name"]) == TUNING:  # a sweep: its trials and the best so far, kept on the handle
            outcome = vertex_sweep.trials_outcome(job)
            if isinstance(handle.ref, dict):
                handle.ref["outcome"] = {"state": state.value, **outcome}
            return JobStatus(state, native, str(outcome["message"]))
        if state is JobState.FAILED:
            return JobStatus(state, native, self._failure(handle, job))
        return JobStatus(state, native, job.error.message)

    def _failure(self, handle: JobHandle, job: CustomJob) -> str:
        """Why a failed job failed: the replica Vertex names in the job's error (`The replica workerpool0-0
        exited with a non-zero status of 1 ...`), that replica's last log lines from Cloud Logging where they can
        be read, and the kind of failure with what to do next."""
        from crosstrain.failures import last_lines, summary  # here: a render has no use for it

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
        settings = self.list_settings(overrides)
        parent = f"projects/{settings.project}/locations/{settings.region}"
        endpoint = f"{settings.region}-aiplatform.googleapis.com"
        client = self._client(endpoint)
        query = {"parent": parent, "filter": f"labels.{IDENTITY_LABEL}:*"}

        def listed() -> list[Any]:  # the custom jobs, and the tuning jobs (a sweep each: one row)
            with gapic.calling(f"list the crosstrain jobs in {parent}"):
                timeout = self.retry.call_timeout
                jobs = [*client.list_custom_jobs(request=query, retry=None, timeout=timeout)]
                jobs += client.list_hyperparameter_tuning_jobs(request=query, retry=None, timeout=timeout)
                return [job for job in jobs if job.labels.get(IDENTITY_LABEL)]

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
                sweep=vertex_sweep.listed(job) if _kind(job.name) == TUNING else None,
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
        first, was_ended = True, False

        def ended() -> bool:
            nonlocal job, first, was_ended
            if not first and not was_ended:  # the state after the pause
                job = self._get(client, handle.ref["name"])
            first = False
            was_ended = not follow or STATE_MAP.get(job.state.name, JobState.UNKNOWN).terminal
            return was_ended

        def read(final: bool) -> Iterator[str]:
            nonlocal cursor
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

        yield from self.follow(read, ended, follow=follow, interval=self.log_interval, grace=self.log_grace)

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
        factory = self.logging_client or gapic.logging_client
        return self.cached_client(("logging", project), lambda: factory(project))


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
