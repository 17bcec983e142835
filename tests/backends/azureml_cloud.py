"""A small Azure ML control plane on `crosstrain.backends.loopback`, for driving the real `MLClient` offline.

* `AzureMLService` is the server side (a `LoopbackService`): it stores PUT resources by their ARM path (a PUT
  of an existing path returns it with 200, as create-or-update does for an identical body), moves each job
  through a scripted list of statuses one status read at a time, and cancels on `POST .../cancel`. Its
  operations, as faults are scripted: "create" (the job PUT), "find" (the job GET that submit renders, at the
  pinned `API_VERSION`), "get" (the status read `MLClient.jobs.get` makes, at the SDK's own api-version),
  "cancel", "environment" (the anonymous environment PUT), "children" (a sweep's trials in the run history) and
  "metrics" (MLflow's search of the trials' runs, answered from what `log_metric` recorded). Faults mean what
  they mean on every loopback fake.
* `AzureMLTransport` is the azure-core front: an `HttpTransport` to pass to `MLClient(transport=...)` (or to
  `AzureMLBackend`), which turns each request into a `loopback.Call` for `service.dispatch`. A dropped answer is
  azure-core's `ServiceResponseError`, as is an answer slower than the read timeout the call asked for (there is
  no socket to time out here); `unreachable(n)` makes the next `n` requests fail before sending
  (`ServiceRequestError`, a refused connection).
* `LoopbackTransport` is azure-core's real requests transport pointed at the service served over HTTP on
  127.0.0.1 (`loopback.serving`), for another process.
* `AzureMLPlatform` is the `LoopbackPlatform` the send-side suite and `benchmarks/submit_faults.py` drive; a
  context manager, usable without pytest.

The front relies on azure-core's `RestRequestsTransportResponse`, pinned with azure-ai-ml 1.35.2.
"""

from __future__ import annotations

import io
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import requests
from azure.ai.ml._restclient.arm_ml_service.models import JobStatus
from azure.core.credentials import AccessToken, AccessTokenInfo
from azure.core.exceptions import ServiceRequestError, ServiceResponseError
from azure.core.pipeline.transport import HttpTransport
from azure.core.pipeline.transport._requests_basic import RequestsTransport
from azure.core.rest._requests_basic import RestRequestsTransportResponse

from crosstrain.backends.azureml.backend import AzureMLBackend
from crosstrain.backends.azureml.settings import API_VERSION
from crosstrain.backends.base import Backend
from crosstrain.backends.loopback import (
    TRICKLED_BYTES,
    Call,
    Dropped,
    LoopbackPlatform,
    LoopbackService,
    Reply,
    serving,
)
from crosstrain.records import JobHandle
from crosstrain.retry import RetryPolicy

ROOT = Path(__file__).resolve().parents[2]
SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
WORKSPACE = {"subscription_id": SUBSCRIPTION, "resource_group": "my-rg", "workspace": "my-ws"}

_WORKSPACE = r"/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.MachineLearningServices/workspaces/[^/]+"
_JOB = re.compile(rf"^(?P<job>{_WORKSPACE}/jobs/(?P<name>[^/]+))(?P<cancel>/cancel)?$")
_ENVIRONMENT = re.compile(rf"^{_WORKSPACE}/environments/[^/]+/versions/[^/]+$")
_JOBS = re.compile(rf"^{_WORKSPACE}/jobs$")
#: The run history service's children of a run (a sweep's trials), as azure-ai-ml's RunHistoryClient asks.
_CHILDREN = re.compile(rf"^/history/v1\.0{_WORKSPACE}/runs/(?P<run>[^/]+)/children$")
#: MLflow's search of runs in the workspace's tracking service, on the run history's host (the tracking URI's path).
_MLFLOW_SEARCH = re.compile(rf"^/mlflow/v1\.0{_WORKSPACE}/api/2\.0/mlflow/runs/search$")
_PARENT_FILTER = re.compile(r"^\s*tags\.mlflow\.parentRunId\s*=\s*'(?P<run>[^']+)'\s*$")
#: MLflow's run statuses for the run history's (`RunStatus` of MLflow's REST API).
_MLFLOW_STATUS = {"Completed": "FINISHED", "Failed": "FAILED", "Canceled": "KILLED", "Running": "RUNNING"}
_DATASTORE = re.compile(rf"^{_WORKSPACE}/datastores/(?P<name>[^/]+)(?P<secrets>/listSecrets)?$")
_CODES = re.compile(
    rf"^(?P<versions>{_WORKSPACE}/codes/[^/]+/versions)(?P<version>/[^/]+)?(?P<pending>/startPendingUpload)?$"
)

#: Azurite's development account (public, documented in Azurite's README).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
#: The container the fake workspace hands out for code uploads (the workspace's blob store, as Azure names it).
CODE_CONTAINER = "azureml-blobstore-00000000-0000-0000-0000-000000000000"

#: The workspace's artifact store, where the service writes each job's logs (the job's `default` output).
ARTIFACT_STORE = "workspaceartifactstore"
ARTIFACT_CONTAINER = "azureml"
#: The workspace's default blob store, where azure-ai-ml uploads a Docker build context (its container is
#: `AzureMLService.container`).
BLOB_STORE = "workspaceblobstore"

TERMINAL = ("Completed", "Failed", "Canceled", "NotResponding")
#: The statuses of Azure ML's `JobStatus` (the ARM API's enum, as azure-ai-ml ships it).
NATIVE_STATES = tuple(status.value for status in JobStatus)


#: The resource a user-identity job's submitter token is for (azure-ai-ml checks the token's audience).
AML_RESOURCE = "https://ml.azure.com"


def user_token(audience: str = AML_RESOURCE) -> str:
    """A JWT as Entra ID would give for `audience`, signed with a made-up key: azure-ai-ml reads its claims
    without verifying the signature (the service verifies it)."""
    import jwt

    return jwt.encode(
        {"aud": audience, "oid": "00000000-0000-0000-0000-00000000000a"}, "a made-up key, never a real one: 32+ bytes"
    )


class FakeCredential:
    """A token credential that never talks to Entra ID: "fake-token" for ARM, and for Azure ML's own resource
    (`<AML_RESOURCE>/.default`, a user-identity job's submitter token) a JWT for `aml_audience`. `scopes` lists
    what each call asked for."""

    def __init__(self, aml_audience: str = AML_RESOURCE) -> None:
        self.aml_audience = aml_audience
        self.scopes: list[tuple[str, ...]] = []

    def _token(self, scopes: tuple[str, ...]) -> str:
        self.scopes.append(scopes)
        return user_token(self.aml_audience) if scopes == (f"{AML_RESOURCE}/.default",) else "fake-token"

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken(self._token(scopes), int(time.time()) + 3600)

    def get_token_info(self, *scopes: str, options: Any = None) -> AccessTokenInfo:
        return AccessTokenInfo(self._token(scopes), int(time.time()) + 3600)


def _usage(kind: str, name: str, used: int, limit: int) -> dict[str, Any]:
    """A `Usage` of `locations/{loc}/usages`, as the service lists it (its type names the kind)."""
    return {
        "id": f"/subscriptions/{SUBSCRIPTION}/providers/Microsoft.MachineLearningServices/locations/eastus/"
        f"usages/{name.replace(' ', '_')}",
        "type": f"Microsoft.MachineLearningServices/{kind}/usages",
        "unit": "Count",
        "currentValue": used,
        "limit": limit,
        "name": {"value": name, "localizedValue": name},
    }


class AzureMLService(LoopbackService):
    """Azure ML's ARM endpoints for jobs and environments. `resources` maps ARM paths to what was PUT."""

    def __init__(
        self,
        statuses: tuple[str, ...] = ("Queued", "Running", "Completed"),
        *,
        slow_seconds: float = 0.5,
        late_seconds: float = 0.3,
        blob_endpoint: str | None = None,
        container: str = CODE_CONTAINER,
        logs: tuple[dict[str, str], ...] = (),
        store_secret: str = "sas",
    ) -> None:
        super().__init__(slow_seconds=slow_seconds, late_seconds=late_seconds)
        self.statuses = statuses
        #: What the default blob store gives for its secret: "sas" (a container SAS), "forbidden" (listSecrets is
        #: refused with a 403: an identity without the right to read it), "identity" (a store that takes identities:
        #: it has no secret).
        self.store_secret = store_secret
        #: Azurite's account URL (`http://127.0.0.1:<port>/devstoreaccount1`): startPendingUpload hands out a
        #: container SAS there. Without one, startPendingUpload is refused.
        self.blob_endpoint = blob_endpoint
        self.container = container
        self.resources: dict[str, dict[str, Any]] = {}
        #: The run history's child runs by parent run (a sweep's trials, `add_trial`), as its `Run` model has them.
        self.children: dict[str, list[dict[str, Any]]] = {}
        #: What each trial logged to MLflow: run id -> metric -> its history of (value, step, timestamp ms),
        #: as `log_metric` records it; MLflow's search answers with each metric's latest.
        self.logged_metrics: dict[str, dict[str, list[tuple[float, int, int]]]] = {}
        #: Runs per page of MLflow's search at most (the service's own cap on `max_results`).
        self.mlflow_page_size = 1000
        #: What the discovery document names for the run history, where not the region's API host (`api`).
        self.discovered: str | None = None
        self.plans: dict[str, list[str]] = {}  # job path -> its statuses to come, the current one first
        #: What each job writes to its logs (with `blob_endpoint`): step i (file name under `user_logs/` -> text
        #: appended) is written at the i-th status read, the steps left all at once when a read says the job
        #: ended (as the service has flushed its logs by then).
        self.log_steps = logs
        self.logged: dict[str, int] = {}  # job path -> log steps written
        self.ended: set[str] = set()  # names of jobs a status read has said ended
        self._created = 0
        # -- what `crosstrain check` reads: the workspace (and its region), its compute clusters, the region's
        # vCPU usages and quotas per VM family, and its VM sizes; `auth_refused` answers every call 403
        self.location = "eastus"
        self.auth_refused = False
        self.computes: dict[str, dict[str, Any]] = {"gpu-cluster": {"vmSize": "Standard_NC24rs_v3", "maxNodeCount": 4}}
        self.vm_sizes = [
            {"name": "Standard_NC24rs_v3", "family": "standardNCSv3Family", "vCPUs": 24, "gpus": 4},
            {"name": "Standard_NC6s_v3", "family": "standardNCSv3Family", "vCPUs": 6, "gpus": 1},
        ]
        self.usages = [
            _usage("vmFamily", "Standard NCSv3 Family Cluster Dedicated vCPUs", 0, 96),
            _usage("dedicatedCores", "Total Cluster Dedicated Regional vCPUs", 0, 300),
            _usage("lowPriorityCores", "Total Cluster LowPriority Regional vCPUs", 0, 100),
        ]

    # -- what the suite and tests read ---------------------------------------------------------------------
    @property
    def jobs(self) -> list[str]:
        """ARM paths of the jobs, in the order they were made."""
        with self.lock:
            return [path for path in self.resources if _JOB.match(path)]

    def job(self, name: str) -> str:
        """The ARM path of the job called `name`."""
        return next(path for path in self.jobs if path.rsplit("/", 1)[-1] == name)

    def current(self, path: str) -> str:
        with self.lock:
            return self.plans[path][0]

    def set_state(self, name: str, native: str) -> None:
        with self.lock:
            self.plans[self.job(name)] = [native]

    @property
    def api(self) -> str:
        """The workspace region's API host (run history), as its discovery document names it."""
        return f"https://{self.location}.api.azureml.ms"

    def add_trial(self, sweep: str, index: int, values: dict[str, Any], status: str) -> str:
        """A trial of the sweep job `sweep`, as the service records it: a child run `<sweep>_<index>` in the run
        history (shaped by azure-ai-ml's own `Run` model), and its values as JSON in a tag of the sweep job named
        by the run. Its run id."""
        from azure.ai.ml._restclient.runhistory.models import Run

        run_id = f"{sweep}_{index}"
        run = Run(
            run_id=run_id,
            parent_run_id=sweep,
            root_run_id=sweep,
            experiment_id="00000000-0000-0000-0000-0000000000e1",
            status=status,
            display_name=run_id,
            run_type="azureml.scriptrun",
            tags={"_aml_system_ComputeTargetStatus": "{}"},
            properties={"_azureml.ComputeTargetType": "amlctrain"},
        )
        with self.lock:
            siblings = self.children.setdefault(sweep, [])
            siblings[:] = [c for c in siblings if c["runId"] != run_id] + [run.as_dict()]
            props = self.resources[self.job(sweep)]["properties"]
            props["tags"] = {**(props.get("tags") or {}), run_id: json.dumps(values)}
        return run_id

    def log_metric(self, run_id: str, key: str, value: float, step: int = 0) -> None:
        """A trial's `mlflow.log_metric(key, value, step)`, as the tracking service records it."""
        with self.lock:
            history = self.logged_metrics.setdefault(run_id, {}).setdefault(key, [])
            history.append((value, step, 1_700_000_000_000 + len(history)))

    def _mlflow_search(self, call: Call) -> Reply:
        """MLflow's `SearchRuns` (`POST .../api/2.0/mlflow/runs/search`) for the children of one run, as its REST
        API answers: `{"runs": [Run{info, data{metrics, params, tags}}], "next_page_token"}` (no token on the
        last page). Only the filter on `tags.mlflow.parentRunId` is understood; another is a 400, as MLflow says
        of a filter it cannot parse."""
        body = call.body if isinstance(call.body, dict) else {}
        found = _PARENT_FILTER.match(str(body.get("filter") or ""))
        experiments = body.get("experiment_ids")
        if found is None or not isinstance(experiments, list) or not experiments:
            return Reply(400, {"error_code": "INVALID_PARAMETER_VALUE", "message": "a filter on the parent run id"})
        runs = [c for c in self.children.get(found["run"], []) if c.get("experimentId") in experiments]
        start = int(body.get("page_token") or 0)
        size = min(int(body.get("max_results") or 1000), self.mlflow_page_size)
        page = runs[start : start + size]
        answer: dict[str, Any] = {"runs": [self._mlflow_run(found["run"], child) for child in page]}
        if start + size < len(runs):
            answer["next_page_token"] = str(start + size)
        return Reply(200, answer)

    def _mlflow_run(self, parent: str, child: dict[str, Any]) -> dict[str, Any]:
        run_id = str(child["runId"])
        values = json.loads(str((self.resources[self.job(parent)]["properties"].get("tags") or {}).get(run_id, "{}")))
        metrics = [
            {"key": key, "value": history[-1][0], "timestamp": history[-1][2], "step": history[-1][1]}
            for key, history in self.logged_metrics.get(run_id, {}).items()
        ]
        tags = {"mlflow.parentRunId": parent, "mlflow.runName": run_id, "mlflow.rootRunId": parent}
        return {
            "info": {
                "run_id": run_id,
                "run_uuid": run_id,
                "run_name": run_id,
                "experiment_id": child.get("experimentId"),
                "user_id": "someone",
                "status": _MLFLOW_STATUS.get(str(child.get("status")), "SCHEDULED"),
                "start_time": 1_700_000_000_000,
                "artifact_uri": f"azureml://experiments/e1/runs/{run_id}/artifacts",
                "lifecycle_stage": "active",
            },
            "data": {
                "metrics": metrics,
                "params": [{"key": str(k), "value": str(v)} for k, v in values.items()],
                "tags": [{"key": k, "value": v} for k, v in tags.items()],
            },
        }

    # -- the server side -----------------------------------------------------------------------------------
    def operation(self, call: Call) -> str:
        job = _JOB.match(call.path)
        if job:
            if job["cancel"]:
                return "cancel"
            if call.method == "PUT":
                return "create"
            return "find" if call.query.get("api-version") == API_VERSION else "get"
        if _ENVIRONMENT.match(call.path) and call.method == "PUT":
            return "environment"
        if _JOBS.match(call.path):
            return "list"
        if _CHILDREN.match(call.path):
            return "children"
        if _MLFLOW_SEARCH.match(call.path):
            return "metrics"
        if call.path == "/discovery":
            return "discovery"
        datastore = _DATASTORE.match(call.path)
        if datastore:
            return "datastore-secrets" if datastore["secrets"] else "datastore"
        code = _CODES.match(call.path)
        if code:
            if code["pending"]:
                return "start-upload"
            if code["version"]:
                return "code" if call.method == "PUT" else "code-get"
            return "code-list"
        return "other"

    def error(self, status: int, message: str) -> Reply:
        """ARM's error envelope."""
        codes = {400: "BadRequest", 404: "NotFound", 409: "Conflict", 429: "TooManyRequests"}
        codes |= {500: "InternalServerError", 503: "ServiceUnavailable", 504: "GatewayTimeout"}
        body = {"error": {"code": codes.get(status, "Error"), "message": message}}
        return Reply(status, body, {"Retry-After": "1"} if status == 429 else {})

    def preflight_read(self, call: Call) -> Reply | None:
        """The reads of `crosstrain check`, as ARM answers them (api-version as the SDK asks); None for others."""
        if self.auth_refused:
            return Reply(
                403,
                {
                    "error": {
                        "code": "AuthorizationFailed",
                        "message": "The client does not have "
                        "authorization to perform action 'Microsoft.MachineLearningServices/workspaces/read'",
                    }
                },
            )
        if call.method != "GET":
            return None
        if re.fullmatch(_WORKSPACE, call.path):
            name = call.path.rsplit("/", 1)[-1]
            return Reply(
                200,
                {
                    "id": call.path,
                    "name": name,
                    "location": self.location,
                    "type": "Microsoft.MachineLearningServices/workspaces",
                    "properties": {"friendlyName": name, "discoveryUrl": f"{self.api}/discovery"},
                },
            )
        compute = re.fullmatch(rf"{_WORKSPACE}/computes/([^/]+)", call.path)
        if compute:
            found = self.computes.get(compute[1])
            if found is None:
                return self.error(404, f"compute {compute[1]} not found")
            props = {
                "vmSize": found["vmSize"],
                "vmPriority": "Dedicated",
                "scaleSettings": {"maxNodeCount": found["maxNodeCount"], "minNodeCount": 0},
            }
            return Reply(
                200,
                {
                    "id": call.path,
                    "name": compute[1],
                    "location": self.location,
                    "properties": {
                        "computeType": "AmlCompute",
                        "computeLocation": self.location,
                        "provisioningState": "Succeeded",
                        "properties": props,
                    },
                },
            )
        region = re.fullmatch(
            r"/subscriptions/[^/]+/providers/Microsoft\.MachineLearningServices/locations/([^/]+)/(\w+)", call.path
        )
        if region and region[2] == "usages":
            return Reply(200, {"value": [{**u, "amlWorkspaceLocation": region[1]} for u in self.usages]})
        if region and region[2] == "vmSizes":
            return Reply(200, {"value": self.vm_sizes})
        return None

    def answer(self, call: Call) -> Reply:
        read = self.preflight_read(call)
        if read is not None:
            return read
        job = _JOB.match(call.path)
        code = _CODES.match(call.path)
        children = _CHILDREN.match(call.path)
        if children and call.method == "GET":  # a `PaginatedRunList`, in one page
            from azure.ai.ml._restclient.runhistory.models import PaginatedRunList, Run

            runs = [Run(c) for c in self.children.get(children["run"], [])]
            return Reply(200, PaginatedRunList(value=runs).as_dict())
        if _MLFLOW_SEARCH.match(call.path) and call.method == "POST":
            return self._mlflow_search(call)
        if call.path == "/discovery" and call.method == "GET":  # the region's service hosts, by kind
            api = self.discovered or self.api
            return Reply(200, dict.fromkeys(("api", "catalog", "experimentation", "history"), api))
        if _JOBS.match(call.path) and call.method == "GET":  # the jobs list: newest last, as stored
            return Reply(200, {"value": [self._read(path) for path in self.jobs]})
        datastore = _DATASTORE.match(call.path)
        if datastore:
            return self._datastore(call.path, datastore["name"], bool(datastore["secrets"]))
        if code and code["pending"] and call.method == "POST":
            return self._start_pending_upload()
        if code and not code["version"] and call.method == "GET":
            # list by content hash: the code versions of the workspace (under any name, as the service does)
            # whose recorded hash is the one asked for
            wanted = (call.query.get("hash"), call.query.get("hashVersion"))
            found = [
                self._read(path)
                for path, stored in self.resources.items()
                if _CODES.match(path)
                and (
                    (stored["properties"].get("properties") or {}).get("hash_sha256"),
                    str((stored["properties"].get("properties") or {}).get("hash_version")),
                )
                == wanted
            ]
            return Reply(200, {"value": found})
        if call.method == "PUT" and (job or _ENVIRONMENT.match(call.path) or (code and code["version"])):
            if call.path in self.resources:
                return Reply(200, self._read(call.path))
            stored = json.loads(json.dumps(call.body))
            stored.update(id=call.path, name=call.path.rsplit("/", 1)[-1])
            if job:
                stored["type"] = "Microsoft.MachineLearningServices/workspaces/jobs"
                stored["properties"]["services"] = {
                    "Studio": {"jobServiceType": "Studio", "endpoint": f"https://ml.azure.com/runs/{job['name']}"}
                }
                # the service's own output, where it writes the job's logs
                stored["properties"].setdefault("outputs", {})["default"] = {
                    "jobOutputType": "uri_folder",
                    "mode": "ReadWriteMount",
                    "uri": f"azureml://datastores/{ARTIFACT_STORE}/ExperimentRun/dcid.{job['name']}",
                }
                self._created += 1  # distinct times, a second apart, in the order made
                created = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(1_700_000_000 + self._created))
                stored["systemData"] = {"createdAt": f"{created}.000000+00:00", "createdBy": "someone"}
                self.plans[call.path] = ["NotStarted", *self.statuses]
            self.resources[call.path] = stored
            return Reply(201, self._read(call.path))
        if job and job["cancel"] and call.method == "POST":
            path = job["job"]
            if path not in self.resources:
                return self.error(404, f"job {job['name']} not found")
            if self.plans[path][0] not in TERMINAL:
                self.plans[path] = ["CancelRequested", "Canceled"]
            return Reply(200, {})
        if call.method == "GET" and call.path in self.resources:
            advance = job is not None and self.operation(call) == "get"  # a status read moves the job on
            return Reply(200, self._read(call.path, advance=advance))
        return self.error(404, f"{call.path} not found")

    def _start_pending_upload(self) -> Reply:
        """A container SAS on Azurite, as the workspace answers with one on its blob store."""
        if not self.blob_endpoint:
            return self.error(400, "this fake workspace has no blob store (pass blob_endpoint)")
        from datetime import datetime, timedelta, timezone

        from azure.storage.blob import ContainerSasPermissions, generate_container_sas

        self._create_container(self.container)
        sas = generate_container_sas(
            AZURITE_ACCOUNT,
            self.container,
            account_key=AZURITE_KEY,
            permission=ContainerSasPermissions(read=True, write=True, list=True, add=True, create=True),
            expiry=datetime.now(timezone.utc) + timedelta(hours=1),
        )
        container = f"{self.blob_endpoint}/{self.container}"
        return Reply(
            200,
            {
                "blobReferenceForConsumption": {
                    "blobUri": container,
                    "storageAccountArmId": None,
                    "credential": {"credentialType": "SAS", "sasUri": f"{container}?{sas}"},
                },
                "pendingUploadId": "00000000-0000-0000-0000-000000000001",
                "pendingUploadType": "TemporaryBlobReference",
            },
        )

    def _create_container(self, name: str) -> None:
        from azure.core.exceptions import ResourceExistsError

        with suppress(ResourceExistsError):
            self._account().create_container(name)

    def _read(self, path: str, *, advance: bool = False) -> dict[str, Any]:
        stored: dict[str, Any] = json.loads(json.dumps(self.resources[path]))
        plan = self.plans.get(path)
        if plan:
            stored["properties"]["status"] = plan[0]
            if advance:
                self._write_logs(path, ended=plan[0] in TERMINAL)
                if plan[0] in TERMINAL:
                    self.ended.add(path.rsplit("/", 1)[-1])
            if advance and len(plan) > 1:
                plan.pop(0)
        return stored

    # -- the job's logs, on Azurite --------------------------------------------------------------------------
    def _account(self) -> Any:
        from azure.storage.blob import BlobServiceClient

        assert self.blob_endpoint
        return BlobServiceClient(
            self.blob_endpoint, credential={"account_name": AZURITE_ACCOUNT, "account_key": AZURITE_KEY}
        )

    def _write_logs(self, path: str, *, ended: bool) -> None:
        if not self.log_steps or not self.blob_endpoint:
            return
        from azure.core.exceptions import ResourceExistsError

        done = self.logged.get(path, 0)
        steps = self.log_steps[done:] if ended else self.log_steps[done : done + 1]
        if not steps:
            return
        container = self._account().get_container_client(ARTIFACT_CONTAINER)
        with suppress(ResourceExistsError):
            container.create_container()
        for step in steps:
            for file, text in step.items():
                blob = container.get_blob_client(f"ExperimentRun/dcid.{path.rsplit('/', 1)[-1]}/user_logs/{file}")
                if not blob.exists():
                    blob.create_append_blob()
                blob.append_block(text.encode())
        self.logged[path] = done + len(steps)

    def _datastore(self, path: str, name: str, secrets: bool) -> Reply:
        """The workspace's datastores on Azurite, each secret a container SAS: the artifact store (the jobs' logs,
        read only) and the default blob store, `workspaceblobstore` (azure-ai-ml's uploads of a Docker build
        context: read and write; its container is the one startPendingUpload hands out, as on Azure)."""
        stores = {ARTIFACT_STORE: (ARTIFACT_CONTAINER, "rl"), BLOB_STORE: (self.container, "racwl")}
        if name not in stores or not self.blob_endpoint:
            return self.error(404, f"datastore {name} not found")
        container, permission = stores[name]
        identity = name == BLOB_STORE and self.store_secret == "identity"
        if secrets and name == BLOB_STORE and self.store_secret != "sas":
            status = 403 if self.store_secret == "forbidden" else 400
            return self.error(status, f"no secret of datastore {name} for this caller ({self.store_secret})")
        if secrets:
            from datetime import datetime, timedelta, timezone

            from azure.storage.blob import generate_container_sas

            if name == BLOB_STORE:
                self._create_container(container)
            sas = generate_container_sas(
                AZURITE_ACCOUNT,
                container,
                account_key=AZURITE_KEY,
                permission=permission,
                expiry=datetime.now(timezone.utc) + timedelta(hours=1),
            )
            return Reply(200, {"secretsType": "Sas", "sasToken": sas})
        ws = path.split("/datastores/", 1)[0]
        return Reply(
            200,
            {
                "id": f"{ws}/datastores/{name}",
                "name": name,
                "type": "Microsoft.MachineLearningServices/workspaces/datastores",
                "properties": {
                    "datastoreType": "AzureBlob",
                    "accountName": AZURITE_ACCOUNT,
                    "containerName": container,
                    "endpoint": "core.windows.net",
                    "protocol": "https",
                    "credentials": {"credentialsType": "None" if identity else "Sas"},
                    "isDefault": name == BLOB_STORE,
                },
            },
        )


@dataclass
class Sent:
    """One request as the transport received it, and what became of it: the HTTP status, "dropped",
    "timed out" or "refused"."""

    method: str
    url: str
    body: Any
    headers: dict[str, str]
    read_timeout: float | None = None
    outcome: str = ""


class AzureMLTransport(HttpTransport[Any, Any]):
    """The azure-core front of a `LoopbackService`: every request becomes a `loopback.Call`."""

    def __init__(self, service: LoopbackService) -> None:
        self.service = service
        self.requests: list[Sent] = []
        self._unreachable: list[tuple[str | None, str]] = []
        self._lock = threading.Lock()

    # HttpTransport's context-manager protocol; nothing to open.
    def __enter__(self) -> AzureMLTransport:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    def open(self) -> None:
        return None

    def close(self) -> None:
        return None

    def unreachable(self, method: str | None = None, url_part: str = "", times: int = 1) -> None:
        """Refuse the connection of the next `times` requests with `method` (any if None) whose URL contains
        `url_part`: they never reach the service."""
        with self._lock:
            self._unreachable += [(method, url_part)] * times

    def sent(self, outcome: str | None = None) -> list[Sent]:
        return [r for r in self.requests if outcome is None or r.outcome == outcome]

    def send(self, request: Any, **kwargs: Any) -> Any:
        raw = getattr(request, "content", None) or getattr(request, "body", None)
        body = json.loads(raw) if raw else None
        timeout = kwargs.get("read_timeout")
        record = Sent(request.method, request.url, body, dict(request.headers), timeout)
        with self._lock:
            self.requests.append(record)
            refused = next(
                (
                    i
                    for i, (method, part) in enumerate(self._unreachable)
                    if method in (None, request.method) and part in request.url
                ),
                None,
            )
            if refused is not None:
                del self._unreachable[refused]
        if refused is not None:
            record.outcome = "refused"
            raise ServiceRequestError("connection refused (injected)")
        url = urlsplit(request.url)
        call = Call(request.method, url.path, dict(parse_qsl(url.query)), body, dict(request.headers))
        started = time.monotonic()
        try:
            reply = self.service.dispatch(call)
        except Dropped:
            record.outcome = "dropped"
            raise ServiceResponseError("the connection closed with no answer (injected)") from None
        if reply.pace:  # each byte in time for a read timeout, the whole never: then the connection closes
            time.sleep(reply.pace * TRICKLED_BYTES)
            record.outcome = "trickled"
            raise ServiceResponseError("the connection closed partway through a trickled answer (injected)")
        if timeout is not None and time.monotonic() - started > float(timeout):
            record.outcome = "timed out"
            raise ServiceResponseError(f"read timed out after {timeout}s (injected slowness)")
        record.outcome = str(reply.status)
        return _response(request, reply.status, reply.body, dict(reply.headers))


class LoopbackTransport(RequestsTransport):
    """azure-core's requests transport, sending every request to `base_url` (a served `AzureMLService`)."""

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.base_url = base_url.rstrip("/")

    def send(self, request: Any, **kwargs: Any) -> Any:
        url = urlsplit(request.url)
        request.url = self.base_url + url.path + (f"?{url.query}" if url.query else "")
        return super().send(request, **kwargs)


_REST_RESPONSE: Any = RestRequestsTransportResponse  # untyped in azure-core


def _response(request: Any, status: int, payload: Any, headers: dict[str, str] | None = None) -> Any:
    raw = requests.Response()
    raw.status_code = status
    raw.headers["Content-Type"] = "application/json"
    raw.headers.update(headers or {})
    raw._content = payload if isinstance(payload, bytes) else json.dumps({} if payload is None else payload).encode()
    raw.raw = io.BytesIO(raw._content)
    response = _REST_RESPONSE(request=request, internal_response=raw)
    response._content, response._is_closed = raw._content, True
    return response


class AzureMLPlatform(LoopbackPlatform):
    """A running Azure ML fake and backends wired to it. `with AzureMLPlatform() as platform: ...`; no pytest
    needed. Jobs run to Completed as they are read; a call gets `call_timeout` seconds to answer, and a slow
    answer takes `slow_seconds`."""

    settings = {**WORKSPACE, "compute": "gpu-cluster"}
    native_states = NATIVE_STATES
    # "not mapped to any other status", as the API documents it: crosstrain maps it to UNKNOWN.
    unspecified_states = (JobStatus.UNKNOWN.value,)

    def __init__(
        self,
        *,
        statuses: tuple[str, ...] = ("Running", "Completed"),
        slow_seconds: float = 0.5,
        late_seconds: float = 0.3,
        call_timeout: float = 0.25,
    ) -> None:
        self.service = AzureMLService(statuses, slow_seconds=slow_seconds, late_seconds=late_seconds)
        self.transport = AzureMLTransport(self.service)
        self.call_timeout = call_timeout
        self.url = ""
        self._stack = ExitStack()

    def __enter__(self) -> AzureMLPlatform:
        self.url = self._stack.enter_context(serving(self.service))
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.service.settle()
        self._stack.close()

    def backend(self) -> Backend[Any, Any]:
        return AzureMLBackend(
            transport=self.transport,
            credential=FakeCredential(),
            retry=RetryPolicy(sleep=lambda s: None, call_timeout=self.call_timeout),
            environ={},
        )

    def inject(self, operation: str, fault: str) -> None:
        self.service.inject({"create": "create", "submit-read": "find", "poll": "get"}[operation], fault)

    def live_jobs(self, identity: str) -> list[str]:
        gone = ("CancelRequested", "Canceled")
        return [
            path.rsplit("/", 1)[-1]
            for path in self.service.jobs
            if path.rsplit("/", 1)[-1] == identity and self.service.current(path) not in gone
        ]

    def set_state(self, handle: JobHandle, native: str) -> None:
        self.service.set_state(handle.job_id, native)

    def child_backend(self) -> str:
        if not self.url:
            raise RuntimeError("enter the platform (`with AzureMLPlatform() as platform`) to serve it")
        return (
            "import logging, sys\n"
            f"sys.path.insert(0, {str(ROOT)!r})\n"
            "logging.disable(logging.WARNING)\n"
            "from crosstrain.backends.azureml import AzureMLBackend\n"
            "from tests.backends.azureml_cloud import FakeCredential, LoopbackTransport\n"
            f"backend = AzureMLBackend(transport=LoopbackTransport({self.url!r}), credential=FakeCredential(), "
            "environ={})\n"
        )

    def settle(self) -> None:
        self.service.settle()


# -- Azurite (npm), the Azure Blob emulator -------------------------------------------------------------
def azurite_command() -> str | None:
    """`azurite-blob`: $CROSSTRAIN_AZURITE, else on PATH, else under the repository's `.ci/node_modules` (where
    the noxfile's tests session installs it)."""
    import os
    import shutil

    named = os.environ.get("CROSSTRAIN_AZURITE")
    if named:
        return named
    found = shutil.which("azurite-blob")
    if found:
        return found
    local = ROOT / ".ci" / "node_modules" / ".bin" / "azurite-blob"
    return str(local) if local.exists() else None


@contextmanager
def azurite(command: str) -> Iterator[str]:
    """A blob-only Azurite on a free loopback port, in memory, no telemetry; yields the dev account's URL."""
    import socket
    import subprocess
    import tempfile

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as scratch, open(Path(scratch) / "azurite.log", "wb") as log:
        process = subprocess.Popen(
            [
                command,
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(port),
                "--inMemoryPersistence",
                "--disableTelemetry",
                "--skipApiVersionCheck",
                "--loose",
            ],
            cwd=scratch,  # in memory: nothing should be written, and nothing lands in the caller's folder
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                except OSError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        output = (Path(scratch) / "azurite.log").read_text(errors="replace")
                        raise RuntimeError(f"Azurite did not start: {output[-2000:]}") from None
                    time.sleep(0.1)
            yield f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def blob_container(endpoint: str, container: str) -> Any:
    """A `ContainerClient` on Azurite with the dev account's key (for tests to read what was uploaded)."""
    from azure.storage.blob import BlobServiceClient

    account = BlobServiceClient(endpoint, credential={"account_name": AZURITE_ACCOUNT, "account_key": AZURITE_KEY})
    return account.get_container_client(container)
