"""The Azure ML backend: render from the plan, send through the MLClient's ARM pipeline, follow the job."""

from __future__ import annotations

import functools
import json
import re
import shlex
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from crosstrain import code_archive, data, folders, packaging, pricing, secrets
from crosstrain.adaptors import azure
from crosstrain.backends.azureml import prices, trials
from crosstrain.backends.azureml import sweep as azure_sweep
from crosstrain.backends.azureml.cli_yaml import _CLI_FIELDS, cli_yaml
from crosstrain.backends.azureml.logs import (
    _ERROR_LINE,
    WORKSPACE_KEYS,
    _log_prefix,
    _log_who,
    _LogReader,
)
from crosstrain.backends.azureml.plan import Plan, _distribution, _identity, _plan
from crosstrain.backends.azureml.settings import (
    _JOB_TIERS,
    _PRIORITY,
    _SEGMENT,
    AML_IGNORE_FILES,
    AML_RESOURCE,
    ANONYMOUS_ENVIRONMENT,
    API_VERSION,
    ARM,
    BLOB_CONTAINER,
    ENVIRONMENT_API_VERSION,
    FINGERPRINT_PROPERTY,
    SAS_CONTAINER,
    STATE_MAP,
    STORE_CONTAINER,
    USER_TOKEN_HEADER,
    AzureMLSettings,
    settings_dump,
)
from crosstrain.backends.azureml.wire import (
    _build_calls,
    _code_calls,
    _CodeCalls,
    _data_bindings,
    _is_blob_upload,
    _is_input_upload,
    _is_store_upload,
    _job_url,
    _send,
    _store_calls,
    _StoreCalls,
    _Upload,
    _upload_call,
    build_environment_version,
    code_asset_name,
    code_content_hash,
    data_problem,
    fingerprint_of_job,
    input_uri,
    iso_duration,
    local_upload,
    object_hash,
    studio_url,
    upload_blobs,
    workspace_path,
)
from crosstrain.backends.base import (
    FINGERPRINT_WHY,
    NODES_WHY,
    Backend,
    Capabilities,
    Ids,
    bundle_command,
    launcher_command,
)
from crosstrain.backends.binding import Binding, Place
from crosstrain.data import ALL_MODES, Placement, Reach
from crosstrain.errors import CrosstrainError, Problem, SubmitError, Unsupported
from crosstrain.records import HttpCall, JobHandle, JobState, JobStatus, JobSummary, Request
from crosstrain.uploads import UploadRefused

T = TypeVar("T")

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential
    from azure.core.pipeline.transport import HttpTransport

    from crosstrain.preflight import Check
    from crosstrain.retry import RetryPolicy
    from crosstrain.spec import TrainingJob


class AzureMLBackend(Backend[AzureMLSettings, Plan]):
    """Azure ML command jobs. Example: `crosstrain submit job.yaml -t azureml --set workspace=my-ws`."""

    keeps_outputs_folder = True  # Azure ML uploads outputs/ with the run

    emulation_module = "crosstrain.backends.azureml.emulate"
    data_placement = Placement(
        "Azure ML",
        dict.fromkeys(("azureml", "azure", "local", "none"), Reach(ALL_MODES)),
        "azureml:NAME:VERSION data assets, azureml:// datastore paths, abfss:// and https:// Azure Storage URIs, and "
        "local files and folders as inputs (uploaded to the workspace's blob store)",
        check=data_problem,
    )
    name = "azureml"
    title = "Azure Machine Learning"
    extra = "azureml"
    settings_model = AzureMLSettings
    formats = ("json", "az-yaml")
    handle_ref = {
        "subscription_id": str,
        "resource_group": str,
        "workspace": str,
    }  # what status and cancel read
    capabilities = Capabilities(
        spot=True,
        logs=True,
        dedupes_create=True,  # the job name is chosen at render time and the PUT is create-or-update
        frameworks=frozenset({"pytorch", "mpi", "tensorflow", "deepspeed", "horovod"}),
        secret_stores=frozenset({"azure"}),  # Key Vault, read at start by crosstrain's runtime
        code=True,  # a code asset, as `command(code=DIR)` makes it
        requirements=True,  # with code: pip-installed by the bundle's bootstrap when each node starts
        environments=True,  # curated environments (RUNTIMES), or targets.azureml.environment
        sweeps=azure_sweep.SUPPORT,
    )
    sweep_reference = staticmethod(azure_sweep.reference)
    patch_schema = "crosstrain.backends.azureml"  # its schema.json
    price_package = prices.PACKAGE
    owned_fields = {
        ("properties", "properties", FINGERPRINT_PROPERTY): FINGERPRINT_WHY,
        ("properties", "resources", "instanceCount"): NODES_WHY,
        (
            "properties",
            "distribution",
        ): "the processes Azure starts on each node, which the ranks are planned for "
        "(set launch or targets.azureml.distributed_job_config)",
    }

    def __init__(
        self,
        *,
        transport: HttpTransport[Any, Any] | None = None,
        credential: TokenCredential | None = None,
        retry: RetryPolicy | None = None,
        environ: Mapping[str, str] | None = None,
        settings: Mapping[str, Any] | None = None,
        config_profile: str | None = None,
        storage_transport: HttpTransport[Any, Any] | None = None,
        log_interval: float = 5.0,
    ) -> None:
        super().__init__(retry=retry, environ=environ, settings=settings, config_profile=config_profile)
        self.log_interval = log_interval  # how often `logs(follow=True)` looks for new lines
        self.transport = transport  # None: azure-core's requests transport
        #: The transport of the blob reads (the job's logs); None: azure-core's requests transport.
        self.storage_transport = storage_transport
        self.credential = credential  # None: DefaultAzureCredential, asked for a token at the first call

    # -- render (pure) -------------------------------------------------------------------------------------
    def plan(self, job: TrainingJob, settings: AzureMLSettings) -> Plan:
        plan, problems = _plan(job, settings)
        if plan is None or problems:
            raise Unsupported(self.name, problems)
        return plan

    @classmethod
    def refresh_prices(
        cls, items: Iterable[str], api_url: str | None = None
    ) -> tuple[list[pricing.Price], list[str]] | None:
        return prices.refresh(items, base_url=api_url or prices.RETAIL_PRICES)

    def preflight(self, job: TrainingJob, settings: AzureMLSettings, plan: Plan) -> list[Check]:
        from crosstrain.backends.azureml import preflight

        return preflight.checks(self._client(settings.model_dump()), job, settings, plan)

    def cost(self, job: TrainingJob, settings: AzureMLSettings, plan: Plan) -> pricing.Cost:
        return prices.cost(job, settings, plan)

    def platform_refusals(self, job: TrainingJob, settings: AzureMLSettings) -> list[Problem]:
        problems = []
        try:
            bundle = packaging.for_job(job, ignore_files=AML_IGNORE_FILES)
            if bundle is not None:  # every file read as it will be shipped: one by one, or into the archive
                archived = code_archive.archives(bundle, settings.code_archive_above)
                code_content_hash(code_archive.shipped(bundle, archived))
        except UploadRefused as refused:
            problems.append(refused.problem)
        return problems

    def data_refusals(self, job: TrainingJob, settings: AzureMLSettings) -> list[Problem]:
        """Azure ML reads its data assets, datastores and Azure Storage URIs, in every mode (`data_placement`);
        the service replaces `${{inputs.NAME}}` in the command only."""
        problems = super().data_refusals(job, settings)
        for path, direction, name in data.references(job):
            if ".env." in f".{path}":
                problems.append(
                    Problem(
                        path,
                        f"Azure ML replaces ${{{{{direction}.{name}}}}} in the command only, not in environment "
                        "variables",
                        f"pass ${{{direction}.{name}}} to the program in `command` or `args`",
                    )
                )
        return problems

    def node_path(
        self,
        job: TrainingJob,
        settings: AzureMLSettings,
        direction: str,
        name: str,
        location: Any,
    ) -> str:
        return "${{" + f"{direction}.{name}" + "}}"

    def _render(self, job: TrainingJob, settings: AzureMLSettings, plan: Plan, ids: Ids) -> Request:
        identity = ids.identity
        workspace = workspace_path(settings)
        job_url = f"{ARM}{workspace}/jobs/{identity}?api-version={API_VERSION}"
        calls = [
            HttpCall(
                "GET",
                job_url,
                purpose="look for a job with this name first: adopt it if its fingerprint is this request's, "
                "refuse if not; create only on 404 (the PUT below is create-or-update)",
            )
        ]
        notes = [plan.environment_note] if plan.environment_note else []
        headers = {"Content-Type": "application/json"}
        environment_id = plan.environment_id
        if plan.registers_image is not None:
            calls.append(
                HttpCall(
                    "PUT",
                    f"{ARM}{environment_id}?api-version={ENVIRONMENT_API_VERSION}",
                    {
                        "properties": {
                            **({"condaFile": plan.conda} if plan.conda else {}),
                            "image": plan.registers_image,
                            "isAnonymous": True,
                            "isArchived": False,
                        }
                    },
                    headers,
                    purpose="register the image as an anonymous environment (as azure-ai-ml does); idempotent",
                )
            )
        if plan.build is not None or plan.inputs:  # the blob store's calls, once, before its first upload
            calls += _store_calls(workspace, headers)
        if plan.build is not None:
            build = plan.build
            calls += _build_calls(build.folder, build.upload_hash, build.dockerfile_path, environment_id, headers)
        for local in plan.inputs:  # after the environment: the SDK resolves a job's inputs last
            calls.append(_upload_call(local.folder, local.upload_hash, f"input {local.name}", local.name))
            notes.append(
                f"input {local.name}: uploads {local.folder.describe()} to the workspace's blob store once "
                f"per content, and the job reads {local.uri}"
            )
        bundle = packaging.for_job(job, ignore_files=AML_IGNORE_FILES)
        code_id = None
        if bundle is not None:
            archived = code_archive.archives(bundle, settings.code_archive_above)
            code_id, code_calls = _code_calls(bundle, workspace, headers, archived)
            calls[1:1] = code_calls  # after the job lookup, before the environment: the SDK's order
            notes.append(f"ships {bundle.describe()} as code asset {code_asset_name(bundle, archived)}")
            if archived:
                notes.append(code_archive.note(bundle, "targets.azureml.code_archive_above"))
            if bundle.requirements:
                notes.append(
                    f"the bootstrap pip-installs {', '.join(bundle.requirements)} once on every node before the "
                    "command (crosstrain_code --install; a node's other processes wait for it)"
                )
        command = plan.command
        # A shell line runs in Azure ML's own shell as it is: the node runs exactly the line the job file has.
        line = job.pools()[0].shell_line
        if plan.launcher_processes is not None:
            command = launcher_command(command, nproc_per_node=plan.launcher_processes, nnodes=plan.nodes)
        elif plan.framework == "mpi" and bundle is not None and job.launch.framework != "horovod":
            # MPI names the rank only in OMPI_*; crosstrain travels with the code, and its launcher runs each
            # rank's command with torch's variables (RANK, LOCAL_RANK, MASTER_ADDR...) that frameworks read.
            # Horovod reads MPI's own: its ranks run the command as written.
            command = launcher_command(command, nproc_per_node=1)
            notes.append(
                "each MPI rank runs the command under crosstrain's launcher, which sets torch's env:// variables"
            )
        pool = job.pools()[0]
        if pool.secrets:  # outermost: read the secrets, then start the launcher or the command
            command = secrets.resolver_command(command)
            notes.append(secrets.runtime_note(pool))
        if bundle is not None:  # from the snapshot root, which holds crosstrain_code/: the code's own folder
            command = bundle_command(command, install=bool(bundle.requirements))
        if command != plan.command:
            line = None  # wrapped: the shell line runs under bash -c, inside the wrapper's argv
        resources: dict[str, Any] = {"instanceCount": plan.nodes, "properties": {}}
        if not settings.compute:
            resources["instanceType"] = plan.machine.machine_type
        if settings.shm_size:
            resources["shmSize"] = settings.shm_size
        if settings.docker_args:
            resources["dockerArgs"] = settings.docker_args
        properties: dict[str, Any] = {
            "jobType": "Command",
            "displayName": job.name,
            "experimentName": settings.experiment or job.name,
            "command": line if line is not None else shlex.join(command),
            "environmentId": environment_id,
            "environmentVariables": plan.env,
            "inputs": _data_bindings(job, "inputs", workspace, {local.name: local.uri for local in plan.inputs}),
            "outputs": _data_bindings(job, "outputs", workspace),
            "distribution": _distribution(plan),
            "resources": resources,
            "tags": dict(job.labels),
            "properties": {FINGERPRINT_PROPERTY: ids.fingerprint},
            "isArchived": False,
        }
        if settings.compute:
            properties["computeId"] = f"{workspace}/computes/{settings.compute}"
        if code_id is not None:
            properties["codeId"] = code_id
        if job.scheduling.timeout:
            properties["limits"] = {
                "jobLimitsType": "Command",
                "timeout": iso_duration(job.scheduling.timeout),
            }
        queue: dict[str, Any] = {}
        tier = "spot" if job.scheduling.spot else settings.job_tier
        if tier:
            queue["jobTier"] = _JOB_TIERS[tier]
        if settings.priority:
            queue["priority"] = _PRIORITY[settings.priority]
        if queue:
            properties["queueSettings"] = queue
        as_submitter = ""
        if job.identity:
            properties["identity"] = _identity(job.identity)
            if properties["identity"] == {"identityType": "UserIdentity"}:
                as_submitter = (
                    f"; submit adds the header {USER_TOKEN_HEADER}: the submitter's token for {AML_RESOURCE} from "
                    "the same Azure credential (never rendered), as azure-ai-ml does for a user identity"
                )
        if job.sweep is not None:
            properties = azure_sweep.sweep_properties(properties, job.sweep)
            notes.append(azure_sweep.note(job.sweep))
        calls.append(
            HttpCall(
                "PUT",
                job_url,
                {"properties": properties},
                headers,
                purpose="create the command job under its fixed name, with this request's fingerprint in its "
                "properties; sent only when the GET found no job" + as_submitter,
            )
        )
        if plan.nodes > 1 and plan.machine.gpu_count and not plan.machine.infiniband:
            notes.append(
                f"{plan.machine.machine_type} has no InfiniBand: multi-node GPU training will be slow over "
                "Ethernet; prefer an RDMA size with an `r` (e.g. Standard_ND96asr_v4, Standard_ND96isr_H100_v5)"
            )
        if settings.compute and plan.machine.machine_type:
            notes.append(
                f"the VM size is the one of cluster {settings.compute}; {plan.machine.machine_type} is used only "
                "for process counts and checks"
            )
        return Request(
            "azureml",
            identity,
            job.name,
            tuple(calls),
            settings_dump(settings),
            tuple(notes),
            code=bundle.ref if bundle is not None else None,
            build_context=plan.build.folder.ref if plan.build is not None else None,
            inputs={local.name: local.folder.ref for local in plan.inputs},
        )

    def format(self, request: Request, fmt: str) -> str:
        if fmt != "az-yaml":
            return super().format(request, fmt)
        import yaml

        props = request.create.body.get("properties") or {}
        if props.get("jobType") == "Sweep":
            form = azure_sweep.sweep_yaml(cli_yaml(azure_sweep.as_command(request)), props)
            props = azure_sweep.as_command(request).create.body["properties"]
        else:
            form = cli_yaml(request)
        text = yaml.safe_dump(form, sort_keys=False, allow_unicode=True, width=120)
        unsaid = sorted(set(props) - _CLI_FIELDS)  # a patch's
        if unsaid:
            text = (
                f"# not in this YAML: {', '.join(unsaid)} (targets.azureml.patch); crosstrain submit sends them\n"
                + text
            )
        return text

    # -- where credentials may go -------------------------------------------------------------------------
    binding_settings = WORKSPACE_KEYS
    binding = Binding(
        # ARM, and the run history service of the workspace's region (a sweep's trials), where azure-ai-ml sends
        # the same credential: `https://<region>.api.azureml.ms`, as the workspace's discovery URL names it
        origins=re.compile(re.escape(ARM) + "|" + trials.RUN_HISTORY.pattern),
        service=f"Azure Resource Manager ({ARM}) or a region's run history (https://<region>.api.azureml.ms)",
        nowhere_else="the Azure token goes nowhere else",
        made_for="Azure ML",
        path=re.compile(
            r"/subscriptions/(?P<subscription_id>[^/]+)/resourceGroups/(?P<resource_group>[^/]+)"
            r"/providers/Microsoft\.MachineLearningServices/workspaces/(?P<workspace>[^/]+)(?:/.*)?",
            re.IGNORECASE,
        ),
        url_form="a URL in an Azure ML workspace",
        keys=WORKSPACE_KEYS,
        scope="workspace",
        names=_SEGMENT,
        name_form="an Azure resource name",
        required=WORKSPACE_KEYS,
        fold_case=True,
    )

    def handle_places(self, ref: Mapping[str, Any]) -> list[Place]:
        return [Place("handle.ref.url", ref["url"])] if "url" in ref else []

    def credential_free(self, request: Request, call: HttpCall) -> bool:
        # sent with startPendingUpload's SAS, or the blob store's secret: never the ARM token
        return _is_blob_upload(call) or _is_store_upload(call)

    def upload_problems(self, request: Request) -> list[Problem]:
        problems = []
        if request.code is None and any(_is_blob_upload(call) for call in request.calls):
            problems.append(Problem("request.code", "the request uploads code but names no folder", "render it again"))
        store_uploads = [call for call in request.calls if _is_store_upload(call)]
        if request.build_context is None and any(not _is_input_upload(call) for call in store_uploads):
            problems.append(
                Problem(
                    "request.build_context",
                    "the request uploads a build context but names no folder",
                    "render it again",
                )
            )
        for call in store_uploads:
            name = str(call.body["input"]) if _is_input_upload(call) else None
            if name is not None and name not in request.inputs:
                problems.append(
                    Problem(
                        f"request.inputs.{name}",
                        f"the request uploads input {name} but names no file or folder for it",
                        "render it again",
                    )
                )
        return problems

    # -- submit (sends) ------------------------------------------------------------------------------------
    def _client(self, ref: Mapping[str, Any]) -> Any:
        """The workspace's MLClient (one per workspace and backend); nothing is sent until the first call."""
        key = (
            str(ref["subscription_id"]),
            str(ref["resource_group"]),
            str(ref["workspace"]),
        )
        return self.cached_client(
            key,
            lambda: azure.ml_client(
                self._azure_credential(), *key, timeout=self.retry.call_timeout, transport=self.transport
            ),
        )

    def _azure_credential(self) -> TokenCredential:
        """The one credential of this backend's Azure calls (ARM, a blob store without a secret, the submitter's
        token): the one passed in, else a DefaultAzureCredential made at its first use."""
        if self.credential is None:
            self.credential = azure.default_credential()
        return self.credential

    def _submitter_token(self, create: HttpCall) -> dict[str, str]:
        """The header azure-ai-ml's `create_or_update` adds to the job PUT of a job with a user identity (and to
        nothing else): the submitter's token for Azure ML, from the same credential, checked to be for it. Only
        on a PUT to the ARM host this backend talks to (`check_request` held every URL to it)."""
        identity = (create.body.get("properties") or {}).get("identity") or {}
        if identity.get("identityType") != "UserIdentity":
            return {}
        if create.method != "PUT" or urlsplit(create.url).netloc != urlsplit(ARM).netloc:
            raise SubmitError(f"{create.url.split('?')[0]}: the job PUT goes to {ARM} only; render the request again")
        what = f"get the submitter's token for {AML_RESOURCE} (the job runs as its submitter: identity user_identity)"
        return {USER_TOKEN_HEADER: azure.aml_token(self._azure_credential(), AML_RESOURCE, what)}

    def send(self, request: Request) -> JobHandle:
        """Look for the job by its name first; adopt it if this request made it, refuse if another did; else
        register the environment (idempotent) and PUT the job, retried only where that cannot go wrong."""
        self.check_request(request)
        settings = self.request_settings(request)
        pipeline = self._client(settings.model_dump()).jobs.service_client_01_2025_preview  # its ARM pipeline
        create = request.create
        reads = [call for call in request.calls[:-1] if call.method == "GET"]
        lookup = reads[0] if reads else HttpCall("GET", create.url)
        where = f"Azure ML job {request.identity} in workspace {settings.workspace}"

        def find() -> tuple[dict[str, Any], bool] | None:
            found = _send(pipeline, lookup, missing_ok=True)
            return None if found is None else (found[1], True)

        existing = self.retry.poll(find)
        if existing is None:
            as_submitter = self._submitter_token(create)  # before any upload: a credential without one fails first
            code = _CodeCalls.of(request)
            if code is not None:
                bundle = packaging.check_unchanged(code.folder)
                archived = code_archive.archives(bundle, settings.code_archive_above)
                code_id = self._ship_code(pipeline, code, bundle, archived)
                if code_id != create.body["properties"].get("codeId"):
                    properties = {**create.body["properties"], "codeId": code_id}
                    create = HttpCall(
                        create.method,
                        create.url,
                        {**create.body, "properties": properties},
                        create.headers,
                        create.purpose,
                    )
            store = _StoreCalls.of(request)
            if store is not None:
                self._ship_to_store(pipeline, store, create)
            shipped = (*(code.all if code else ()), *(store.all if store else ()))
            for call in request.calls[:-1]:
                if call.method != "GET" and call not in shipped:
                    # the content-addressed environment PUT: repeating it changes nothing
                    self.retry.poll(functools.partial(_send, pipeline, call))

            def put() -> tuple[dict[str, Any], bool]:
                sent = _send(pipeline, create, headers=as_submitter)
                assert sent is not None
                return sent[1], sent[0] == 200  # 200: the PUT found the job (a concurrent submit made it)

            existing = self.retry.create(
                put,
                dedupes=self.capabilities.dedupes_create,
                find=find,
                identity=request.identity,
            )
        answer, adopted = existing
        if adopted:  # a job this submit did not make (or cannot tell it made): only this request's may be adopted
            self.check_same_request(request, fingerprint_of_job(answer), where)
        studio = ((answer.get("properties") or {}).get("services") or {}).get("Studio") or {}
        ref = {
            **{key: getattr(settings, key) for key in WORKSPACE_KEYS},
            "url": create.url,
        }
        return self.issue(
            JobHandle(
                "azureml",
                request.identity,
                request.identity,
                console_url=studio.get("endpoint") or studio_url(ref, request.identity),
                ref=ref,
                adopted=adopted,
            )
        )

    def _ship_code(self, pipeline: Any, code: _CodeCalls, bundle: packaging.Bundle, archived: bool) -> str:
        """The code asset the job runs, made the way azure-ai-ml makes it: found by its content hash (nothing
        uploaded), else uploaded to the container startPendingUpload hands out and registered. Its ARM id.
        `archived`: the user's files go as one archive (`crosstrain.code_archive`)."""
        files = code_archive.shipped(bundle, archived)
        name, content_hash = code_asset_name(bundle, archived), code_content_hash(files)
        if (
            code.upload.url != f"{SAS_CONTAINER}/{name}/"
            or f"&hash={content_hash}&" not in code.lookup.url
            or code.id != f"{urlsplit(code.register.url).path}"
        ):
            raise SubmitError(
                f"the request's code calls do not name the content of {bundle.folder} (asset {name}, hash "
                f"{content_hash}); render the request again"
            )
        found = self.retry.poll(lambda: _send(pipeline, code.lookup))
        assert found is not None
        hits = [v for v in (found[1].get("value") or []) if isinstance(v, dict) and v.get("id")]
        if hits:
            return str(hits[0]["id"]).removeprefix(ARM)
        answer = self.retry.poll(lambda: _send(pipeline, code.start))
        assert answer is not None
        reference = answer[1].get("blobReferenceForConsumption") or {}
        sas_uri = str((reference.get("credential") or {}).get("sasUri") or "")
        blob_uri = str(reference.get("blobUri") or "")
        if not sas_uri or not blob_uri:
            raise SubmitError(f"{code.start.url.split('?')[0]}: Azure answered without a container to upload to")
        prefix = f"{name}/"
        what = f"upload {packaging.counted(len(files), 'file')} of {bundle.folder} to the workspace's blob store"
        self.retry.poll(
            lambda: azure.upload_blobs(
                sas_uri,
                [(prefix + f.path, f.read) for f in files],
                metadata={"upload_status": "completed", "name": name, "version": "1"},
                timeout=self.retry.call_timeout,
                what=what,
            )
        )
        body = json.loads(json.dumps(code.register.body).replace(BLOB_CONTAINER, blob_uri.rstrip("/")))
        register = HttpCall(code.register.method, code.register.url, body, code.register.headers)
        self.retry.poll(functools.partial(_send, pipeline, register))
        return code.id

    def _ship_to_store(self, pipeline: Any, store: _StoreCalls, create: HttpCall) -> None:
        """The uploads to the workspace's default blob store, made the way azure-ai-ml makes them: every folder
        listed again first (refused if it changed since render, before anything is sent), the store read with its
        secret (or, where the store takes identities or the secret is refused, the Azure credential), then each
        folder uploaded unless its first blob says an upload completed there (by crosstrain or azure-ai-ml): the
        build context, whose anonymous environment is registered with the container URL filled in, then each
        local input."""
        checked = [self._checked_upload(upload, store, create) for upload in store.uploads]
        found = self.retry.poll(lambda: _send(pipeline, store.store))
        assert found is not None
        answer = found[1].get("properties") or {}
        kind = str(answer.get("datastoreType") or "")
        account, container = str(answer.get("accountName") or ""), str(answer.get("containerName") or "")
        if kind != "AzureBlob" or not account or not container:
            raise SubmitError(
                f"{store.store.url.split('?')[0]}: the workspace's default blob store is {kind or 'of no kind'}, "
                "not an Azure Blob container with an account: azure-ai-ml uploads local folders there"
            )
        account_url = (
            f"{answer.get('protocol') or 'https'}://{account}.blob.{answer.get('endpoint') or 'core.windows.net'}"
        )
        credential: Any = None
        if str((answer.get("credentials") or {}).get("credentialsType") or "") != "None":
            secrets = self.retry.poll(lambda: _send(pipeline, store.secrets, forbidden_ok=True))
            secret = secrets[1] if secrets is not None else {}
            if secret.get("sasToken"):
                credential = str(secret["sasToken"])
            elif secret.get("key"):
                credential = {"account_name": account, "account_key": str(secret["key"])}
        if credential is None:  # an identity-based store, or its secret refused: the Azure credential, as the SDK
            credential = self._azure_credential()

        def on_store(act: Callable[[Any], T]) -> T:
            client = azure.blob_container(
                account_url, container, credential, transport=self.storage_transport, timeout=self.retry.call_timeout
            )
            try:
                return act(client)
            finally:
                if self.storage_transport is None:  # its own transport; one passed in is the caller's to close
                    client.close()

        def ship(folder: folders.Folder, blobs: list[tuple[str, Callable[[], bytes]]], done: dict[str, str]) -> None:
            what = f"upload {packaging.counted(len(blobs), 'file')} of {folder.folder} to the workspace's blob store"
            metadata = self.retry.poll(lambda: on_store(lambda client: azure.blob_metadata(client, blobs[0][0], what)))
            if (metadata or {}).get("upload_status") != "completed":
                self.retry.poll(
                    lambda: on_store(lambda client: azure.upload_blobs_to(client, blobs, metadata=done, what=what))
                )

        for upload, folder, upload_hash in checked:
            blobs = [(name, f.read) for name, f in upload_blobs(folder, upload_hash)]
            if upload.register is None:  # an input: the SDK names its upload at random (it registers nothing for it);
                ship(folder, blobs, {"upload_status": "completed", "name": upload_hash, "version": "1"})  # by content
                continue
            version = urlsplit(upload.register.url).path.rsplit("/", 1)[-1]
            ship(folder, blobs, {"upload_status": "completed", "name": ANONYMOUS_ENVIRONMENT, "version": version})
            body = json.loads(json.dumps(upload.register.body).replace(STORE_CONTAINER, f"{account_url}/{container}"))
            register = HttpCall(upload.register.method, upload.register.url, body, upload.register.headers)
            self.retry.poll(functools.partial(_send, pipeline, register))

    def _checked_upload(
        self, upload: _Upload, store: _StoreCalls, create: HttpCall
    ) -> tuple[_Upload, folders.Folder, str]:
        """The folder an upload call names, listed again (refused if it changed since render) and held to the
        calls: the upload's URL and the environment's version (a build context) or the job's input URI (an input)
        must name that content, so an edited request uploads nothing else; with its object hash."""
        field = f"inputs.{upload.input}.path" if upload.input is not None else "targets.azureml.build.path"
        noun = "input" if upload.input is not None else "build context"
        folder = folders.check_folder_unchanged(upload.folder, field=field, noun=noun, data=upload.input is not None)
        upload_hash = object_hash(folder)
        named = upload.call.url == f"{STORE_CONTAINER}/{local_upload(folder, upload_hash)}" + (
            "" if folder.is_file else "/"
        )
        if upload.register is not None:
            properties = (upload.register.body or {}).get("properties") or {}
            version = build_environment_version(upload_hash, (properties.get("build") or {}).get("dockerfilePath"))
            named = named and urlsplit(upload.register.url).path.rsplit("/", 1)[-1] == version
        else:
            binding = ((create.body.get("properties") or {}).get("inputs") or {}).get(upload.input) or {}
            shape = "folder" if binding.get("jobInputType") == "uri_folder" else "model or file"
            named = named and binding.get("uri") == input_uri(folder, upload_hash, shape)
        if not named:
            what = f"input {upload.input}" if upload.input is not None else "build context"
            raise SubmitError(
                f"the request's {what} calls do not name the content of {folder.folder} (object hash "
                f"{upload_hash}); render the request again"
            )
        return upload, folder, upload_hash

    def status(self, handle: JobHandle) -> JobStatus:
        self.check_handle(handle)
        native, state, job = self._read_state(handle)
        message = ""
        if state is JobState.FAILED:
            message = self._failure(handle)
        elif state is JobState.UNKNOWN:
            message = f"see {handle.console_url}"
        if getattr(job, "type", "") == "sweep":  # its trials (child runs) and the best the service chose so far
            message = "; ".join(filter(None, [trials.said(self, handle, job, state), message]))
        return JobStatus(state, native, message)

    def _state(self, handle: JobHandle) -> tuple[str, JobState]:
        native, state, _ = self._read_state(handle)
        return native, state

    def _read_state(self, handle: JobHandle) -> tuple[str, JobState, Any]:
        ml = self._client(handle.ref)
        job = self.retry.poll(lambda: azure.call(lambda: ml.jobs.get(handle.job_id), f"read job {handle.job_id}"))
        native = str(getattr(job.status, "value", job.status) or "Unknown")
        return native, STATE_MAP.get(native, JobState.UNKNOWN), job

    def _failure(self, handle: JobHandle) -> str:
        """What a failed job's logs say: the first rank (in rank order) whose log ends in an error, its last lines,
        and the kind of failure with what to do next; the job's own error where the service records one."""
        from crosstrain.failures import last_lines, summary  # here: a render has no use for it

        recorded: Any = ""
        texts: dict[str, list[str]] = {}
        try:
            job = self._job_json(handle)
            props = job.get("properties") or {}
            recorded = props.get("error") or (props.get("properties") or {}).get("azureml.runerror") or ""
            if isinstance(recorded, Mapping):
                recorded = recorded.get("message") or json.dumps(recorded)
            reader = self._log_reader(handle, job)
            if reader is not None:
                for name, line in reader.read(final=True):
                    texts.setdefault(name, []).append(line)
        except CrosstrainError:  # the logs are an aid here: the state stands without them
            texts = {}
        culprit = next(
            (name for name in texts if _ERROR_LINE.search("\n".join(texts[name][-20:]))),
            None,
        )
        tail = last_lines(texts[culprit]) if culprit else []
        who = _log_who(culprit) if culprit else ""
        what = f"{who} failed" if who else "the job failed"
        return summary(f"the first failure seen: {what}", str(recorded), tail, handle.console_url)

    def list_jobs(self, overrides: Mapping[str, Any] | None = None) -> Iterator[JobSummary]:
        """The workspace's jobs that carry crosstrain's fingerprint property, from the jobs list call
        `MLClient.jobs.list()` makes (`GET .../jobs`, active ones), newest first."""
        settings = self.list_settings(overrides)
        ref = {key: getattr(settings, key) for key in WORKSPACE_KEYS}
        ml = self._client(ref)
        what = f"list the jobs of workspace {settings.workspace}"
        jobs = self.retry.poll(lambda: azure.call(lambda: [j for j in ml.jobs.list() if j is not None], what))
        found = []
        for job in jobs:
            if not (getattr(job, "properties", None) or {}).get(FINGERPRINT_PROPERTY):
                continue
            created = getattr(getattr(job, "creation_context", None), "created_at", None)
            found.append((created.timestamp() if created else 0.0, job))
        for created, job in sorted(found, key=lambda item: -item[0]):
            native = str(getattr(job.status, "value", job.status) or "Unknown")
            console = str(getattr(job, "studio_url", None) or studio_url(ref, job.name))
            handle = JobHandle(
                "azureml",
                job.name,
                job.name,
                console_url=console,
                ref={**ref, "url": _job_url(ref, job.name)},
            )
            state = STATE_MAP.get(native, JobState.UNKNOWN)
            sweep = trials.listed(self, handle, job, state) if getattr(job, "type", "") == "sweep" else None
            yield JobSummary(job.name, state, native, created, console, handle, sweep=sweep)

    def cancel(self, handle: JobHandle) -> None:
        self.check_handle(handle)
        ml = self._client(handle.ref)
        what = f"cancel job {handle.job_id}"
        self.retry.poll(lambda: azure.call(lambda: ml.jobs.begin_cancel(handle.job_id).result(), what))

    def logs(self, handle: JobHandle, *, follow: bool = False) -> Iterator[str]:
        """The job's log files as the service writes them (`user_logs/std_log*.txt` under the job's default
        output in its datastore, where `MLClient.jobs.stream` reads them), each line prefixed with the rank or
        node its file names. Each file is read from where the last read ended, so no line comes twice; with
        `follow`, again every `log_interval` seconds until the job ends, and the lines written by its end last."""
        self.check_handle(handle)
        job = self._job_json(handle)
        reader = self._log_reader(handle, job)
        if reader is None:  # no default output to read from: what `az ml job stream` shows, once the job ended
            yield from azure.stream_logs(self._client(handle.ref), handle.job_id)
            return
        yield from self.follow(
            lambda final: (_log_prefix(name) + line for name, line in reader.read(final=final)),
            lambda: not follow or self._state(handle)[1].terminal,
            follow=follow,
            interval=self.log_interval,
        )

    def _job_json(self, handle: JobHandle) -> dict[str, Any]:
        """The job's ARM JSON (the GET submit renders), for its default output."""
        pipeline = self._client(handle.ref).jobs.service_client_01_2025_preview
        url = str(handle.ref.get("url") or _job_url(handle.ref, handle.job_id))
        found = self.retry.poll(lambda: _send(pipeline, HttpCall("GET", url)))
        assert found is not None
        return found[1]

    def _log_reader(self, handle: JobHandle, job: Mapping[str, Any]) -> _LogReader | None:
        """The container and folder of the job's logs, as `stream_logs_until_completion` finds them: the job's
        `default` uri_folder output names a datastore and a path; the datastore (read with its secrets) names
        the storage account and container."""
        outputs = (job.get("properties") or {}).get("outputs") or {}
        default = outputs.get("default") or {}
        uri = str(default.get("uri") or "")
        if default.get("jobOutputType", "uri_folder") != "uri_folder" or "datastores/" not in uri:
            return None
        store, _, prefix = uri.split("datastores/", 1)[1].partition("/")
        prefix = prefix.removeprefix("paths/").strip("/")
        ml = self._client(handle.ref)
        what = f"read datastore {store} of job {handle.job_id}"
        datastore = self.retry.poll(lambda: azure.call(lambda: ml.datastores.get(store, include_secrets=True), what))
        account = str(datastore.account_name)
        container_name = str(getattr(datastore, "container_name", None) or getattr(datastore, "filesystem", ""))
        protocol = str(getattr(datastore, "protocol", None) or "https")
        endpoint = str(getattr(datastore, "endpoint", None) or "core.windows.net")
        secret = datastore.credentials
        credential: Any
        if getattr(secret, "sas_token", None):
            credential = str(secret.sas_token)
        elif getattr(secret, "account_key", None):
            credential = {
                "account_name": account,
                "account_key": str(secret.account_key),
            }
        else:  # an identity-based datastore: the workspace's credential reads it, as in the SDK
            credential = self._azure_credential()
        container = azure.blob_container(
            f"{protocol}://{account}.blob.{endpoint}",
            container_name,
            credential,
            transport=self.storage_transport,
            timeout=self.retry.call_timeout,
        )
        return _LogReader(container, prefix, self.retry)
