"""Databricks AI Runtime (`databricks-air`): the request the `databricks air run` CLI builds from a workload.yaml,
crosstrain's request for the job expressing it, and the normalization both go through.

The air CLI's rules, translated from its Go source (github.com/databricks/cli, package `aircmd`), each file read at
the commit named (where one version of a file was readable, that one; the rules below agree across them):

- `buildSubmitPayload`, `dlRuntimeImage`, `submitRun`, `injectPoolFields`, `submitToken`:
  https://github.com/databricks/cli/blob/2e15fffce471741d689899c650320e433a3b31c5/cmd/air/runsubmit.go
- the YAML fields and their validation (`runConfig`, `validate`, `environmentConfig`, `codeSourceConfig`):
  https://github.com/databricks/cli/blob/98b038b7f6bb280937c711c135b26ff9b5ecb8b2/cmd/air/runconfig.go
- the load (unknown keys refused: `KnownFields(true)`), `validateRuntimeVersion` (`databricks_ai_v<N>`, N >= 5, or
  an integer) and the flat `code_source: {root_path}` form beside the legacy `type: snapshot` + `snapshot:` one:
  https://github.com/databricks/cli/blob/560e90914ee67b967b4a6407fbd0703349cc027d/cmd/air/runconfig_load.go
- the accelerator types and their GPUs per node (`parseGPUType`, `gpusPerNode`, `computeConfig.validate`):
  https://github.com/databricks/cli/blob/7bbe2852131bc5c4a6c7bad5f147bc7772eedf9f/experimental/air/cmd/compute.go
- `defaultMaxRetries = 3`, `timeoutSeconds`, `inlineDependencies`, `runtimeVersion`:
  https://github.com/databricks/cli/blob/2060f2b260fb966a709b4097e71aee737d19f8d3/experimental/air/cmd/runconfig_launch.go
- the launch folder's sidecars (`buildArtifacts`: command.sh is `command` verbatim, env_vars.json
  `[{name, value}]`, secret_env_vars.json `[{name, secret_scope, secret_key}]`, hyperparameters.yaml from
  `parameters`, training_config.yaml the config itself):
  https://github.com/databricks/cli/blob/18f562646931d92b0c5fe39eb796dcc60996f40b/cmd/air/runupload.go
- the launch folder (`cliLaunchDir`: `<home>/.air/cli_launch/<experiment>/<run>_<16 hex of a uuid4>`):
  https://github.com/databricks/cli/blob/ced3a80a273433424e457b7e1138905ea1ca42de/cmd/air/runlaunch.go
"""

from __future__ import annotations

import base64
import copy
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from crosstrain.records import Request
from tests.corpus.cases import Case

#: The accelerator types the CLI accepts (matched case-sensitively) and their GPUs per node.
GPUS_PER_NODE = {"GPU_1xA10": 1, "GPU_1xH100": 1, "GPU_8xH100": 8}
DEFAULT_MAX_RETRIES = 3
#: The runtime channel when the YAML names no `environment.version` (and DATABRICKS_DL_RUNTIME_IMAGE is unset).
DEFAULT_DL_RUNTIME_IMAGE = "CLIENT-GPU-6"
DATABRICKS_AI_PREFIX = "databricks_ai_v"
ENVIRONMENT_KEY = "default"
#: Where the CLI puts the run's files; `<run>_<16 hex>` is a fresh uuid4's, so it is stood for here.
HOME = "/Workspace/Users/<the submitter>"
RUN_FIELDS = {
    "experiment_name",
    "compute",
    "environment",
    "command",
    "env_variables",
    "secrets",
    "code_source",
    "max_retries",
    "timeout_minutes",
    "idempotency_token",
    "parameters",
    "mlflow_run_name",
    "mlflow_experiment_directory",
    "mlflow_artifact_location",
    "permissions",
    "usage_policy_name",
    "usage_policy_id",
}
#: The secret sidecar both stage beside command.sh.
SIDE = "secret_env_vars.json"
#: The variable AI Runtime's launcher sets to the hyperparameters.yaml the CLI stages from `parameters`.
PARAMETERS = "HYPERPARAMETERS_PATH"
CODE = "<code folder>"
TASK_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
RUNTIME_VERSION = re.compile(r"^[0-9]+$")


@dataclass(frozen=True)
class AirRun:
    """What `databricks air run -f workload.yaml` sends: the runs/submit body and the files it stages beside
    command.sh for AI Runtime's launcher."""

    body: dict[str, Any]
    command: str
    env: dict[str, str]
    secrets: dict[str, str]
    parameters: dict[str, Any] | None
    code: bool  # the code folder shipped: the CLI's snapshot of root_path, or crosstrain's bundle of `code:`


def _yaml_scalar(node: Any) -> str:
    """A YAML scalar as the CLI's `stringOrInt` keeps it (its text: `6` and `'6'` alike)."""
    if isinstance(node, bool) or not isinstance(node, (str, int)):
        raise ValueError("environment.version must be a string or integer")
    return str(node)


def runtime_version(raw: str) -> str:
    """`validateRuntimeVersion`: an integer, or `databricks_ai_v<N>` with N >= 5 (lower-cased)."""
    normalized = raw.lower()
    numeric = normalized.removeprefix(DATABRICKS_AI_PREFIX)
    if not RUNTIME_VERSION.match(numeric):
        raise ValueError(f"unsupported client image version {raw!r}")
    if normalized.startswith(DATABRICKS_AI_PREFIX):
        if int(numeric) < 5:
            raise ValueError(f"databricks_ai_v requires AI Runtime version 5 or higher, got {raw!r}")
        return DATABRICKS_AI_PREFIX + numeric
    return numeric


def load_workload(text: str) -> dict[str, Any]:
    """The workload as the CLI's load takes it (unknown keys refused), with its structural validation: the
    experiment name is a task key, the compute a known type with a multiple of its GPUs per node, the command set
    and at most 1000 lines, secrets `scope/key`, no name both a variable and a secret, retries >= 0, timeout >= 1."""
    cfg = yaml.safe_load(text)
    unknown = set(cfg) - RUN_FIELDS
    if unknown:
        raise ValueError(f"unknown fields {sorted(unknown)}")
    name = str(cfg.get("experiment_name") or "")
    if not name or len(name) > 100 or not TASK_KEY.match(name):
        raise ValueError(f"invalid experiment_name {name!r}")
    compute = cfg.get("compute") or {}
    per_node = GPUS_PER_NODE.get(str(compute.get("accelerator_type")))
    count = compute.get("num_accelerators")
    if per_node is None:
        raise ValueError(f"invalid GPU type {compute.get('accelerator_type')!r}")
    if not isinstance(count, int) or count <= 0 or count % per_node:
        raise ValueError(f"compute.num_accelerators must be a positive multiple of {per_node}, got {count!r}")
    command = cfg.get("command")
    if not isinstance(command, str) or not command.strip() or command.count("\n") + 1 > 1000:
        raise ValueError("command is required, at most 1000 lines")
    secrets = cfg.get("secrets") or {}
    for variable, ref in secrets.items():
        parts = str(ref).split("/")
        if len(parts) != 2 or not all(parts):
            raise ValueError(f"invalid secret reference {ref!r} for variable {variable!r}")
    both = set(cfg.get("env_variables") or {}) & set(secrets)
    if both:
        raise ValueError(f"{sorted(both)} set in both env_variables and secrets")
    environment = cfg.get("environment") or {}
    if "dependencies" in environment and not isinstance(environment["dependencies"], list):
        raise ValueError("environment.dependencies must be a list of packages")
    if "version" in environment:
        environment["version"] = runtime_version(_yaml_scalar(environment["version"]))
    code = cfg.get("code_source")
    if code is not None and not str((code.get("snapshot") or code).get("root_path") or "").strip():
        raise ValueError("code_source's root_path cannot be empty")
    if cfg.get("max_retries") is not None and cfg["max_retries"] < 0:
        raise ValueError("max_retries must be >= 0")
    if cfg.get("timeout_minutes") is not None and cfg["timeout_minutes"] < 1:
        raise ValueError("timeout_minutes must be >= 1")
    return dict(cfg)


def submit_body(cfg: dict[str, Any], command_path: str, code_source_path: str, token: str) -> dict[str, Any]:
    """`buildSubmitPayload` as the Go SDK marshals it (empty strings, false and zero left out, `max_retries`
    always sent), then `submitRun`'s additions: `priority_class` on the task and `provisioned_capacity_id`
    (the YAML's `compute.pool_id`) on the compute, which the SDK's type does not model."""
    compute = cfg["compute"]
    task: dict[str, Any] = {
        "experiment": cfg["experiment_name"],
        "deployments": [
            {
                "command_path": command_path,
                "compute": {
                    "accelerator_type": compute["accelerator_type"],
                    "accelerator_count": compute["num_accelerators"],
                },
            }
        ],
    }
    if code_source_path:
        task["code_source_path"] = code_source_path
    for key, field in (
        ("mlflow_run_name", "mlflow_run"),
        ("mlflow_experiment_directory", "mlflow_experiment_directory"),
        ("mlflow_artifact_location", "mlflow_artifact_location"),
    ):
        if cfg.get(key):
            value = str(cfg[key])
            if key == "mlflow_artifact_location" and value.startswith("/Volumes/"):
                value = "dbfs:" + value
            task[field] = value
    retries = DEFAULT_MAX_RETRIES if cfg.get("max_retries") is None else int(cfg["max_retries"])
    submitted: dict[str, Any] = {
        "task_key": cfg["experiment_name"],
        "run_if": "ALL_SUCCESS",
        "ai_runtime_task": task,
        "environment_key": ENVIRONMENT_KEY,
        "max_retries": retries,
    }
    if retries > 0:
        submitted["retry_on_timeout"] = True
    environment = cfg.get("environment") or {}
    image = str(environment.get("version") or DEFAULT_DL_RUNTIME_IMAGE).removeprefix("CLIENT-GPU-")
    spec: dict[str, Any] = (
        {"base_environment": "workspace-base-environments/" + image}
        if image.startswith(DATABRICKS_AI_PREFIX)
        else {"environment_version": image}
    )
    if environment.get("dependencies"):
        spec["dependencies"] = list(environment["dependencies"])
    body: dict[str, Any] = {
        "run_name": cfg["experiment_name"],
        "tasks": [submitted],
        "environments": [{"environment_key": ENVIRONMENT_KEY, "spec": spec}],
        "idempotency_token": token,
    }
    if cfg.get("timeout_minutes"):
        body["timeout_seconds"] = int(cfg["timeout_minutes"]) * 60
    if cfg.get("usage_policy_name"):
        raise ValueError("usage_policy_name is resolved to an id against the workspace at submit: not translated")
    if cfg.get("usage_policy_id"):
        body["budget_policy_id"] = str(cfg["usage_policy_id"]).strip()
    if compute.get("priority_class"):
        task["priority_class"] = compute["priority_class"]
    if compute.get("pool_id"):
        task["deployments"][0]["compute"]["provisioned_capacity_id"] = compute["pool_id"]
    return body


def sdk_round_trip(body: dict[str, Any]) -> None:
    """The body's task and environment read into databricks-sdk's classes and back, unchanged: a field the SDK
    does not carry, or a wrong type, fails here."""
    from databricks.sdk.service.jobs import JobEnvironment, SubmitTask

    task = body["tasks"][0]
    assert SubmitTask.from_dict(task).as_dict() == task, SubmitTask.from_dict(task).as_dict()
    for environment in body.get("environments") or []:
        assert JobEnvironment.from_dict(environment).as_dict() == environment


def air_original(case: Case) -> AirRun:
    """What the air CLI sends for the case's workload.yaml: the runs/submit body (with the launch folder and the
    code snapshot's archive stood for by where the CLI puts them, and the uuid4 it makes the token from), and
    the files it stages beside command.sh."""
    cfg = load_workload(case.original.read_text())
    name = cfg["experiment_name"]
    run = cfg.get("mlflow_run_name") or name
    folder = f"{HOME}/.air/cli_launch/{name}/{run}_<16 hex of a uuid4>"
    code = cfg.get("code_source")
    archive = ""
    if code is not None:
        root = (code.get("snapshot") or code)["root_path"]
        archive = f"{HOME}/.air/repo_snapshots/<the archive of {root}>"
    token = str(cfg.get("idempotency_token") or "<a uuid4>")
    body = submit_body(cfg, f"{folder}/command.sh", archive, token)
    sdk_round_trip(body)
    secrets = {str(k): str(v) for k, v in (cfg.get("secrets") or {}).items()}
    env = {str(k): str(v) for k, v in (cfg.get("env_variables") or {}).items()}
    parameters = yaml.safe_load(yaml.safe_dump(cfg["parameters"])) if cfg.get("parameters") else None
    return AirRun(body, cfg["command"], env, secrets, parameters, code is not None)


def _imported(request: Request, name: str) -> str | None:
    """The content of the file named `name` that the request imports into the workspace."""
    for call in request.calls:
        body = call.body
        if isinstance(body, dict) and "content" in body and str(body.get("path", "")).endswith("/" + name):
            return base64.b64decode(body["content"]).decode()
    return None


def air_crosstrain(request: Request) -> AirRun:
    """crosstrain's runs/submit body (read back through the SDK), its command script's variables and command,
    its secret sidecar, and the parameters file its code folder ships where the job's env names one."""
    body = copy.deepcopy(request.create.body)
    sdk_round_trip(body)
    script = _imported(request, "command.sh")
    assert script is not None, "no command script is uploaded"
    env: dict[str, str] = {}
    for line in script.splitlines():
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").partition("=")
            env[name] = shlex.split(value)[0] if value else ""
    staged = json.loads(_imported(request, SIDE) or "[]")
    secrets = {e["name"]: f"{e['secret_scope']}/{e['secret_key']}" for e in staged}
    parameters = None
    if PARAMETERS in env and request.code is not None:
        parameters = yaml.safe_load((Path(request.code.folder) / env.pop(PARAMETERS)).read_text())
    return AirRun(body, script, env, secrets, parameters, request.code is not None)


#: The variables AI Runtime sets on each node (the cookbook's torchrun flags read them).
NODE_FLAGS = {
    "nnodes": "$NUM_NODES",
    "node_rank": "$NODE_RANK",
    "master_addr": "$MASTER_ADDR",
    "master_port": "$MASTER_PORT",
}
LAUNCHERS = (["torchrun"], ["python", "-m", "torch.distributed.run"])


def original_command(command: str, gpus_per_node: int, nodes: int) -> dict[str, Any]:
    """What every node runs, from the workload's shell command, in the few shapes the cookbook uses: `cd
    $CODE_SOURCE_PATH` (the code folder), then torchrun (or `python -m torch.distributed.run`) with AI Runtime's
    node variables and `--nproc_per_node` (`${LOCAL_WORLD_SIZE:-8}`: AI Runtime sets LOCAL_WORLD_SIZE to the
    node's GPUs; without the node variables torchrun runs one node alone, which only one node may), or a plain
    `python FILE` (one process). Any other line is refused: this translation does not guess what a shell script
    does."""
    lines = [line.strip() for line in command.replace("\\\n", " ").splitlines()]
    lines = [line for line in lines if line and not line.startswith("#")]
    cwd = "<the AI Runtime launcher's>"
    if lines and shlex.split(lines[0]) == ["cd", "$CODE_SOURCE_PATH"]:
        cwd, lines = CODE, lines[1:]
    if len(lines) != 1:
        raise ValueError(f"a command of {len(lines)} lines after the cd: not a shape this translation knows")
    words = shlex.split(lines[0])
    launcher = next((prefix for prefix in LAUNCHERS if words[: len(prefix)] == prefix), None)
    if launcher is None:
        if words[0] != "python":
            raise ValueError(f"{lines[0]!r}: not a shape this translation knows")
        return {"cwd": cwd, "processes_per_node": 1, "argv": [_in_code(w) for w in words]}
    flags: dict[str, str] = {}
    rest = words[len(launcher) :]
    while rest and rest[0].startswith("--"):
        name, equals, value = rest[0][2:].partition("=")
        flags[name.replace("-", "_")], rest = (value, rest[1:]) if equals else (rest[1], rest[2:])
    per_node = flags.pop("nproc_per_node", "1")
    processes = gpus_per_node if per_node == "${LOCAL_WORLD_SIZE:-8}" else int(per_node)
    for flag, value in flags.items():
        if NODE_FLAGS.get(flag) != value:
            raise ValueError(f"torchrun --{flag}={value}: not AI Runtime's node variable")
    if nodes > 1 and set(flags) != set(NODE_FLAGS):
        raise ValueError("torchrun without AI Runtime's node variables on several nodes: each node trains alone")
    return {"cwd": cwd, "processes_per_node": processes, "argv": ["python", *(_in_code(w) for w in rest)]}


def _in_code(word: str) -> str:
    return CODE + "/" + word.removeprefix("$CODE_SOURCE_PATH/") if word.startswith("$CODE_SOURCE_PATH/") else word


def crosstrain_command(script: str) -> dict[str, Any]:
    """What every node runs under crosstrain's command script: its `exec` line runs the archive's bootstrap,
    which unpacks the bundle and runs `python -m crosstrain.launch --nproc-per-node N -- COMMAND` from the code
    folder."""
    words = shlex.split(script[script.index("\nexec ") :])
    assert words[:3] == ["exec", "python3", "-c"], words[:3]
    rest = words[words.index("--", 5) + 1 :]
    assert rest[:4] == ["python", "-m", "crosstrain.launch", "--nproc-per-node"], rest[:4]
    argv = rest[rest.index("--") + 1 :]
    return {"cwd": CODE, "processes_per_node": int(rest[4]), "argv": argv}


def normalize(run: AirRun, crosstrain: bool, identity: str = "") -> dict[str, Any]:
    """One record per side, each field rewritten for a reason:
    - `idempotency_token` is left out: the CLI makes a uuid4 for each submit (unless the YAML gives one),
      crosstrain sends its identity (a re-submit of the same job is the same run); neither changes the run;
    - `mlflow_run`: crosstrain names the MLflow run by its identity; the CLI sends none unless the YAML names one
      (AI Runtime then names it): a display name, left out where it is crosstrain's identity;
    - `task_key` (the CLI: the experiment name; crosstrain: `train`) and the deployment's `name` (crosstrain:
      `worker`) name the run's one task and one deployment: nothing refers to them;
    - `run_if` unset is ALL_SUCCESS (the Jobs default); `retry_on_timeout` is left out where neither the run nor
      its task has a timeout (nothing times out);
    - `command_path` becomes `command`: what every node runs, from which folder and how many processes per node.
      The CLI's command.sh is the YAML's `command` (original_command reads its shape); crosstrain's script unpacks
      the code and runs its launcher (one process per GPU) with the job's command (crosstrain_command). A
      script named as `$CODE_SOURCE_PATH/FILE`, or FILE run from the code folder, is `<code folder>/FILE`;
    - `code_source_path` (the CLI's snapshot archive of `root_path`, unpacked on each node) and crosstrain's
      bundle of its `code:` folder (the archive its script unpacks) become `code`: code shipped either way, the
      same folder;
    - `env`: the CLI stages `env_variables` in env_vars.json, which AI Runtime's launcher sets on every node;
      crosstrain exports them in its script: compared as one set of variables. `secrets`: both stage
      secret_env_vars.json (`NAME: scope/key`);
    - `parameters`: the CLI stages `parameters` as hyperparameters.yaml and AI Runtime's launcher names it in
      HYPERPARAMETERS_PATH; a crosstrain job ships the file in its code folder and names it in its env: compared
      as the values the file holds (HYPERPARAMETERS_PATH itself then leaves crosstrain's `env`);
    - empty maps are not sent."""
    from tests.corpus.platforms import prune

    body = copy.deepcopy(run.body)
    task = body.pop("tasks")[0]
    air = task.pop("ai_runtime_task")
    deployment = air.pop("deployments")[0]
    body.pop("idempotency_token", None)
    if crosstrain and air.get("mlflow_run") == identity:
        air.pop("mlflow_run")
    task.pop("task_key", None)
    task.setdefault("run_if", "ALL_SUCCESS")
    if not body.get("timeout_seconds") and not task.get("timeout_seconds"):
        task.pop("retry_on_timeout", None)
    gpus = GPUS_PER_NODE.get(deployment["compute"]["accelerator_type"], 8)
    air.pop("code_source_path", None)  # where the CLI's snapshot lies: `code` says it is shipped
    if crosstrain:
        command = crosstrain_command(run.command)
    else:
        command = original_command(run.command, gpus, deployment["compute"]["accelerator_count"] // gpus)
    script = command["argv"][1] if command["argv"][:1] == ["python"] and len(command["argv"]) > 1 else "-"
    if command["cwd"] == CODE and not script.startswith(("-", "/", CODE)):
        command["argv"][1] = f"{CODE}/{script}"
    record = {
        **body,
        "task": task,
        "ai_runtime_task": {**air, "compute": deployment["compute"], "command": command, "code": run.code},
        "env": run.env,
        "secrets": run.secrets,
        "parameters": run.parameters,
    }
    return dict(prune(record))
