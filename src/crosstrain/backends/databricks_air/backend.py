"""The Databricks AI Runtime backend: render the one-time run with an `ai_runtime_task` from the plan, upload the
code and the command script, submit, follow the run."""

from __future__ import annotations

import base64
import json
import shlex
from collections.abc import Iterator
from functools import partial
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from crosstrain import packaging, pricing
from crosstrain.backends import _databricks_sweep
from crosstrain.backends._databricks import (
    VOLUME_REACH,
    Recorded,
    WorkspaceBackend,
    _check_call,
    runtime_bundle,
    state_of,
)
from crosstrain.backends.base import (
    FINGERPRINT_WHY,
    IDENTITY_WHY,
    NODES_WHY,
    Capabilities,
    Ids,
    archive_bootstrap,
    bundle_command,
    launcher_command,
)
from crosstrain.backends.databricks_air import prices
from crosstrain.backends.databricks_air.logs import NOT_SERVED, ArtifactLogs, NodeLogs
from crosstrain.backends.databricks_air.plan import Plan, _plan
from crosstrain.backends.databricks_air.settings import WORKSPACE_CODE_LIMITS, DatabricksAIRSettings
from crosstrain.data import Placement, Reach
from crosstrain.errors import CrosstrainError, Problem, Unsupported
from crosstrain.records import HttpCall, JobHandle, JobState, JobStatus, Request
from crosstrain.spec import PoolView, TrainingJob

if TYPE_CHECKING:
    from databricks.sdk import WorkspaceClient
    from databricks.sdk.service.jobs import Run

    from crosstrain.preflight import Check

#: The command script's name (the service runs it on every node).
COMMAND_SCRIPT = "command.sh"
#: The file beside the command script from which AI Runtime's launcher sets secret variables on the nodes:
#: `[{"name", "secret_scope", "secret_key"}]`, the air CLI's own sidecar (the task carries no secrets itself).
SECRETS_FILE = "secret_env_vars.json"
_JSON = {"Accept": "application/json", "Content-Type": "application/json"}


def command_script(job: TrainingJob, plan: Plan, archive: str, ids: Ids) -> str:
    """The script every node runs (`command_path`): the job's variables exported, then the code archive unpacked
    from the path every node reads (workspace files or the volume) by crosstrain's bootstrap, which runs
    crosstrain's launcher (one process per GPU) from the code folder with the job's command."""
    pool = plan.pool
    command = [*(pool.command or []), *pool.args]
    launched = launcher_command(command, nproc_per_node=plan.gpus_per_node)
    # With a custom image the run has no environment to install into: the bootstrap pip-installs them.
    install = bool(pool.image) and bool(plan.dependencies)
    argv = ["python3", "-c", archive_bootstrap(), archive, *bundle_command(launched, install=install)[3:]]
    env = dict(pool.env)
    if job.output_dir:
        env["CROSSTRAIN_OUTPUT_DIR"] = job.output_dir
    # A secret AI Runtime's launcher did not set stops the node with the reason, before the command runs without it.
    checks = [
        f': "${{{name}:?crosstrain: AI Runtime did not set {name} from the secret {ref.secret} ({SECRETS_FILE} beside'
        ' this script): check that the scope and key exist and the run can read them}"'
        for name, (ref, _) in sorted(pool.secrets.items())
    ]
    lines = [
        "#!/bin/bash",
        f"# Written by crosstrain for {ids.identity}: run on every node of the AI Runtime run.",
        "set -euo pipefail",
        *checks,
        *(f"export {name}={shlex.quote(value)}" for name, value in sorted(env.items())),
        "exec " + shlex.join(argv),
    ]
    return "\n".join(lines) + "\n"


#: An environment version the air CLI sends as a workspace base environment, not an environment_version.
BASE_ENVIRONMENT_PREFIX = "databricks_ai_v"


def environment_spec(version: str) -> dict[str, Any]:
    """The run's environment for `environment_version`: `databricks_ai_v<N>` names a workspace base environment
    (`base_environment: workspace-base-environments/databricks_ai_v<N>`, as the air CLI's `buildRunEnvironment`
    sends it), anything else is an `environment_version`."""
    if version.lower().startswith(BASE_ENVIRONMENT_PREFIX):
        return {"base_environment": f"workspace-base-environments/{version.lower()}"}
    return {"environment_version": version}


def secrets_file(pool: PoolView) -> str:
    """The launcher's secret sidecar for `pool`'s secret variables, sorted by name (references, never values)."""
    entries = []
    for name, (ref, _) in sorted(pool.secrets.items()):
        scope, _, key = ref.secret.partition("/")
        entries.append({"name": name, "secret_scope": scope, "secret_key": key})
    return json.dumps(entries, sort_keys=True)


class DatabricksAIRBackend(WorkspaceBackend[DatabricksAIRSettings, Plan]):
    """Databricks AI Runtime (serverless GPU) runs. Example: `crosstrain submit job.yaml -t databricks-air`."""

    emulation_module = "crosstrain.backends.databricks_air.emulate"

    # Serverless nodes see Unity Catalog volumes as files; another cloud's URI reaches the code as is.
    data_placement = Placement(
        "Databricks AI Runtime",
        {
            "volume": VOLUME_REACH,
            **dict.fromkeys(
                ("gs", "azure", "s3"),
                Reach(
                    frozenset({"direct"}),
                    "AI Runtime nodes see only /Volumes/ and /Workspace/ as files; a cloud URI reaches the code as is",
                    "direct, or put the data in a Unity Catalog volume (/Volumes/...)",
                ),
            ),
        },
        "/Volumes/..., or cloud URIs with mode: direct",
        azure_types_fix="use type: folder or file (or read a Unity Catalog table in the code)",
    )
    result_places = {"volume": "/Volumes/main/ml/runs"}  # files on every node, read back (the Files API)
    name = "databricks-air"
    code_limits = WORKSPACE_CODE_LIMITS
    title = "Databricks AI Runtime (serverless GPU)"
    extra = "databricks"
    settings_model = DatabricksAIRSettings
    handle_ref = {"host": str, "run_id": int}
    capabilities = Capabilities(
        logs=True,  # every node's, from the per-node logs endpoint
        dedupes_create=True,  # runs/submit's idempotency_token
        launch_modes=frozenset({"auto", "per-process"}),  # crosstrain's launcher starts one process per GPU
        frameworks=frozenset({"pytorch", "deepspeed"}),
        code=True,  # the archive on workspace files or a volume, unpacked on each node by the command script
        requirements=True,  # environments[].spec.dependencies
        secret_stores=frozenset({"databricks"}),  # secret_env_vars.json beside the script, set by the launcher
        sweeps=_databricks_sweep.SUPPORT,  # grid or random, one runs/submit per trial
    )
    identity_max_len = 64  # the longest idempotency_token Databricks takes
    patch_schema = "crosstrain.backends.databricks_air"
    price_package = prices.PACKAGE
    owned_fields = {
        ("idempotency_token",): IDENTITY_WHY,
        ("tasks", 0, "ai_runtime_task", "mlflow_run"): IDENTITY_WHY,
        ("tasks", 0, "ai_runtime_task", "deployments", 0, "command_path"): FINGERPRINT_WHY,
        ("tasks", 0, "ai_runtime_task", "deployments", 0, "compute", "accelerator_count"): NODES_WHY,
    }
    planned_fields = {
        ("tasks", "*"): "the run's one task",
        ("tasks", 0, "ai_runtime_task"): "the AI Runtime task the job is planned as",
        ("tasks", 0, "ai_runtime_task", "deployments", 0, "compute"): "the nodes' accelerators (set `machine`)",
    }

    def plan(self, job: TrainingJob, settings: DatabricksAIRSettings) -> Plan:
        plan, problems = _plan(job, settings)
        if plan is None or problems:
            raise Unsupported(self.name, problems)
        return plan

    def preflight(self, job: TrainingJob, settings: DatabricksAIRSettings, plan: Plan) -> list[Check]:
        from crosstrain.backends._databricks_checks import client_or_check
        from crosstrain.backends.databricks_air import preflight
        from crosstrain.preflight import Check

        client = client_or_check(lambda: self._client(settings.host, settings.profile), settings.host)
        return [client] if isinstance(client, Check) else preflight.checks(client, settings, plan)

    def cost(self, job: TrainingJob, settings: DatabricksAIRSettings, plan: Plan) -> pricing.Cost:
        return prices.cost(job, settings, plan)

    def platform_refusals(self, job: TrainingJob, settings: DatabricksAIRSettings) -> list[Problem]:
        pool = job.pools()[0]
        problems = _databricks_sweep.refusals(job, settings)
        for path, value, message, fix in (
            (
                "network",
                job.network,
                "AI Runtime runs on serverless compute in the workspace's network; a job cannot choose one",
                "remove `network`",
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
                "AI Runtime sizes its nodes' disks itself",
                "remove `boot_disk`",
            ),
            (
                "env.CUDA_VISIBLE_DEVICES",
                "CUDA_VISIBLE_DEVICES" in pool.env,
                "crosstrain's launcher gives each process its GPU; a preset CUDA_VISIBLE_DEVICES overrides that",
                "remove CUDA_VISIBLE_DEVICES",
            ),
        ):
            if value:
                problems.append(Problem(path, message, fix))
        return problems

    def _render(self, job: TrainingJob, settings: DatabricksAIRSettings, plan: Plan, ids: Ids) -> Request:
        if job.sweep is not None:  # one runs/submit per trial
            return _databricks_sweep.render(self, job, settings, ids)
        host, bundle = settings.host, plan.bundle
        calls = self._archive_calls(bundle, plan.archive_size, settings)
        root = settings.volume or settings.workspace_dir
        archive = f"{root}/code/{bundle.short}/{packaging.ARCHIVE_NAME}"
        # The script's folder names the run and its request: a re-submit of another request never overwrites the
        # script the existing run reads, and the run read back says which request made it.
        folder = f"{settings.workspace_dir}/air/{ids.identity}/{ids.fingerprint}"
        script = f"{folder}/{COMMAND_SCRIPT}"
        content = base64.b64encode(command_script(job, plan, archive, ids).encode()).decode()
        sidecars = []
        if plan.pool.secrets:
            sidecar = base64.b64encode(secrets_file(plan.pool).encode()).decode()
            sidecars.append(
                HttpCall(
                    "POST",
                    f"{host}/api/2.0/workspace/import",
                    {"path": f"{folder}/{SECRETS_FILE}", "content": sidecar, "format": "AUTO", "overwrite": True},
                    _JSON,
                    purpose="the secrets AI Runtime's launcher sets on every node: "
                    + ", ".join(f"{name} from {ref.secret}" for name, (ref, _) in sorted(plan.pool.secrets.items()))
                    + " (scope and key, never a value)",
                )
            )
        skipped = "the calls below" if sidecars else "the two calls below"
        calls += [
            _check_call(host, script, f"skip {skipped} when {script} is there (the path names the run)"),
            HttpCall(
                "POST", f"{host}/api/2.0/workspace/mkdirs", {"path": folder}, _JSON, purpose="the script's folder"
            ),
            *sidecars,
            HttpCall(
                "POST",
                f"{host}/api/2.0/workspace/import",
                {"path": script, "content": content, "format": "AUTO", "overwrite": True},
                _JSON,
                purpose="upload the command script every node runs (command_path)",
            ),
        ]
        compute: dict[str, Any] = {
            "accelerator_type": plan.accelerator_type,
            "accelerator_count": plan.accelerator_count,
        }
        if settings.provisioned_capacity_id:
            compute["provisioned_capacity_id"] = settings.provisioned_capacity_id
        task_spec: dict[str, Any] = {
            "experiment": settings.experiment or job.name,
            "mlflow_run": ids.identity,
            "deployments": [{"name": "worker", "command_path": script, "compute": compute}],
        }
        if settings.experiment_directory:
            task_spec["mlflow_experiment_directory"] = settings.experiment_directory
        if settings.priority_class:
            task_spec["priority_class"] = settings.priority_class
        if plan.pool.image:
            task_spec["docker_image_url"] = plan.pool.image
        task: dict[str, Any] = {
            "task_key": "train",
            "ai_runtime_task": task_spec,
            "max_retries": job.scheduling.max_restarts or 0,
        }
        body: dict[str, Any] = {
            "run_name": job.name,
            "idempotency_token": ids.identity,
            "timeout_seconds": job.scheduling.timeout or 0,
            "tasks": [task],
        }
        if not plan.pool.image:  # a custom image carries its own environment
            spec: dict[str, Any] = environment_spec(settings.environment_version)
            if plan.dependencies:
                spec["dependencies"] = list(plan.dependencies)
            task["environment_key"] = "default"
            body["environments"] = [{"environment_key": "default", "spec": spec}]
        if job.identity:
            principal = "user_name" if "@" in job.identity else "service_principal_name"
            body["run_as"] = {principal: job.identity}
        calls.append(
            HttpCall(
                "POST",
                f"{host}/api/2.2/jobs/runs/submit",
                body,
                _JSON,
                purpose="submit the one-time run; a known idempotency_token returns the existing run (submit then "
                "reads it back and checks the fingerprint in its command_path)",
            )
        )
        notes = [
            f"{plan.nodes} node(s) of {plan.accelerator_type}: {plan.accelerator_count} accelerators in all; every "
            f"node runs {script}, whose launcher starts {plan.gpus_per_node} process(es) per node",
            f"ships {bundle.describe()}",
        ]
        if job.labels:
            notes.append("labels: a one-time AI Runtime run carries no tags, so the job's labels are not sent")
        if plan.pool.secrets:
            notes.append(
                f"secrets {', '.join(sorted(plan.pool.secrets))}: set on every node by AI Runtime's launcher from "
                f"{SECRETS_FILE} beside the script (the air CLI's sidecar; references only, read with the run's "
                "identity); the script stops the node with the reason where one is not set"
            )
        if plan.pool.image and plan.dependencies:
            notes.append("the image runs the bootstrap with --install: it pip-installs the requirements (needs pip)")
        return Request(
            self.name,
            ids.identity,
            job.name,
            tuple(calls),
            settings.model_dump(mode="json"),
            tuple(notes),
            code=bundle.ref if job.code is not None or job.function_payload is not None else None,
        )

    @staticmethod
    def _archive_calls(bundle: packaging.Bundle, size: int | None, settings: DatabricksAIRSettings) -> list[HttpCall]:
        """The code archive's upload, after a check that skips it when its content-addressed path is there."""
        host, headers = settings.host, {"Accept": "application/json"}
        described: dict[str, Any] = {
            "archive": packaging.ARCHIVE_NAME,
            "sha256 of the bundle": bundle.digest,
            "user files": len(bundle.user_files),
            "user bytes": bundle.size,
        }
        if size is not None:
            described["bytes"] = size
        if settings.volume:
            folder = f"{settings.volume}/code/{bundle.short}"
            archive = f"{folder}/{packaging.ARCHIVE_NAME}"
            return [
                HttpCall(
                    "HEAD",
                    f"{host}/api/2.0/fs/files{quote(archive)}",
                    None,
                    headers,
                    purpose="skip the two calls below when the archive is there (its path names its content)",
                ),
                HttpCall(
                    "PUT",
                    f"{host}/api/2.0/fs/directories{quote(folder)}",
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
            ]
        folder = f"{settings.workspace_dir}/code/{bundle.short}"
        archive = f"{folder}/{packaging.ARCHIVE_NAME}"
        return [
            _check_call(
                host, archive, "skip the two calls below when the archive is there (its path names its content)"
            ),
            HttpCall(
                "POST",
                f"{host}/api/2.0/workspace/mkdirs",
                {"path": folder},
                {**headers, "Content-Type": "application/json"},
                purpose="create the bundle's workspace folder",
            ),
            HttpCall(
                "POST",
                f"{host}/api/2.0/workspace/import",
                {"path": archive, "format": "AUTO", "overwrite": True, "content": described},
                {**headers, "Content-Type": "multipart/form-data"},
                purpose="upload the code archive as a workspace file (multipart; the content is its bytes)",
            ),
        ]

    def fingerprint_view(self, request: Request) -> Any:
        """Every call as sent, with crosstrain's runtime (the archive of a job without `code:`, and the bootstrap
        program in the command script) named by a placeholder: which crosstrain version carries the job says
        nothing about the job, so upgrading crosstrain does not start a new run of it. (A job with `code:` ships
        its folder and the runtime in one bundle, whose digest names both.)"""
        runtime = runtime_bundle()
        view = super().fingerprint_view(request)
        for call in view:
            content = (call.get("body") or {}).get("content")
            if isinstance(content, dict) and content.get("sha256 of the bundle") == runtime.digest:
                call["body"]["content"] = {"archive": content.get("archive"), "crosstrain runtime": True}
            elif isinstance(content, str):  # the command script, read as text
                text = base64.b64decode(content).decode()
                call["body"]["content"] = text.replace(shlex.quote(archive_bootstrap()), "<crosstrain bootstrap>")
        text = json.dumps(view, sort_keys=True).replace(runtime.short, "<crosstrain runtime>")
        return json.loads(text)

    # -- submit, status, cancel, list (through databricks-sdk; the workspace machinery is shared) --------------
    def recorded(self, run: Run) -> Recorded | None:
        """The identity and fingerprint the path of the run's command script names."""
        made = _made_by(run)
        return None if made is None else Recorded(*made)

    def status(self, handle: JobHandle) -> JobStatus:
        """The run's state; while it waits, the task output's status_message (e.g. that it waits for GPUs); once
        failed, why, from the task output's error and trace."""
        from crosstrain.failures import last_lines, summary  # here: a render has no use for it

        if "sweep" in handle.ref:  # every trial's state and metric, and the best so far
            return _databricks_sweep.status(self, handle)
        w = self._handle_client(handle)
        run = self._read_run(w, int(handle.ref["run_id"]))
        state, native, message = state_of(run)
        if state.terminal and state is not JobState.FAILED:
            return JobStatus(state, native, message)
        for task in run.tasks or []:
            if task.run_id is None:
                continue
            try:
                output = self._safe_call(partial(w.jobs.get_run_output, task.run_id), f"runs/get-output {task.run_id}")
            except CrosstrainError:  # the output is an aid here: the state stands without it
                continue
            said = output.ai_runtime_task_output.status_message if output.ai_runtime_task_output else None
            if state is JobState.FAILED:
                trace = (output.error_trace or "").splitlines() or (output.logs or "").splitlines()
                console = run.run_page_url or handle.console_url
                message = summary(
                    "the run failed", output.error or "", last_lines(trace), console, said=said or message
                )
            elif said:
                message = said
        return JobStatus(state, native, message)

    def logs(self, handle: JobHandle, *, follow: bool = False) -> Iterator[str]:
        """Every node's lines, each prefixed `[nodeK]`, from AI Runtime's per-node logs endpoint, or where the
        workspace does not serve it, from the run's MLflow artifacts; with `follow`, read again every
        `log_interval` seconds while the run has not ended (the air CLI's own `--watch` shows node 0 only)."""
        if "sweep" in handle.ref:  # every trial's run, each line tagged with its trial
            yield from _databricks_sweep.logs(self, handle, lambda one: self.logs(one, follow=follow))
            return
        w = self._handle_client(handle)
        run_id = int(handle.ref["run_id"])
        nodes = NodeLogs(w, run_id, self._safe_call)
        artifacts = ArtifactLogs(w, partial(self._mlflow_run, w, run_id), self._safe_call, self.retry.call_timeout)
        shown = 0

        def read(final: bool) -> Iterator[str]:
            nonlocal shown
            if nodes.served:
                yield from nodes.read()
            if nodes.served:
                return
            for line in artifacts.read(final):
                shown += 1
                yield line
            if final and not shown:
                yield NOT_SERVED

        def ended() -> bool:
            return state_of(self._read_run(w, run_id))[0].terminal

        yield from self.follow(read, ended, follow=follow, interval=self.log_interval)

    def _mlflow_run(self, w: WorkspaceClient, run_id: int) -> str | None:
        """The MLflow run AI Runtime logs the run's nodes into (its task output says which), once it has one."""
        for task in self._read_run(w, run_id).tasks or []:
            if task.run_id is None:
                continue
            output = self._safe_call(partial(w.jobs.get_run_output, task.run_id), f"runs/get-output {task.run_id}")
            air = output.ai_runtime_task_output
            if air is not None and air.mlflow_run_id:
                return str(air.mlflow_run_id)
        return None


def _made_by(run: Run) -> tuple[str, str] | None:
    """The identity and fingerprint a run's command script names (`.../air/<identity>/<fingerprint>/command.sh`),
    or None where the run has no AI Runtime task crosstrain made."""
    for task in run.tasks or []:
        spec = task.ai_runtime_task
        for deployment in (spec.deployments or []) if spec else []:
            path = PurePosixPath(deployment.command_path or "")
            if path.name == COMMAND_SCRIPT and path.parent.parent.parent.name == "air":
                return path.parent.parent.name, path.parent.name
    return None
