"""A loopback Databricks workspace: the few REST endpoints crosstrain calls, on 127.0.0.1, for the real
`WorkspaceClient`; and `DatabricksPlatform`, the `LoopbackPlatform` that the send-side conformance suite and
`benchmarks/submit_faults.py` drive.

It behaves as Databricks documents: `runs/submit` with a known `idempotency_token` returns that run (the same
`{"run_id": N}` as a new one) instead of starting another, `runs/get` returns each task with the `new_cluster`
it was submitted with (custom tags included), and `runs/get-output` answers only for a task run's id. Its
faults are `LoopbackService`'s, per operation: "create" (runs/submit), "get" (runs/get: the read inside submit
and every poll), "cancel", "output" (runs/get-output), "mkdirs", "import", "get-status", and for volumes
"fs-mkdirs" (Files API directories) and "fs-put" (Files API upload); for following a run "list" (runs/list),
"fs-stat" and "fs-get" (a volume file's size and ranged read), "dbfs-stat" and "dbfs-read"; errors come in
Databricks' envelope (`{"error_code": ..., "message": ...}`). It answers the client's host discovery
(`/.well-known/databricks-config`) with a workspace id, so later calls carry `X-Databricks-Workspace-Id` as
they do on a real workspace.

Uploads are kept as bytes in `files` (path -> content): `workspace/import` as JSON with base64 content (the
SDK's `import_`) or as multipart/form-data (its `upload`), and the Files API's raw `PUT /api/2.0/fs/files/...`;
`workspace/get-status` and `HEAD /api/2.0/fs/files/...` find them (404 `RESOURCE_DOES_NOT_EXIST` otherwise).

`DatabricksPlatform.inject` takes the suite's names: "submit-read" and "poll" both script the next runs/get,
so a "poll" fault scripted before a submit plays on the read inside that submit.

    with DatabricksPlatform() as platform:          # no pytest needed
        platform.inject("create", "drop")
        backend = platform.backend()
        handle = backend.send(backend.render(job, dict(platform.settings)))
"""

from __future__ import annotations

import base64
import contextlib
import email.parser
import email.policy
import itertools
import time
from types import TracebackType
from typing import Any

from crosstrain.adaptors.databricks import workspace_client
from crosstrain.backends.base import Backend
from crosstrain.backends.databricks.backend import DatabricksBackend
from crosstrain.backends.loopback import Call, LoopbackPlatform, LoopbackService, Reply, serving
from crosstrain.records import JobHandle
from crosstrain.retry import RetryPolicy

#: path suffix -> operation name, as faults are scripted (API 2.1 and 2.2 alike).
OPERATIONS = (
    ("/jobs/runs/submit", "create"),
    ("/jobs/runs/get", "get"),
    ("/jobs/runs/get-output", "output"),
    ("/jobs/runs/cancel", "cancel"),
    ("/jobs/runs/list", "list"),
    ("/dbfs/get-status", "dbfs-stat"),
    ("/dbfs/read", "dbfs-read"),
    ("/workspace/mkdirs", "mkdirs"),
    ("/workspace/import", "import"),
    ("/workspace/get-status", "get-status"),
    ("/workspace/export", "export"),
    ("/logs", "node-logs"),  # /api/2.0/ai-training/workflows/by-run-id/{run_id}/logs
    ("/mlflow/artifacts/list", "artifacts-list"),
    ("/mlflow/artifacts/credentials-for-read", "artifact-credential"),
    ("/preview/scim/v2/Me", "me"),
    ("/clusters/list-node-types", "node-types"),
    ("/instance-pools/list", "pools"),
    ("/policies/clusters/list", "policies"),
    ("/ai-training/provisioned-capacities", "capacities"),
)
#: Where the signed URLs `credentials-for-read` gives point (the storage, not the workspace's API).
SIGNED = "/signed-storage/"
#: The header a signed URL's read must carry, as the credential's `headers` say.
SIGNED_HEADER = ("x-ms-blob-type", "BlockBlob")
#: Files API prefix -> operation name (the file's path follows the prefix).
FILES_API = (("/api/2.0/fs/directories/", "fs-mkdirs"), ("/api/2.0/fs/files/", "fs-put"))
ERROR_CODES = {
    400: "INVALID_PARAMETER_VALUE",
    404: "RESOURCE_DOES_NOT_EXIST",
    429: "REQUEST_LIMIT_EXCEEDED",
    500: "INTERNAL_ERROR",
    503: "TEMPORARILY_UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
WORKSPACE_ID = "1234567890123456"
#: What successive `runs/get` calls of a run report, the last one from then on.
DEFAULT_STATES: list[tuple[str, str | None]] = [("PENDING", None), ("RUNNING", None), ("TERMINATED", "SUCCESS")]


def sdk_native_states() -> tuple[str, ...]:
    """Every `life_cycle_state`, alone and with every `result_state`, from databricks-sdk's own enums."""
    from databricks.sdk.service.jobs import RunLifeCycleState, RunResultState

    lives = [life.value for life in RunLifeCycleState]
    results = [result.value for result in RunResultState]
    return tuple(lives) + tuple(f"{life}/{result}" for life, result in itertools.product(lives, results))


class DatabricksWorkspace(LoopbackService):
    def __init__(self, *, slow_seconds: float = 2.0, late_seconds: float = 0.5) -> None:
        super().__init__(slow_seconds=slow_seconds, late_seconds=late_seconds)
        self.url = ""
        self.runs: dict[int, dict[str, Any]] = {}
        self.tokens: dict[str, int] = {}
        self.folders: set[str] = set()
        self.files: dict[str, bytes] = {}
        self.states = list(DEFAULT_STATES)
        self.output: dict[str, Any] = {"logs": "epoch 1 loss 0.5\nepoch 2 loss 0.1", "error": None}
        #: What an AI Runtime task's output says while it waits (`ai_runtime_task_output.status_message`).
        self.air_status: str | None = None
        #: AI Runtime's per-node log records by jobs run id, served `node_logs_page` at a time; None: the
        #: endpoint answers FEATURE_DISABLED, as on a workspace without the preview.
        self.node_logs: dict[int, list[dict[str, Any]]] | None = {}
        self.node_logs_page = 2
        #: MLflow artifacts by MLflow run id (`mlflow-<task run id>`, as the task output names it): path -> bytes.
        self.artifacts: dict[str, dict[str, bytes]] = {}
        #: What a run's driver prints, delivered to its `cluster_log_conf` folder as `<cluster id>/driver/stdout`
        #: `log_bytes_per_poll` bytes per runs/get while the run runs (so a line may arrive in two parts), the
        #: rest once it ended; `driver_stderr` likewise, all at once.
        self.driver_log = ""
        self.driver_stderr = ""
        self.log_bytes_per_poll = 64
        self.state_message: str | None = None  # the task's state_message (default: "run is <state>")
        self._last_start = 0
        # -- what `crosstrain check` reads (clusters/list-node-types, instance pools, cluster policies; the
        # status of the token, AI Runtime's reservations: None answers FEATURE_DISABLED, as before the preview)
        self.token_refused = False
        self.node_types: list[dict[str, Any]] = [
            {
                "node_type_id": "g5.12xlarge",
                "num_gpus": 4,
                "num_cores": 48.0,
                "memory_mb": 196608,
                "description": "g5.12xlarge",
                "instance_type_id": "g5.12xlarge",
                "category": "GPU Accelerated",
            },
            {
                "node_type_id": "g5.xlarge",
                "num_gpus": 1,
                "num_cores": 4.0,
                "memory_mb": 16384,
                "description": "g5.xlarge",
                "instance_type_id": "g5.xlarge",
                "category": "GPU Accelerated",
            },
            {
                "node_type_id": "m5d.large",
                "num_gpus": 0,
                "num_cores": 2.0,
                "memory_mb": 8192,
                "description": "m5d.large",
                "instance_type_id": "m5d.large",
                "category": "General Purpose",
            },
        ]
        self.pools: list[dict[str, Any]] = []
        self.policies: list[dict[str, Any]] = []
        self.capacities: list[dict[str, Any]] | None = None

    def submits(self) -> list[Any]:
        """The bodies of every runs/submit received (faulted ones included)."""
        return [call.body for call in self.received if self.operation(call) == "create"]

    def operation(self, call: Call) -> str:
        if call.path == "/.well-known/databricks-config":
            return "metadata"
        if call.path.startswith(SIGNED):
            return "signed-read"
        for prefix, name in FILES_API:
            if call.path.startswith(prefix):
                if call.method in ("HEAD", "GET") and name == "fs-put":
                    return "fs-stat" if call.method == "HEAD" else "fs-get"
                return name
        return next((name for suffix, name in OPERATIONS if call.path.endswith(suffix)), "unknown")

    def error(self, status: int, message: str) -> Reply:
        body = {"error_code": ERROR_CODES.get(status, "UNKNOWN"), "message": message}
        return Reply(status, body, {"Retry-After": "1"} if status == 429 else {})

    def answer(self, call: Call) -> Reply:
        operation = self.operation(call)
        if operation == "metadata":  # the client's host discovery at construction
            return Reply(200, {"oidc_endpoint": f"{self.url}/oidc", "workspace_id": WORKSPACE_ID})
        if self.token_refused:
            return Reply(403, {"error_code": "PERMISSION_DENIED", "message": "Invalid access token."})
        read = self.preflight_read(operation)
        if read is not None:
            return read
        if operation == "create":
            return Reply(200, {"run_id": self.submit(call.body)})
        if operation == "get":
            run_id = int(call.query["run_id"])
            if run_id not in self.runs:
                return self.error(400, f"Run {run_id} does not exist.")
            return Reply(200, self.get_run(run_id))
        if operation == "output":
            return self.get_output(int(call.query["run_id"]))
        if operation == "cancel":
            run = self.runs.get(call.body["run_id"])
            if run is None:
                return self.error(400, f"Run {call.body['run_id']} does not exist.")
            run["cancelled"] = True
            return Reply(200, {})
        if operation == "mkdirs":
            self.folders.add(call.body["path"])
            return Reply(200, {})
        if operation == "import":
            fields = _import_fields(call)
            path = fields["path"].decode()
            if path.rsplit("/", 1)[0] not in self.folders:
                return self.error(404, f"The parent folder of {path} does not exist.")
            if path in self.files and fields.get("overwrite", b"false").lower() != b"true":
                return Reply(400, {"error_code": "RESOURCE_ALREADY_EXISTS", "message": f"{path} already exists."})
            self.files[path] = fields["content"]
            return Reply(200, {})
        if operation == "get-status":
            path = call.query.get("path", "")
            if path in self.files:
                return Reply(200, {"path": path, "object_type": "FILE", "size": len(self.files[path])})
            if path in self.folders:
                return Reply(200, {"path": path, "object_type": "DIRECTORY"})
            return self.error(404, f"Path ({path}) doesn't exist.")
        if operation == "export":  # direct_download: the file's bytes
            path = call.query.get("path", "")
            if path not in self.files:
                return self.error(404, f"Path ({path}) doesn't exist.")
            return Reply(200, self.files[path])
        if operation == "fs-mkdirs":
            self.folders.add(call.path.removeprefix("/api/2.0/fs/directories"))
            return Reply(200, None)
        if operation == "fs-put":
            self.files[call.path.removeprefix("/api/2.0/fs/files")] = call.raw
            return Reply(204, None)
        if operation == "fs-stat":
            path = call.path.removeprefix("/api/2.0/fs/files")
            if path not in self.files:
                return Reply(404, None)
            return Reply(200, None, {"Content-Length": str(len(self.files[path]))})
        if operation == "fs-get":
            return self.download(call.path.removeprefix("/api/2.0/fs/files"), call.headers)
        if operation == "dbfs-stat":
            path = "dbfs:" + call.query.get("path", "")
            if path not in self.files:
                return self.error(404, f"No file or directory exists on path {path}.")
            return Reply(200, {"path": path, "is_dir": False, "file_size": len(self.files[path])})
        if operation == "dbfs-read":
            path = "dbfs:" + call.query.get("path", "")
            if path not in self.files:
                return self.error(404, f"No file or directory exists on path {path}.")
            offset, length = int(call.query.get("offset", 0)), int(call.query.get("length", 0) or 1 << 20)
            data = self.files[path][offset : offset + min(length, 1 << 20)]
            return Reply(200, {"bytes_read": len(data), "data": base64.b64encode(data).decode()})
        if operation == "list":
            return Reply(200, self.list_runs(call.query))
        if operation == "node-logs":
            return self.read_node_logs(int(call.path.split("/")[-2]), call.query)
        if operation == "artifacts-list":
            return self.list_artifacts(call.query.get("run_id", ""), call.query.get("path", ""))
        if operation == "artifact-credential":
            mlflow_run, path = call.query.get("run_id", ""), call.query.get("path", "")
            if path not in self.artifacts.get(mlflow_run, {}):
                return self.error(404, f"No artifact {path} in run {mlflow_run}.")
            header = {"name": SIGNED_HEADER[0], "value": SIGNED_HEADER[1]}
            info = {"run_id": mlflow_run, "path": path, "signed_uri": f"{self.url}{SIGNED}{mlflow_run}/{path}"}
            return Reply(200, {"credential_infos": [info | {"headers": [header]}]})
        if operation == "signed-read":
            headers = {key.lower(): value for key, value in call.headers.items()}
            if "authorization" in headers or headers.get(SIGNED_HEADER[0]) != SIGNED_HEADER[1]:
                return Reply(403, b"a signed read carries its credential's headers and nothing of the workspace's")
            mlflow_run, _, path = call.path.removeprefix(SIGNED).partition("/")
            stored = self.artifacts.get(mlflow_run, {}).get(path)
            if stored is None:
                return Reply(404, b"")
            wanted = headers.get("range", "")
            if wanted.startswith("bytes="):
                return Reply(206, stored[int(wanted.removeprefix("bytes=").rstrip("-")) :])
            return Reply(200, stored)
        return self.error(404, f"no endpoint {call.method} {call.path}")

    def preflight_read(self, operation: str) -> Reply | None:
        """What `crosstrain check` reads, as the workspace answers it; None for any other call."""
        if operation == "me":
            return Reply(200, {"id": "1", "userName": "me@example.com", "active": True})
        if operation == "node-types":
            return Reply(200, {"node_types": self.node_types})
        if operation == "pools":
            return Reply(200, {"instance_pools": self.pools})
        if operation == "policies":
            return Reply(200, {"policies": self.policies, "total_count": len(self.policies)})
        if operation == "capacities":
            if self.capacities is None:
                return Reply(404, {"error_code": "FEATURE_DISABLED", "message": "AI Runtime is not enabled."})
            return Reply(200, {"provisioned_capacities": self.capacities})
        return None

    # -- the runs ------------------------------------------------------------------------------------------
    def submit(self, body: dict[str, Any]) -> int:
        token = body.get("idempotency_token")
        if token in self.tokens:
            return self.tokens[token]
        run_id = 1000 + len(self.runs)
        self.runs[run_id] = {
            "body": body,
            "token": token,
            "task_run_id": run_id + 500,
            "start_time": self._start_time(),
            "polls": 0,
            "cancelled": False,
            "state": None,  # a fixed (life, result) once set_state chose one
        }
        if token:
            self.tokens[token] = run_id
        return run_id

    def _start_time(self) -> int:
        """Now in milliseconds, later than every run before (so newest first is well defined)."""
        self._last_start = max(int(time.time() * 1000), self._last_start + 1)
        return self._last_start

    def get_run(self, run_id: int) -> dict[str, Any]:
        run = self.runs[run_id]
        life, result = run["state"] or self.states[min(run["polls"], len(self.states) - 1)]
        run["polls"] += 1
        if run["cancelled"]:
            life, result = "TERMINATED", "CANCELED"
        if life not in ("QUEUED", "PENDING", "BLOCKED"):
            self.deliver(run_id, ended=life in ("TERMINATED", "SKIPPED", "INTERNAL_ERROR"))
        return self.run_view(run_id, life, result)

    def run_view(self, run_id: int, life: str, result: str | None) -> dict[str, Any]:
        """The run as runs/get (and runs/list with expand_tasks) answer it."""
        run = self.runs[run_id]
        message = self.state_message or f"run is {life.lower()}"
        state: dict[str, Any] = {"life_cycle_state": life, "state_message": message}
        if result:
            state["result_state"] = result
        started = life not in ("QUEUED", "PENDING", "BLOCKED")
        tasks = [
            {**task, "run_id": run["task_run_id"] + index, "state": state}
            | ({"cluster_instance": {"cluster_id": self.cluster_id(run_id)}} if started else {})
            for index, task in enumerate(run["body"].get("tasks", []))
        ]
        return {
            "run_id": run_id,
            "run_name": run["body"].get("run_name"),
            "run_type": "SUBMIT_RUN",
            "run_page_url": f"{self.url}/#job/runs/{run_id}",
            "start_time": run["start_time"],
            "state": state,
            "tasks": tasks,
        }

    @staticmethod
    def cluster_id(run_id: int) -> str:
        return f"1122-334455-loop{run_id}"

    def log_folder(self, run_id: int) -> str | None:
        """Where the run's cluster delivers its driver logs (`dbfs:/...` or `/Volumes/...`), if anywhere."""
        for task in self.runs[run_id]["body"].get("tasks", []):
            conf = (task.get("new_cluster") or {}).get("cluster_log_conf") or {}
            place = conf.get("volumes") or conf.get("dbfs")
            if place:
                return f"{place['destination'].rstrip('/')}/{self.cluster_id(run_id)}/driver"
        return None

    def deliver(self, run_id: int, *, ended: bool) -> None:
        """The next part of the driver's output, delivered (all of it once the run ended)."""
        folder = self.log_folder(run_id)
        if folder is None:
            return
        for name, text in (("stdout", self.driver_log), ("stderr", self.driver_stderr)):
            data, path = text.encode(), f"{folder}/{name}"
            have = len(self.files.get(path, b""))
            upto = len(data) if ended or name == "stderr" else min(len(data), have + self.log_bytes_per_poll)
            if data and upto > have:
                self.files[path] = data[:upto]

    def delivered(self, run_id: int) -> bytes:
        """The driver's stdout delivered so far."""
        folder = self.log_folder(run_id)
        return self.files.get(f"{folder}/stdout", b"") if folder else b""

    def download(self, path: str, headers: Any) -> Reply:
        """`GET /api/2.0/fs/files/...`, with a `Range: bytes=a-b` as the Files API takes it."""
        if path not in self.files:
            return self.error(404, f"File {path} does not exist.")
        data = self.files[path]
        wanted = next((v for k, v in headers.items() if k.lower() == "range"), "")
        if wanted.startswith("bytes="):
            first, _, last = wanted.removeprefix("bytes=").partition("-")
            return Reply(206, data[int(first) : int(last) + 1 if last else None])
        return Reply(200, data)

    def list_runs(self, query: Any) -> dict[str, Any]:
        """runs/list: newest first, no side effects (a listed run's state is its current one)."""
        if query.get("run_type") not in (None, "SUBMIT_RUN"):
            return {"runs": [], "has_more": False}
        views = []
        for run_id, run in self.runs.items():
            life, result = run["state"] or self.states[min(max(run["polls"] - 1, 0), len(self.states) - 1)]
            if run["cancelled"]:
                life, result = "TERMINATED", "CANCELED"
            views.append(self.run_view(run_id, life, result))
        return {"runs": sorted(views, key=lambda v: -v["start_time"]), "has_more": False}

    def read_node_logs(self, run_id: int, query: Any) -> Reply:
        """The per-node logs endpoint: records from `from` (epoch seconds) on, oldest first, by pages."""
        if self.node_logs is None:
            return Reply(404, {"error_code": "FEATURE_DISABLED", "message": "AI Runtime logs are not enabled."})
        since = int(query.get("from", 0)) * 1_000_000_000
        records = [r for r in self.node_logs.get(run_id, []) if int(r["time_unix_nano"]) >= since]
        start = int(query.get("page_token") or 0)
        page = records[start : start + self.node_logs_page]
        more = start + self.node_logs_page < len(records)
        return Reply(
            200, {"log_records": page} | ({"next_page_token": str(start + self.node_logs_page)} if more else {})
        )

    def list_artifacts(self, run_id: str, path: str) -> Reply:
        """MLflow's artifacts/list: the entries directly under `path` (folders with `is_dir`, files with sizes)."""
        files = self.artifacts.get(run_id, {})
        prefix = path.rstrip("/") + "/" if path else ""
        entries: dict[str, dict[str, Any]] = {}
        for name, data in files.items():
            if not name.startswith(prefix):
                continue
            first, _, rest = name.removeprefix(prefix).partition("/")
            entry = prefix + first
            entries[entry] = {"path": entry, "is_dir": True} if rest else {"path": entry, "file_size": len(data)}
        return Reply(200, {"files": [entries[k] for k in sorted(entries)]} if entries else {})

    def get_output(self, run_id: int) -> Reply:
        for run in self.runs.values():
            if run["task_run_id"] == run_id:
                output = {k: v for k, v in self.output.items() if v is not None}
                if any("ai_runtime_task" in task for task in run["body"].get("tasks", [])):
                    air = {"mlflow_experiment_id": "1234", "mlflow_run_id": f"mlflow-{run_id}"}
                    output["ai_runtime_task_output"] = air | (
                        {"status_message": self.air_status} if self.air_status else {}
                    )
                return Reply(200, output)
        return self.error(
            400,
            "Retrieving the output of runs with multiple tasks is not supported. Please retrieve the output of "
            "each individual task run instead.",
        )


def _import_fields(call: Call) -> dict[str, bytes]:
    """`workspace/import`'s fields, from JSON (base64 `content`) or from multipart/form-data (raw content)."""
    if isinstance(call.body, dict):
        fields = {k: str(v).encode() for k, v in call.body.items() if k != "content"}
        fields["overwrite"] = str(call.body.get("overwrite", False)).lower().encode()
        fields["content"] = base64.b64decode(call.body.get("content", ""))
        return fields
    content_type = next((v for k, v in call.headers.items() if k.lower() == "content-type"), "")
    head = f"Content-Type: {content_type}\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + call.raw)
    found: dict[str, bytes] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        found[str(name)] = payload if isinstance(payload, bytes) else b""
    return found


class DatabricksPlatform(LoopbackPlatform):
    """A loopback workspace served on 127.0.0.1 and backends wired to it; a context manager.

    `call_timeout` is every call's client timeout; a "slow" answer (after `slow_seconds`) outlasts it, so the
    client gives up and submit resends, as it would against a stalled workspace.
    """

    def __init__(self, *, call_timeout: float = 1.0, slow_seconds: float = 2.0, late_seconds: float = 0.5) -> None:
        self.workspace = DatabricksWorkspace(slow_seconds=slow_seconds, late_seconds=late_seconds)
        self.call_timeout = call_timeout
        self.url = ""
        self.settings: dict[str, Any] = {}
        self._stack = contextlib.ExitStack()

    native_states = sdk_native_states()

    def __enter__(self) -> DatabricksPlatform:
        self.url = self._stack.enter_context(serving(self.workspace))
        self.workspace.url = self.url
        self.settings = {"host": self.url, "cloud": "aws"}
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.workspace.settle()
        self._stack.close()

    def client(self) -> Any:
        """A `WorkspaceClient` for this workspace, made as crosstrain makes one (its own retries off)."""
        return workspace_client(self.url, token="loopback", timeout=self.call_timeout)

    def backend(self) -> Backend[Any, Any]:
        retry = RetryPolicy(sleep=lambda seconds: None, call_timeout=self.call_timeout)
        return DatabricksBackend(client=self.client(), retry=retry, environ={})

    def inject(self, operation: str, fault: str) -> None:
        # The read inside submit and the polls are both runs/get: a fault scripted now plays on the next one.
        self.workspace.inject({"submit-read": "get", "poll": "get"}.get(operation, operation), fault)

    @property
    def service(self) -> DatabricksWorkspace:
        return self.workspace

    def live_jobs(self, identity: str) -> list[str]:
        with self.workspace.lock:
            return [
                str(run_id)
                for run_id, run in self.workspace.runs.items()
                if run["token"] == identity and not run["cancelled"]
            ]

    def set_state(self, handle: JobHandle, native: str) -> None:
        life, _, result = native.partition("/")
        with self.workspace.lock:
            run = self.workspace.runs[int(handle.job_id)]
            run["state"] = (life, result or None)
            run["cancelled"] = False

    def child_backend(self) -> str:
        return (
            "from crosstrain.adaptors.databricks import workspace_client\n"
            "from crosstrain.backends.databricks import DatabricksBackend\n"
            f"backend = DatabricksBackend(client=workspace_client({self.url!r}, token='loopback', timeout=5.0), "
            "environ={})\n"
        )

    def settle(self) -> None:
        self.workspace.settle()


class DatabricksAIRPlatform(DatabricksPlatform):
    """The same loopback workspace, with the `databricks-air` backend wired to it: runs/submit takes the
    `ai_runtime_task` and runs/get returns it as submitted; runs/get-output adds `ai_runtime_task_output`."""

    def __enter__(self) -> DatabricksAIRPlatform:
        super().__enter__()
        self.settings = {"host": self.url}
        return self

    def backend(self) -> Backend[Any, Any]:
        from crosstrain.backends.databricks_air import DatabricksAIRBackend

        retry = RetryPolicy(sleep=lambda seconds: None, call_timeout=self.call_timeout)
        return DatabricksAIRBackend(client=self.client(), retry=retry, environ={})

    def child_backend(self) -> str:
        return (
            "from crosstrain.adaptors.databricks import workspace_client\n"
            "from crosstrain.backends.databricks_air import DatabricksAIRBackend\n"
            f"backend = DatabricksAIRBackend(client=workspace_client({self.url!r}, token='loopback', timeout=5.0), "
            "environ={})\n"
        )
