"""Each platform's own check of a rendered request, in one place: the backend tests, the fuzz suite and
`benchmarks/fuzz.py` all ask `violations(request)` whether a render is valid for its platform.

What counts as valid is the platform's: Vertex AI's `CustomJob` message and the aiplatform.v1 discovery
document, AI Platform's ml.v1 discovery document, Azure ML's own `load_job` schema and REST-to-entity
conversion, the Databricks SDK's request classes. On top of those structural checks, the fields the platform
documents as required (which a schema check alone does not see) are checked here, each with its source.
"""

from __future__ import annotations

import inspect
import io
import itertools
import json
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from crosstrain.records import Request
from tests.backends.discovery import violations as discovery_violations

#: Google label keys and values (https://cloud.google.com/resource-manager/docs/labels-overview): at most 64
#: characters of lowercase letters, digits, `_` and `-`; a key starts with a letter.
_GOOGLE_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,63}")
_GOOGLE_LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,64}")


def violations(request: Request) -> list[str]:
    """Every way `request` departs from what its platform accepts; empty when it is valid."""
    check = _CHECKS.get(request.target)
    if check is None:
        raise KeyError(f"no platform check for target {request.target!r}")
    found: list[str] = []
    try:
        json.dumps(request.to_dict(), allow_nan=False)
    except (TypeError, ValueError) as exc:
        found.append(f"request is not JSON: {exc}")
        return found
    if Request.from_dict(json.loads(request.to_json())) != request:
        found.append("request does not round-trip through its JSON form")
    return found + check(request)


def assert_valid(request: Request) -> None:
    found = violations(request)
    assert not found, "\n".join(found)


# -- Vertex AI -------------------------------------------------------------------------------------------------
def vertex(request: Request) -> list[str]:
    """`CustomJob.from_json` (unknown fields, bad enums, ints and durations are errors), the aiplatform.v1
    discovery document, and what google.md section 1 documents: a non-empty primary pool of one replica, in
    every pool a machine type and a container image, at most 100 environment variables per container, a boot
    disk of 100-64000 GB, and Google's label rules."""
    from google.cloud.aiplatform_v1 import CustomJob, HyperparameterTuningJob

    body = request.create.body
    found: list[str] = []
    tuning = "studySpec" in body  # a sweep: the job's spec is every trial's
    message, schema = (
        (HyperparameterTuningJob, "GoogleCloudAiplatformV1HyperparameterTuningJob")
        if tuning
        else (CustomJob, "GoogleCloudAiplatformV1CustomJob")
    )
    try:
        message.from_json(json.dumps(body))
    except Exception as exc:  # the message's own parser: any failure is a body it does not take
        found.append(f"{message.__name__}.from_json: {type(exc).__name__}: {exc}")
    found += discovery_violations("aiplatform.v1", schema, body)
    if not body.get("displayName"):
        found.append("displayName: required")
    found += _google_labels(body.get("labels") or {})
    if tuning:
        found += _study(body)
    pools = (body.get("trialJobSpec" if tuning else "jobSpec") or {}).get("workerPoolSpecs") or []
    if not pools or not pools[0]:
        found.append("jobSpec.workerPoolSpecs[0]: required (the primary pool)")
    elif pools[0].get("replicaCount") not in (None, "1"):
        found.append(f"jobSpec.workerPoolSpecs[0].replicaCount: one replica, not {pools[0]['replicaCount']}")
    for index, pool in enumerate(pools):
        if not pool:
            continue
        where = f"jobSpec.workerPoolSpecs[{index}]"
        machine = pool.get("machineSpec") or {}
        if not machine.get("machineType"):
            found.append(f"{where}.machineSpec.machineType: required")
        if bool(machine.get("acceleratorType")) != bool(machine.get("acceleratorCount")):
            found.append(f"{where}.machineSpec: acceleratorType and acceleratorCount go together")
        container = pool.get("containerSpec") or {}
        if not container.get("imageUri") and "pythonPackageSpec" not in pool:
            found.append(f"{where}.containerSpec.imageUri: required")
        if len(container.get("env") or []) > 100:
            found.append(f"{where}.containerSpec.env: at most 100 variables, not {len(container['env'])}")
        size = (pool.get("diskSpec") or {}).get("bootDiskSizeGb")
        if size is not None and not 100 <= size <= 64000:
            found.append(f"{where}.diskSpec.bootDiskSizeGb: 100-64000, not {size}")
        if int(pool.get("replicaCount") or "0") < 1:
            found.append(f"{where}.replicaCount: at least 1 in a pool that is used")
    return found


def _study(body: Mapping[str, Any]) -> list[str]:
    """What the HyperparameterTuningJob reference documents beyond the schema: a metric and parameters, trial
    counts of at least 1, and GRID_SEARCH only over INTEGER, CATEGORICAL and DISCRETE parameters
    (https://cloud.google.com/vertex-ai/docs/reference/rest/v1/StudySpec)."""
    found = []
    study = body["studySpec"]
    if not study.get("metrics") or not study.get("parameters"):
        found.append("studySpec: metrics and parameters are required")
    for key in ("maxTrialCount", "parallelTrialCount"):
        if int(body.get(key) or 0) < 1:
            found.append(f"{key}: required, at least 1")
    if study.get("algorithm") == "GRID_SEARCH" and any("doubleValueSpec" in p for p in study.get("parameters", [])):
        found.append("studySpec.algorithm: GRID_SEARCH takes INTEGER, CATEGORICAL and DISCRETE parameters only")
    return found


# -- AI Platform Training ----------------------------------------------------------------------------------
_JOB_ID = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def aiplatform(request: Request) -> list[str]:
    """The ml.v1 discovery document, and what it and google.md section 4 mark required: jobId, scaleTier,
    region, masterType with CUSTOM, `runtimeVersion` or `masterConfig.imageUri`, a type for every pool with a
    count, `maxWaitTime` of at least 1800s, `priority` 0-1000."""
    body = request.create.body
    found = discovery_violations("ml.v1", "GoogleCloudMlV1__Job", body)
    if not _JOB_ID.fullmatch(str(body.get("jobId") or "")) or len(body["jobId"]) > 128:
        found.append(f"jobId: {body.get('jobId')!r} is not letters, digits and '_' starting with a letter")
    found += _google_labels(body.get("labels") or {})
    training = body.get("trainingInput") or {}
    for key in ("scaleTier", "region"):
        if not training.get(key):
            found.append(f"trainingInput.{key}: required")
    if training.get("scaleTier") == "CUSTOM" and not training.get("masterType"):
        found.append("trainingInput.masterType: required with scaleTier CUSTOM")
    if not training.get("runtimeVersion") and not (training.get("masterConfig") or {}).get("imageUri"):
        found.append("trainingInput: runtimeVersion or masterConfig.imageUri is required")
    for pool in ("worker", "parameterServer", "evaluator"):
        if int(training.get(f"{pool}Count") or "0") > 0 and not training.get(f"{pool}Type"):
            found.append(f"trainingInput.{pool}Type: required with {pool}Count")
    hyper = training.get("hyperparameters")
    if hyper is not None:  # "Required." in HyperparameterSpec's reference: goal and params
        found += [f"trainingInput.hyperparameters.{k}: required" for k in ("goal", "params") if not hyper.get(k)]
        for index, param in enumerate(hyper.get("params") or []):
            values = param.get("discreteValues")
            if values is not None and any(b <= a for a, b in itertools.pairwise(values)):
                found.append(f"trainingInput.hyperparameters.params[{index}].discreteValues: strictly increasing")
            if param.get("type") in ("DOUBLE", "INTEGER") and not ("minValue" in param and "maxValue" in param):
                found.append(f"trainingInput.hyperparameters.params[{index}]: minValue and maxValue required")
    scheduling = training.get("scheduling") or {}
    if "maxWaitTime" in scheduling and float(str(scheduling["maxWaitTime"]).rstrip("s")) < 1800:
        found.append(f"trainingInput.scheduling.maxWaitTime: at least 1800s, not {scheduling['maxWaitTime']}")
    if "priority" in scheduling and not 0 <= int(scheduling["priority"]) <= 1000:
        found.append(f"trainingInput.scheduling.priority: 0-1000, not {scheduling['priority']}")
    return found


def _google_labels(labels: Mapping[str, Any]) -> list[str]:
    found = []
    for key, value in labels.items():
        if not _GOOGLE_LABEL_KEY.fullmatch(key):
            found.append(f"labels.{key}: not a Google label key")
        if not isinstance(value, str) or not _GOOGLE_LABEL_VALUE.fullmatch(value):
            found.append(f"labels.{key}: {value!r} is not a Google label value")
    return found


# -- Azure ML ----------------------------------------------------------------------------------------------
def azureml(request: Request) -> list[str]:
    """azure-ai-ml's own schema: the az-yaml form loads with `load_job` as a `Command` that passes `_validate()`,
    and the job PUT's body converts from the REST model to a `Command` that passes it too."""
    from azure.ai.ml import load_job
    from azure.ai.ml._restclient.arm_ml_service.models import JobBase
    from azure.ai.ml.entities import Command, Job
    from azure.ai.ml.sweep import SweepJob

    from crosstrain.registry import create_backend

    found: list[str] = []
    disabled = logging.root.manager.disable
    logging.disable(logging.WARNING)  # azure-ai-ml logs "experimental class" notices
    try:
        text = create_backend("azureml", environ={}).format(request, "az-yaml")
        loaders: list[tuple[str, Callable[[], Any]]] = [
            ("load_job(az-yaml)", lambda: load_job(source=io.StringIO(text))),
            ("Job._from_rest_object", lambda: Job._from_rest_object(JobBase(request.create.body))),
        ]
        for what, load in loaders:
            try:
                job = load()
            except Exception as exc:  # the SDK's own validation: any failure is a job it does not take
                found.append(f"{what}: {type(exc).__name__}: {exc}")
                continue
            expected = SweepJob if request.create.body["properties"].get("jobType") == "Sweep" else Command
            if not isinstance(job, expected):
                found.append(f"{what}: a {type(job).__name__}, not a {expected.__name__}")
                continue
            if isinstance(job, SweepJob):  # its trial is a command job, with the command job's own checks
                found += _sweep_violations(what, job)
                continue
            result = job._validate()
            if not result.passed:
                found.append(f"{what}: {result.error_messages}")
    finally:
        logging.disable(disabled)
    return found


def _sweep_violations(what: str, job: Any) -> list[str]:
    """A sweep job as azure-ai-ml reads it: an objective, limits, a search space whose every distribution the SDK
    knows, and a trial that is a valid command (`Command._validate` on the trial's fields)."""
    from azure.ai.ml import command as command_job

    found = []
    if (
        job.objective is None
        or not job.objective.primary_metric
        or job.objective.goal.lower()
        not in (
            "minimize",
            "maximize",
        )
    ):
        found.append(f"{what}: objective needs a primary metric and a goal")
    if job.limits is None or not job.limits.max_total_trials:
        found.append(f"{what}: limits.max_total_trials is required")
    if not job.search_space:
        found.append(f"{what}: search_space is empty")
    trial = job.trial
    command = command_job(
        command=trial.command,
        code=trial.code,
        environment=trial.environment,
        environment_variables=trial.environment_variables,
        distribution=trial.distribution,
        resources=trial.resources,
        compute=job.compute,
    )
    result = command._validate()
    if not result.passed:
        found.append(f"{what}: trial: {result.error_messages}")
    return found


# -- Databricks --------------------------------------------------------------------------------------------
def databricks(request: Request) -> list[str]:
    """The SDK's request classes: every task round-trips through `SubmitTask` (a field it does not know, or of
    the wrong type, does not survive), `run_as` through `JobRunAs`, every body key is a parameter of
    `jobs.submit`, uploads use a known `ImportFormat`; the idempotency token is at most 64 characters
    (databricks.md 1)."""
    from databricks.sdk.service import jobs, workspace
    from databricks.sdk.service.jobs import JobsAPI

    body = request.create.body
    found: list[str] = []
    known = set(inspect.signature(JobsAPI.submit).parameters) - {"self"}
    found += [f"{key}: not a runs/submit field" for key in body if key not in known]
    for index, task in enumerate(body.get("tasks") or []):
        _round_trip(found, f"tasks[{index}]", jobs.SubmitTask.from_dict, task)
    if "run_as" in body:
        _round_trip(found, "run_as", jobs.JobRunAs.from_dict, body["run_as"])
    token = body.get("idempotency_token")
    if not isinstance(token, str) or not 0 < len(token) <= 64:
        found.append(f"idempotency_token: {token!r} is not 1-64 characters")
    if not isinstance(body.get("timeout_seconds", 0), int) or body.get("timeout_seconds", 0) < 0:
        found.append(f"timeout_seconds: {body.get('timeout_seconds')!r}")
    for call in request.calls[:-1]:
        if call.url.endswith("/workspace/import"):
            try:
                workspace.ImportFormat(call.body["format"])
            except ValueError as exc:
                found.append(f"workspace/import: {exc}")
    return found


def databricks_air(request: Request) -> list[str]:
    """The Databricks checks, and what the SDK's AI Runtime classes document: one task whose `ai_runtime_task` has
    exactly one deployment, an accelerator type of `ComputeSpecAcceleratorType`, a total count that is a positive
    multiple of the per-node count, a `command_path` in the workspace that the request uploads, an
    `environment_key` naming one of `environments`, and the air CLI's rules for names (task key and MLflow run:
    `[A-Za-z0-9_-]`, at most 100); a priority class only with reserved capacity."""
    from databricks.sdk.service import jobs

    found = databricks(request)
    body = request.create.body
    tasks = body.get("tasks") or []
    if len(tasks) != 1 or "ai_runtime_task" not in tasks[0]:
        return [*found, "tasks: one task with an ai_runtime_task"]
    task, spec = tasks[0], tasks[0]["ai_runtime_task"]
    names = re.compile(r"[A-Za-z0-9_-]{1,100}")
    for where, value in (("task_key", task.get("task_key")), ("mlflow_run", spec.get("mlflow_run"))):
        if value is not None and not names.fullmatch(value):
            found.append(f"{where}: {value!r} is not 1-100 of [A-Za-z0-9_-]")
    deployments = spec.get("deployments") or []
    if len(deployments) != 1:
        return [*found, f"deployments: {len(deployments)}, not exactly one"]
    compute = deployments[0]["compute"]
    try:
        kind = jobs.ComputeSpecAcceleratorType(compute["accelerator_type"]).value
    except ValueError as exc:
        return [*found, f"compute.accelerator_type: {exc}"]
    per_node = int(re.match(r"GPU_(\d+)x", kind)[1])  # type: ignore[index]
    count = compute["accelerator_count"]
    if not isinstance(count, int) or count <= 0 or count % per_node:
        found.append(f"compute.accelerator_count: {count!r} is not a positive multiple of {per_node}")
    path = deployments[0].get("command_path") or ""
    uploaded = {c.body.get("path") for c in request.calls[:-1] if c.url.endswith("/workspace/import")}
    if not path.startswith("/Workspace/") or path not in uploaded:
        found.append(f"command_path: {path!r} is not a workspace file the request uploads")
    environments = {e["environment_key"] for e in body.get("environments") or []}
    if "environment_key" in task and task["environment_key"] not in environments:
        found.append(f"environment_key: {task['environment_key']!r} names no environment")
    if "priority_class" in spec and "provisioned_capacity_id" not in compute:
        found.append("priority_class: only with compute.provisioned_capacity_id")
    return found


def _round_trip(found: list[str], where: str, parse: Callable[[Any], Any], value: Any) -> None:
    try:
        back = parse(value).as_dict()
    except Exception as exc:  # the SDK's parser: any failure is a value it does not take
        found.append(f"{where}: {type(exc).__name__}: {exc}")
        return
    if back != value:
        found.append(f"{where}: does not round-trip through the SDK class ({_diff(value, back)})")


def _diff(sent: Any, back: Any, path: str = "") -> str:
    if isinstance(sent, dict) and isinstance(back, dict):
        for key in sorted(set(sent) | set(back)):
            if sent.get(key) != back.get(key):
                return _diff(sent.get(key), back.get(key), f"{path}.{key}")
    return f"{path or '<root>'}: sent {sent!r}, read back {back!r}"


# -- fake and local: crosstrain's own formats --------------------------------------------------------------
def fake(request: Request) -> list[str]:
    """The fake cloud's job record: what `FakeCloud` reads back (a plan, pools with a primary)."""
    body = request.create.body
    found = []
    if request.create.method != "PUT" or not request.create.url.startswith("file://"):
        found.append(f"create: {request.create.method} {request.create.url} is not a PUT of a file")
    if body.get("identity") != request.identity or body.get("fingerprint") != request.fingerprint:
        found.append("body: identity and fingerprint must be the request's")
    pools = body.get("pools") or []
    if not pools or pools[0].get("role") != "primary":
        found.append("pools[0]: the primary pool is required")
    if set(body.get("plan") or {}) != {"outcome", "queueSeconds", "runSeconds"}:
        found.append(f"plan: {body.get('plan')!r}")
    return found


def local(request: Request) -> list[str]:
    """The plan `send()` runs: every process has a command line and a string environment, and the ranks of all
    processes are 0..world_size-1, each exactly once."""
    body = request.create.body
    found = []
    ranks: list[int] = []
    for index, process in enumerate(body.get("processes") or []):
        where = f"processes[{index}]"
        argv = process.get("argv")
        if not argv or not all(isinstance(part, str) for part in argv):
            found.append(f"{where}.argv: {argv!r} is not a command line")
        env = process.get("env") or {}
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            found.append(f"{where}.env: not strings")
        ranks += process.get("ranks") or []
    if not body.get("processes"):
        found.append("processes: none")
    elif sorted(ranks) != list(range(int(body.get("world_size") or 0))):
        found.append(f"ranks {sorted(ranks)} are not 0..{body.get('world_size')} - 1, each once")
    return found


_CHECKS: dict[str, Callable[[Request], list[str]]] = {
    "vertex": vertex,
    "aiplatform": aiplatform,
    "azureml": azureml,
    "databricks": databricks,
    "databricks-air": databricks_air,
    "fake": fake,
    "local": local,
}
