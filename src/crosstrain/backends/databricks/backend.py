"""The Databricks backend: render the one-time run from the plan, upload the code, submit, follow the run."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import re
from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from crosstrain import catalog, packaging, pricing, secrets, uploads
from crosstrain.backends import _databricks_sweep
from crosstrain.backends._databricks import VOLUME_REACH, Recorded, WorkspaceBackend
from crosstrain.backends.base import (
    FINGERPRINT_WHY,
    IDENTITY_WHY,
    NODES_WHY,
    Capabilities,
    Ids,
)
from crosstrain.backends.databricks import prices, wire
from crosstrain.backends.databricks.logs import (
    DRIVER_PREFIX,
    _DriverLogs,
    _failing_rank,
    _not_seen,
    _rank_of,
    _state_of,
    log_conf,
    log_destination,
)
from crosstrain.backends.databricks.plan import Plan, Planned, _library
from crosstrain.backends.databricks.settings import (
    _SMALL_GPU,
    FINGERPRINT_TAG,
    WORKSPACE_CODE_LIMITS,
    DatabricksSettings,
)
from crosstrain.backends.databricks.wire import (
    _check_call,
    _cluster_tags,
)
from crosstrain.data import Placement, Reach
from crosstrain.databricks_task import LAUNCHER_NAME
from crosstrain.errors import CrosstrainError, Problem, Unsupported
from crosstrain.records import HttpCall, JobHandle, JobState, JobStatus, Request
from crosstrain.spec import PoolView, TrainingJob

if TYPE_CHECKING:
    from databricks.sdk import WorkspaceClient
    from databricks.sdk.service.jobs import Run

    from crosstrain.preflight import Check


class DatabricksBackend(WorkspaceBackend[DatabricksSettings, Planned]):
    """Databricks one-time runs that call TorchDistributor. Example: `crosstrain submit job.yaml -t databricks`."""

    emulation_module = "crosstrain.backends.databricks.emulate"
    code_limits = WORKSPACE_CODE_LIMITS
    # Unity Catalog volumes and DBFS are files on every node (read and written in place); another cloud's URI
    # reaches the code as is (`direct`), for Spark or a client with the cluster's credentials.
    data_placement = Placement(
        "Databricks",
        {
            "volume": VOLUME_REACH,
            "dbfs": Reach(
                frozenset({None, "mount", "direct"}),
                "every node sees it as files (FUSE) and reads and writes it in place, with no copy",
                "mount (the default) or direct",
                mounted_at=lambda path: "/dbfs/" + path.removeprefix("dbfs:/").lstrip("/"),
            ),
            **dict.fromkeys(
                ("gs", "azure", "s3"),
                Reach(
                    frozenset({"direct"}),
                    "a cluster sees only /Volumes/ and /dbfs/ as files; a cloud URI reaches the code as is, for "
                    "Spark or a client with the cluster's credentials",
                    "direct, or put the data in a Unity Catalog volume (/Volumes/...)",
                ),
            ),
        },
        "/Volumes/... and dbfs:/... (as /dbfs/...), or cloud URIs with mode: direct",
        azure_types_fix="use type: folder or file (or read a Unity Catalog table with Spark in the code)",
    )
    result_places = {"volume": "/Volumes/main/ml/runs", "dbfs": "dbfs:/runs"}  # files on every node, read back
    name = "databricks"
    title = "Databricks (one-time runs, TorchDistributor)"
    extra = "databricks"
    settings_model = DatabricksSettings
    handle_ref = {"host": str, "run_id": int}  # what status, cancel and logs read
    capabilities = Capabilities(
        spot=True,
        logs=True,
        dedupes_create=True,
        launch_modes=frozenset({"auto", "per-process"}),
        frameworks=frozenset({"pytorch", "deepspeed"}),  # TorchDistributor, DeepspeedTorchDistributor
        framework_reasons=(
            (
                "horovod",
                "Databricks ran Horovod through HorovodRunner, deprecated and not installed on Databricks Runtime ML "
                "16.0 and above; Databricks recommends TorchDistributor",
            ),
        ),
        secret_stores=frozenset({"databricks"}),  # `{{secrets/scope/key}}` in spark_env_vars
        code=True,  # an archive on workspace files or a volume, unpacked on each node by the launcher
        requirements=True,  # task libraries: {pypi: {package: ...}}
        environments=True,  # a Databricks Runtime ML (RUNTIMES)
        sweeps=_databricks_sweep.SUPPORT,  # grid or random, one runs/submit per trial
    )
    identity_max_len = 64  # the longest idempotency_token Databricks takes
    patch_schema = "crosstrain.backends.databricks"  # its schema.json
    price_package = prices.PACKAGE
    owned_fields = {
        ("idempotency_token",): IDENTITY_WHY,
        ("tasks", 0, "new_cluster", "custom_tags", "crosstrain_job"): IDENTITY_WHY,
        ("tasks", 0, "new_cluster", "custom_tags", FINGERPRINT_TAG): FINGERPRINT_WHY,
        ("tasks", 0, "new_cluster", "num_workers"): NODES_WHY,
        ("tasks", 0, "spark_python_task", "parameters"): "the TorchDistributor call the driver makes (set the "
        "job's command, launch and nodes)",
    }
    planned_fields = {
        ("tasks", "*"): "the run's task, which the driver runs",
        ("tasks", 0, "new_cluster"): "the cluster the job's nodes are planned on",
        ("tasks", 0, "new_cluster", "spark_version"): "the cluster's runtime (targets.databricks.spark_version)",
        ("tasks", 0, "new_cluster", "node_type_id"): "the nodes' machine (set `machine`)",
        ("tasks", 0, "spark_python_task"): "the driver's TorchDistributor call",
    }

    # -- render (pure) -------------------------------------------------------------------------------------
    def plan(self, job: TrainingJob, settings: DatabricksSettings) -> Planned:
        plan = Plan(job, settings)
        if plan.call is None or plan.bundle is None or plan.problems:
            raise Unsupported(self.name, plan.problems)
        return Planned(plan, plan.call, plan.bundle)

    def preflight(self, job: TrainingJob, settings: DatabricksSettings, plan: Planned) -> list[Check]:
        from crosstrain.backends._databricks_checks import client_or_check
        from crosstrain.backends.databricks import preflight
        from crosstrain.preflight import Check

        client = client_or_check(lambda: self._client(settings.host, settings.profile), settings.host)
        return [client] if isinstance(client, Check) else preflight.checks(client, settings, plan)

    def cost(self, job: TrainingJob, settings: DatabricksSettings, plan: Planned) -> pricing.Cost:
        return prices.cost(job, settings, plan)

    def platform_refusals(self, job: TrainingJob, settings: DatabricksSettings) -> list[Problem]:
        problems = _databricks_sweep.refusals(job, settings)
        pool = job.pools()[0]
        if "CUDA_VISIBLE_DEVICES" in pool.env or "CUDA_VISIBLE_DEVICES" in pool.secrets:
            problems.append(
                Problem(
                    "env.CUDA_VISIBLE_DEVICES",
                    "TorchDistributor gives each Spark task its GPUs; a preset CUDA_VISIBLE_DEVICES overrides that",
                    "remove CUDA_VISIBLE_DEVICES",
                )
            )
        for path, value, message, fix in (
            (
                "network",
                job.network,
                "a Databricks cluster joins its workspace's network; a job cannot choose one",
                "remove `network` (set networking on the workspace)",
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
                "crosstrain does not size Databricks node disks",
                "remove `boot_disk`; Databricks sizes the disks of each node type",
            ),
        ):
            if value:
                problems.append(Problem(path, message, fix))
        return problems

    def _render(self, job: TrainingJob, settings: DatabricksSettings, planned: Planned, ids: Ids) -> Request:
        if job.sweep is not None:  # one runs/submit per trial
            return _databricks_sweep.render(self, job, settings, ids)
        plan, bundle = planned.shape, planned.bundle
        identity = ids.identity
        host, call = settings.host, planned.call
        calls: list[HttpCall] = []
        notes: list[str] = []
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        calls += self._bundle_calls(bundle, plan.archive_size, settings)
        code_dir = f"{settings.workspace_dir}/code/{bundle.short}"
        archive = f"{settings.volume or settings.workspace_dir}/code/{bundle.short}/{packaging.ARCHIVE_NAME}"
        call = dataclasses.replace(call, code=archive)
        if plan.local_file is not None:
            data = plan.local_data
            # Content-addressed: a re-submit under this identity with another file never overwrites the file
            # the existing run reads (that re-submit is refused, but its upload comes first).
            folder = f"{settings.workspace_dir}/{identity}/{hashlib.sha256(data).hexdigest()[:16]}"
            remote = uploads.join_destination(folder, plan.local_file.name, "command")
            content = base64.b64encode(data).decode()
            calls += [
                _check_call(host, remote, f"skip the two calls below when {remote} is there (the path names the file)"),
                HttpCall(
                    "POST",
                    f"{host}/api/2.0/workspace/mkdirs",
                    {"path": folder},
                    headers,
                    purpose="create the folder the training file is uploaded to",
                ),
                HttpCall(
                    "POST",
                    f"{host}/api/2.0/workspace/import",
                    {"path": remote, "content": content, "format": "AUTO", "overwrite": True},
                    headers,
                    purpose=f"upload {plan.local_file} as a workspace file, visible on every node",
                ),
            ]
            call = dataclasses.replace(call, kind="file", target=remote)

        task: dict[str, Any] = {
            "task_key": "train",
            "new_cluster": self._cluster(job, settings, plan, ids, notes),
            "spark_python_task": {"python_file": f"{code_dir}/{LAUNCHER_NAME}", "parameters": call.parameters()},
        }
        libraries = [*plan.libraries, *(_library(spec) for spec in settings.libraries)]
        if libraries:
            task["libraries"] = libraries
        if job.scheduling.max_restarts is not None:
            task["max_retries"] = job.scheduling.max_restarts
        body: dict[str, Any] = {
            "run_name": job.name,
            "idempotency_token": identity,
            "timeout_seconds": job.scheduling.timeout or 0,
            "tasks": [task],
        }
        if job.identity:
            principal = "user_name" if "@" in job.identity else "service_principal_name"
            body["run_as"] = {principal: job.identity}
        calls.append(
            HttpCall(
                "POST",
                f"{host}/api/2.2/jobs/runs/submit",
                body,
                headers,
                purpose="submit the one-time run; a known idempotency_token returns the existing run (submit then "
                "reads it back and checks its crosstrain_fingerprint tag)",
            )
        )
        notes.append(
            f"{call.distributor()}.run("
            + (
                f"bash -c {call.target!r} on every rank)"
                if call.kind == "shell"
                else f"{call.target!r}, *{list(call.args)!r})"
            )
        )
        ships = job.code is not None or job.function_payload is not None
        if ships:
            notes.append(f"ships {bundle.describe()}")
        notes.append(
            f"the cluster delivers its logs to {log_destination(settings, identity)}/<cluster id>/ (about every "
            "5 minutes); `crosstrain logs --follow` reads the driver's stdout and stderr there"
        )
        return Request(
            self.name,
            identity,
            job.name,
            tuple(calls),
            settings.model_dump(mode="json"),
            tuple(notes),
            code=bundle.ref if ships else None,
        )

    @staticmethod
    def _bundle_calls(bundle: packaging.Bundle, size: int | None, settings: DatabricksSettings) -> list[HttpCall]:
        """The bundle's uploads, each after a check that skips it when its content-addressed path is there
        already: the archive to the workspace or the volume, then crosstrain's launcher (this version's
        `databricks_task.py`) in the workspace folder."""
        host = settings.host
        headers = {"Accept": "application/json"}
        code_dir = f"{settings.workspace_dir}/code/{bundle.short}"
        launcher = f"{code_dir}/{LAUNCHER_NAME}"
        source = next(f for f in bundle.files if f.path == f"{packaging.PACKAGE}/crosstrain/databricks_task.py")
        described: dict[str, Any] = {
            "archive": packaging.ARCHIVE_NAME,
            "sha256 of the bundle": bundle.digest,
            "user files": len(bundle.user_files),
            "user bytes": bundle.size,
        }
        if size is not None:
            described["bytes"] = size
        mkdirs = HttpCall(
            "POST",
            f"{host}/api/2.0/workspace/mkdirs",
            {"path": code_dir},
            {**headers, "Content-Type": "application/json"},
            purpose="create the bundle's workspace folder",
        )
        calls: list[HttpCall] = []
        if settings.volume:
            volume_dir = f"{settings.volume}/code/{bundle.short}"
            archive = f"{volume_dir}/{packaging.ARCHIVE_NAME}"
            calls += [
                HttpCall(
                    "HEAD",
                    f"{host}/api/2.0/fs/files{quote(archive)}",
                    None,
                    headers,
                    purpose="skip the two calls below when the archive is there (its path names its content)",
                ),
                HttpCall(
                    "PUT",
                    f"{host}/api/2.0/fs/directories{quote(volume_dir)}",
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
                _check_call(host, launcher, "skip the two calls below when the launcher is there"),
                mkdirs,
            ]
        else:
            archive = f"{code_dir}/{packaging.ARCHIVE_NAME}"
            calls += [
                _check_call(
                    host, archive, "skip the two calls below when the archive is there (its path names its content)"
                ),
                mkdirs,
                HttpCall(
                    "POST",
                    f"{host}/api/2.0/workspace/import",
                    {"path": archive, "format": "AUTO", "overwrite": True, "content": described},
                    {**headers, "Content-Type": "multipart/form-data"},
                    purpose="upload the code archive as a workspace file (multipart; the content is its bytes)",
                ),
                _check_call(host, launcher, "skip the call below when the launcher is there"),
            ]
        calls.append(
            HttpCall(
                "POST",
                f"{host}/api/2.0/workspace/import",
                {
                    "path": launcher,
                    "format": "AUTO",
                    "overwrite": True,
                    "content": {"bundle file": source.path, "sha256": source.sha256, "bytes": source.size},
                },
                {**headers, "Content-Type": "multipart/form-data"},
                purpose="upload crosstrain's launcher, the run's python_file: it unpacks the archive on each node",
            )
        )
        return calls

    def _cluster(
        self, job: TrainingJob, settings: DatabricksSettings, plan: Plan, ids: Ids, notes: list[str]
    ) -> dict[str, Any]:
        pool: PoolView = plan.pool
        node_type = plan.machine.machine_type
        env = {} if plan.single_node else {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"}
        if node_type and node_type.startswith("g5.") and plan.machine.gpu_count > 1:
            env["NCCL_P2P_DISABLE"] = "1"  # peer access fails between G5 GPUs
        if job.output_dir:
            env["CROSSTRAIN_OUTPUT_DIR"] = job.output_dir
        env.update(pool.env)
        # The cluster resolves these at start; the run's spec keeps only the reference.
        env.update({name: secrets.databricks_placeholder(ref) for name, (ref, _) in sorted(pool.secrets.items())})
        tags = {**job.labels, "crosstrain_job": ids.identity, FINGERPRINT_TAG: ids.fingerprint}
        cluster: dict[str, Any] = {
            "spark_version": plan.spark_version,
            "node_type_id": node_type,
            "data_security_mode": "SINGLE_USER",  # standard (shared) access mode has no GPUs or containers
        }
        if env:
            cluster["spark_env_vars"] = env
        if plan.single_node:
            cluster |= {
                "driver_node_type_id": node_type,
                "num_workers": 0,
                "spark_conf": {"spark.databricks.cluster.profile": "singleNode", "spark.master": "local[*, 4]"},
            }
            tags["ResourceClass"] = "SingleNode"
        else:
            cluster |= {
                "driver_node_type_id": settings.driver_node_type_id or self._driver(plan),
                "num_workers": plan.nodes,
                "spark_conf": {"spark.task.resource.gpu.amount": "1"},
            }
        cluster["custom_tags"] = tags
        cluster["cluster_log_conf"] = log_conf(settings, ids.identity)
        if pool.image:
            cluster["docker_image"] = {"url": pool.image}
            cluster["spark_version"] = re.sub(r"-(gpu|cpu)-ml", "", plan.spark_version)
            notes.append(
                f"Container Services does not run ML runtimes, so the cluster runs {cluster['spark_version']}: "
                f"{pool.image} must carry torch, CUDA, NCCL and crosstrain's dependencies"
            )
        if job.scheduling.spot:
            availability = {
                "aws": "SPOT_WITH_FALLBACK",
                "azure": "SPOT_WITH_FALLBACK_AZURE",
                "gcp": "PREEMPTIBLE_WITH_FALLBACK_GCP",
            }[plan.cloud or "aws"]
            # first_on_demand=1 keeps the driver on demand; losing a worker still fails the barrier stage.
            cluster[f"{plan.cloud}_attributes"] = {"availability": availability, "first_on_demand": 1}
        return cluster

    @staticmethod
    def _driver(plan: Plan) -> str:
        kind = plan.machine.gpu or _SMALL_GPU[plan.cloud or "aws"]
        try:
            driver = catalog.resolve(plan.platform, machine_type=None, gpu=kind, gpu_count=1).machine_type
        except catalog.CatalogError:
            driver = catalog.resolve(
                plan.platform, machine_type=None, gpu=_SMALL_GPU[plan.cloud or "aws"], gpu_count=1
            ).machine_type
        assert driver is not None
        return driver

    def fingerprint_view(self, request: Request) -> Any:
        """Every call as sent, with crosstrain's runtime bundle (the archive of a job without `code:`, and the
        launcher) named by a placeholder instead of its digest: which crosstrain version carries the job to
        the cluster says nothing about the job, so upgrading crosstrain does not start a new run of it. (A job
        with `code:` ships its folder and the runtime in one bundle, whose digest names both.)"""
        runtime = wire.runtime_bundle()
        view = super().fingerprint_view(request)
        for call in view:
            content = (call.get("body") or {}).get("content")
            if isinstance(content, dict) and "bundle file" in content:
                call["body"]["content"] = {"bundle file": content["bundle file"]}
            if isinstance(content, dict) and content.get("sha256 of the bundle") == runtime.digest:
                call["body"]["content"] = {"archive": content.get("archive"), "crosstrain runtime": True}
        text = json.dumps(view, sort_keys=True).replace(runtime.short, "<crosstrain runtime>")
        return json.loads(text)

    # -- submit, status, cancel, logs (through databricks-sdk) ---------------------------------------------

    def recorded(self, run: Run) -> Recorded | None:
        """The identity and fingerprint on the run's cluster's custom tags."""
        tags = _cluster_tags(run)
        return None if tags is None else Recorded(tags.get("crosstrain_job"), tags.get(FINGERPRINT_TAG))

    def status(self, handle: JobHandle) -> JobStatus:
        if "sweep" in handle.ref:  # every trial's state and metric, and the best so far
            return _databricks_sweep.status(self, handle)
        w = self._handle_client(handle)
        run = self._read_run(w, int(handle.ref["run_id"]))
        state, native, message = _state_of(run)
        if state is JobState.FAILED:
            message = self._failure(w, run, message, run.run_page_url or handle.console_url)
        return JobStatus(state, native, message)

    def _failure(self, w: WorkspaceClient, run: Run, message: str, console: str) -> str:
        """Why a run failed: the task's `state_message`, the run output's error and the last lines of its trace
        (else of stdout), the failing rank where TorchDistributor's or the launcher's output names it, and the
        kind of failure with what to do next."""
        from crosstrain.failures import last_lines, summary  # here: a render has no use for it

        tasks = run.tasks or []
        said = next((t.state.state_message for t in tasks if t.state and t.state.state_message), None) or message
        error, lines, read, rank = "", [], [], None
        for task_run_id in [task.run_id for task in tasks if task.run_id is not None]:
            try:
                output = self._safe_call(partial(w.jobs.get_run_output, task_run_id), f"runs/get-output {task_run_id}")
            except CrosstrainError:  # the output is an aid here: the state stands without it
                continue
            error = error or (output.error or "")
            trace = (output.error_trace or "").splitlines()
            logs = (output.logs or "").splitlines()
            found = _failing_rank([*logs, *trace, error])
            own = [line for line in logs if found is not None and _rank_of(line) == found]
            lines += last_lines(own or trace or logs)  # the failing rank's own lines where it has any
            read += last_lines(logs, 20) + last_lines(trace, 20)
            rank = rank if rank is not None else found
        what = f"rank {rank} failed" if rank is not None else "the run failed"
        return summary(what, error, lines, console, said=said, evidence=read)

    def logs(self, handle: JobHandle, *, follow: bool = False) -> Iterator[str]:
        """The driver's stdout and stderr as the cluster delivers them (`cluster_log_conf`, read from where the
        last read ended, so no line comes twice), each line prefixed `[driver]` (`[driver stderr]`); with
        `follow`, read again every `log_interval` seconds while the run has not ended. Then the task run's
        output (`runs/get-output`): the part of stdout's tail not delivered yet, the error and its trace."""
        if "sweep" in handle.ref:  # every trial's run, each line tagged with its trial
            yield from _databricks_sweep.logs(self, handle, lambda one: self.logs(one, follow=follow))
            return
        w = self._handle_client(handle)
        run_id = int(handle.ref["run_id"])
        run = self._read_run(w, run_id)
        reader: _DriverLogs | None = None
        first = True

        def ended() -> bool:
            nonlocal run, first
            if not first:
                run = self._read_run(w, run_id)
            first = False
            return _state_of(run)[0].terminal

        def read(final: bool) -> Iterator[str]:
            nonlocal reader
            reader = reader or _DriverLogs.of(run, w, self._safe_call)
            # A line still being written waits for its end, unless the run ended.
            return reader.read(final=final) if reader is not None else iter(())

        yield from self.follow(read, ended, follow=follow, interval=self.log_interval)
        stdout = reader.stdout if reader is not None else []
        for task_run_id in [task.run_id for task in run.tasks or [] if task.run_id is not None]:
            output = self._safe_call(partial(w.jobs.get_run_output, task_run_id), f"runs/get-output {task_run_id}")
            tail = (output.logs or "").splitlines()
            rest = _not_seen(stdout, tail)
            if stdout and rest and len(rest) == len(tail) and output.logs_truncated:
                yield "[crosstrain: lines between the delivered logs and the output's tail are not shown]"
            elif not stdout and output.logs_truncated:
                yield "[crosstrain: Databricks kept only the tail of this output]"
            yield from (f"{DRIVER_PREFIX}{line}" for line in rest)
            if output.error:
                yield f"error: {output.error}"
            yield from (output.error_trace or "").splitlines()
