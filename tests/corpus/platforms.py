"""For each platform: the request the platform's OWN tool builds from a case's original, the request crosstrain
renders for the case's job.yaml, and one normalization that both go through before they are compared.

Every field a normalization leaves out or rewrites is listed in its docstring with why it does not change the
job; everything else must match or be listed as a difference in the case's expected.yaml.
"""

from __future__ import annotations

import copy
import importlib
import json
import logging
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from crosstrain.api import render, with_function
from crosstrain.databricks_task import DistributorCall
from crosstrain.records import Request
from crosstrain.registry import create_backend
from tests.backends.discovery import violations as discovery_violations
from tests.corpus import air
from tests.corpus.cases import Case, Difference

#: crosstrain's own identity on every request: labels, properties and tags that name the run and its fingerprint.
IDENTITY_KEYS = {"crosstrain-fp", "crosstrain-id", "crosstrain.fingerprint", "crosstrain_fingerprint", "crosstrain_job"}
#: How crosstrain's code bundle starts a command on the node: `python -m crosstrain_code [--install] -- COMMAND`
#: puts the shipped folder on PYTHONPATH and runs COMMAND from it, as the platform's own code upload would.
BUNDLE_PREFIXES = (["python", "-m", "crosstrain_code", "--"], ["python", "-m", "crosstrain_code", "--install", "--"])
#: A container whose command is not set runs its image's ENTRYPOINT: named so that "no command" is compared too.
IMAGE_ENTRYPOINT = "<the image's entrypoint>"
#: The folder aiplatform.CustomJob makes up under the staging bucket when given no base_output_dir
#: (`aiplatform-custom-job-<date>-<time>`), with the time left out so that the test is repeatable; a
#: CustomContainerTrainingJob's is `aiplatform-custom-training-<date>-<time>`, rewritten the same way.
SDK_OUTPUT = "aiplatform-custom-job-<time of the call>"
SDK_TRAINING_OUTPUT = "aiplatform-custom-training-<time of the call>"
#: An SDK call's keyword arguments, transcribed from a notebook cell or script (Vertex AI's CustomJob or
#: CustomContainerTrainingJob, Azure's command).
SDK_CALL = "sdk-call.yaml"


def prune(value: Any) -> Any:
    """Empty maps, lists and nulls left out: the services read an empty `{}` as the field not being sent."""
    if isinstance(value, dict):
        pruned = {k: prune(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if v not in ({}, [], None)}
    if isinstance(value, list):
        return [prune(v) for v in value]
    return value


def unbundle(argv: list[str]) -> tuple[list[str], bool]:
    """The command crosstrain's code bundle runs, and whether it was wrapped."""
    for prefix in BUNDLE_PREFIXES:
        if argv[: len(prefix)] == prefix:
            return argv[len(prefix) :], True
    return argv, False


def diff(original: Any, crosstrain: Any, path: str = "") -> list[Difference]:
    """Every leaf where the two normalized requests differ, by dotted path (`[i]` for list items)."""
    if isinstance(original, dict) and crosstrain is None:
        crosstrain = {}
    if isinstance(crosstrain, dict) and original is None:
        original = {}
    if isinstance(original, dict) and isinstance(crosstrain, dict):
        found: list[Difference] = []
        for key in sorted(set(original) | set(crosstrain), key=str):
            found += diff(original.get(key), crosstrain.get(key), f"{path}.{key}" if path else str(key))
        return found
    if (
        isinstance(original, list)
        and isinstance(crosstrain, list)
        and len(original) == len(crosstrain)
        and any(isinstance(v, dict) for v in original + crosstrain)
    ):
        found = []
        for index, (a, b) in enumerate(zip(original, crosstrain, strict=True)):
            found += diff(a, b, f"{path}[{index}]")
        return found
    return [] if original == crosstrain else [Difference(path, original, crosstrain)]


def substitute(text: str, variables: dict[str, str]) -> str:
    """`$NAME` and `${NAME}` replaced from `variables`, as the shell would before gcloud sees the line (and
    `{NAME}`, as IPython does in a notebook's `!gcloud ...` line)."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(3)
        if name not in variables:
            raise KeyError(f"the command line uses ${name}: give it a value in source.yaml's variables")
        return variables[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)|(?<![$\w])\{(\w+)\}", value, text)


def command_line(path: Path, variables: dict[str, str]) -> list[str]:
    """The words of the gcloud command in a shell file or README (continuation lines joined, the shell's
    variables replaced from `variables`), as gcloud receives them."""
    text = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))
    logical = text.replace("\\\n", " ").splitlines()
    commands = [line.lstrip().lstrip("!").lstrip() for line in logical]  # `!gcloud` is a notebook's shell line
    line = next(line for line in commands if line.startswith("gcloud "))
    return shlex.split(substitute(line, variables))


def flags(words: list[str], start: int) -> tuple[dict[str, list[str]], list[str]]:
    """gcloud's `--flag=value` / `--flag value` pairs after the verb, and the user args after a lone `--`."""
    found: dict[str, list[str]] = {}
    rest: list[str] = []
    index = start
    while index < len(words):
        word = words[index]
        if word == "--":
            rest = words[index + 1 :]
            break
        if not word.startswith("--"):
            raise ValueError(f"unexpected word {word!r} in the gcloud line")
        name, equals, value = word[2:].partition("=")
        if not equals:
            nxt = words[index + 1] if index + 1 < len(words) else "--"
            if nxt.startswith("--"):
                value = "true"  # a boolean flag such as --async
            else:
                value, index = nxt, index + 1
        found.setdefault(name, []).append(value)
        index += 1
    return found, rest


def shell_line(command: str) -> bool:
    """Whether the shell that runs an Azure command would do more than split it into words: an operator
    (`&&`, `|`, `;`, `>`...) outside quotes, a `$` or backquote outside single quotes, or several lines."""
    quote, escaped = "", False
    for char in command.strip():
        if escaped:
            escaped = False
        elif quote == "'":
            quote = "" if char == "'" else quote
        elif char == "\\":
            escaped = True
        elif char in "$`\n":
            return True
        elif quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "();<>|&":
            return True
    return False


# -- Azure ML ----------------------------------------------------------------------------------------------------
def azureml_original(case: Case) -> dict[str, Any]:
    """What azure-ai-ml sends for the YAML: `load_job(path)` (the CLI's `az ml job create -f` reads it the same
    way), or for an SDK call (sdk-call.yaml) `azure.ai.ml.command(**arguments)`; its local inputs uploaded as
    `create_or_update` uploads them (`_azureml_uploaded`); then the command job's REST object,
    `JobBase.properties`; an inline environment (an image, or a build context), which the SDK registers as an
    anonymous environment first, is named by that version and its body added as `environment`."""
    from azure.ai.ml import load_job
    from azure.ai.ml.entities import Environment

    logging.disable(logging.WARNING)  # "experimental class" notices
    try:
        node: Any = _azureml_command(case.original) if case.original.name == SDK_CALL else load_job(case.original)
        _azureml_uploaded(node)
        job = node._to_job() if hasattr(node, "_to_job") else node
        environment = job.trial.environment if hasattr(job, "trial") else job.environment  # a sweep's: its trial's
        props: dict[str, Any] = job._to_rest_object().as_dict()["properties"]
        registered = environment._to_rest_object().as_dict() if isinstance(environment, Environment) else None
    finally:
        logging.disable(logging.NOTSET)
    if isinstance(environment, Environment):  # inline: registered as an anonymous environment first
        props["environmentId"] = f"CliV2AnonymousEnvironment:{environment.version}"
        assert registered is not None
        props["environment"] = registered["properties"]
        if environment.path is not None and environment.build is not None:  # a local build context
            # where the SDK's upload puts it, and what `build.contextUri` then names (the container URL aside)
            uploaded = f"{AZURE_LOCAL_UPLOAD}/{environment._upload_hash}/{Path(environment.path).name}/"
            props["environment"]["build"]["contextUri"] = uploaded
    return props


def _azureml_uploaded(node: Any) -> None:
    """The node's inputs as `MLClient.jobs.create_or_update` sends them: the SDK's own `_resolve_job_input` on each
    (a local path resolved against the job file's folder, uploaded, and its URI given a `/` where the input is a
    uri_folder; anything else left as it is), with only the upload itself stood for by where it puts the file or
    folder: `LocalUpload/<get_object_hash of it, with the ignore file get_ignore_file finds>/<its name>` on the
    workspace's default blob store (`_upload_to_datastore`, `BlobStorageClient.upload`, `SHORT_URI_FORMAT`).
    Registered assets are left unresolved, as before (normalize compares them by name)."""
    from types import SimpleNamespace
    from unittest import mock

    from azure.ai.ml._utils._asset_utils import generate_asset_id, get_ignore_file, get_object_hash
    from azure.ai.ml.constants._common import SHORT_URI_FORMAT
    from azure.ai.ml.operations import _job_operations

    def uploaded(scope: Any, datastores: Any, path: Any, datastore_name: str = "workspaceblobstore", **_: Any) -> str:
        asset_id = generate_asset_id(get_object_hash(path, get_ignore_file(path)), include_directory=True)
        return str(SHORT_URI_FORMAT.format(datastore_name, f"{asset_id}/{Path(path).name}"))

    unresolved = SimpleNamespace(get_asset_arm_id=lambda path, asset_type: path)
    operations: Any = SimpleNamespace(
        _operation_scope=None, _datastore_operations=None, _show_progress=False, _orchestrators=unresolved
    )
    inputs = getattr(node, "_job_inputs", None) or getattr(node, "inputs", None) or {}
    with mock.patch.object(_job_operations, "_upload_and_generate_remote_uri", uploaded):
        for entry in inputs.values():
            _job_operations.JobOperations._resolve_job_input(operations, entry, node._base_path)


def _azureml_command(path: Path) -> Any:
    from azure.ai.ml import command

    return command(**yaml.safe_load(path.read_text()))


#: Azure replaces `${{inputs.NAME}}` / `${{outputs.NAME}}` in the command's text before the node's shell reads it.
AZURE_REFERENCE = re.compile(r"\$\{\{\s*(inputs|outputs)\.(\w+)\s*\}\}")


def azureml_command(command: str, *, unwrap: bool) -> str | list[str]:
    """An Azure command as the node runs it: its words, or, where the shell would do more than split it
    (`shell_line`), its shell tokens with quotes kept (so spacing does not count, and a quoted `'$RANK'` stays
    unlike an expanded `$RANK`). `${{inputs.X}}` counts as a word: Azure puts the path there before the shell runs.
    `unwrap`: crosstrain's code bundle runs the command (`python -m crosstrain_code -- ...`), and a shell line
    there as `bash -c LINE`: the line is what the node's shell runs."""
    command = AZURE_REFERENCE.sub(lambda m: f"@{m[1]}.{m[2]}@", command)
    if unwrap:
        argv = unbundle(shlex.split(command))[0]
        if len(argv) == 3 and argv[:2] == ["bash", "-c"]:
            command = argv[2]
        else:
            return argv
    if shell_line(command):
        lexer = shlex.shlex(command.strip(), posix=False, punctuation_chars=True)
        lexer.whitespace_split = True
        return list(lexer)
    return shlex.split(command)


#: Where azure-ai-ml uploads a local artifact in the blob store: `LocalUpload/<object hash>/<folder name>`.
AZURE_LOCAL_UPLOAD = "LocalUpload"


def azureml_crosstrain(request: Request) -> dict[str, Any]:
    """The job PUT's properties, and the body of the anonymous environment the request registers for it (as
    `environment`), a build context's `contextUri` without the container URL that submit fills in."""
    from crosstrain.backends.azureml.settings import ARM, STORE_CONTAINER

    props: dict[str, Any] = copy.deepcopy(request.create.body["properties"])
    registers = {c.url.split("?")[0].removeprefix(ARM): c.body for c in request.calls[:-1] if c.method == "PUT"}
    environment = registers.get(str(props.get("environmentId")))
    if environment is not None:
        props["environment"] = copy.deepcopy(environment["properties"])
        build = props["environment"].get("build") or {}
        if "contextUri" in build:
            build["contextUri"] = build["contextUri"].removeprefix(f"{STORE_CONTAINER}/")
    return props


def azureml_normalize(props: dict[str, Any], crosstrain: bool) -> dict[str, Any]:
    """Rewritten, each for a reason:
    - literal `inputs` (numbers, strings) are put into the command where `${{inputs.NAME}}` names them: Azure does
      exactly that before the node starts, so the node runs the same words; data inputs stay and are compared;
    - `command` is compared as its words (shlex), so folded YAML's line breaks and quoting style do not count;
      a crosstrain command that runs through its code bundle is unwrapped (BUNDLE_PREFIXES); but a command
      the node's shell would treat differently from its words (shell_line) is compared as the line itself;
    - `codeId` becomes whether code is shipped: the asset's name is the content hash on one side and the SDK's
      local folder on the other, and the bundle's content is the same folder;
    - `computeId` and `environmentId` are compared by name: the SDK resolves `azureml:NAME` to the workspace's
      ARM id at submit, crosstrain writes that id at render; an anonymous environment's body (`environment`) is
      compared too, a build context's `contextUri` as the folder the upload makes in the blob store
      (`LocalUpload/<object hash>/<folder name>/`): the SDK's names the local folder until it uploads it there,
      and the container's URL before it is what submit learns from the blob store;
    - crosstrain's fingerprint property is its identity; `resources.instanceCount: 1` is Azure's default;
      a PyTorch distribution of one process on one instance is no distribution (the command runs once; Azure
      only adds RANK=0, WORLD_SIZE=1 and MASTER_ADDR for a world of one); empty maps are not sent (prune);
    - a sweep job's trial (its command, code, environment, distribution and resources) is compared as the command
      job's fields are, beside the sweep's own (search space, sampling, objective, limits, early termination)."""
    p = copy.deepcopy(props)
    if p.get("jobType") == "Sweep":  # its trial is the command job: compared as one, beside the sweep's own fields
        p.update(p.pop("trial", {}))
    inputs = p.get("inputs") or {}
    literals = {k: str(v["value"]) for k, v in inputs.items() if v.get("jobInputType") == "literal"}
    command = str(p.get("command") or "")
    for name, value in literals.items():
        command = re.sub(r"\$\{\{\s*inputs\." + re.escape(name) + r"\s*\}\}", value, command)
    p["inputs"] = {k: v for k, v in inputs.items() if k not in literals}
    p["command"] = azureml_command(command, unwrap=crosstrain and bool(p.get("codeId")))
    p["code"] = bool(p.pop("codeId", None))
    for key in ("computeId", "environmentId"):
        value = str(p.get(key) or "")
        if "/environments/CliV2AnonymousEnvironment/versions/" in value:
            value = "CliV2AnonymousEnvironment:" + value.rsplit("/", 1)[1]
        elif value.startswith("/subscriptions/"):
            value = value.rsplit("/", 1)[1]
        p[key] = value.removeprefix("azureml:") or None
    p["properties"] = {k: v for k, v in (p.get("properties") or {}).items() if k not in IDENTITY_KEYS}
    resources = p.get("resources") or {}
    if resources.get("instanceCount", 1) == 1:
        resources.pop("instanceCount", None)
        if p.get("distribution") == {"distributionType": "PyTorch", "processCountPerInstance": 1}:
            p.pop("distribution")
    return dict(prune(p))


# -- Vertex AI ---------------------------------------------------------------------------------------------------
#: `gcloud ai custom-jobs create` flags -> CustomJob fields, from gcloud's reference for the command
#: (cloud.google.com/sdk/gcloud/reference/ai/custom-jobs/create): `--args` and `--command` are comma-separated and
#: apply to every pool's container (or python module); `--config` is a CustomJobSpec YAML the flags add to.
GCLOUD_POOL_KEYS = {
    "replica-count": ("replicaCount",),
    "machine-type": ("machineSpec", "machineType"),
    "accelerator-type": ("machineSpec", "acceleratorType"),
    "accelerator-count": ("machineSpec", "acceleratorCount"),
    "container-image-uri": ("containerSpec", "imageUri"),
    "disk-type": ("diskSpec", "bootDiskType"),
    "disk-size": ("diskSpec", "bootDiskSizeGb"),
}
#: Keys of an autopackaged pool: gcloud builds an image FROM executor-image-uri holding the local package, whose
#: entrypoint runs `python -m python-module` (the same thing the pythonPackageSpec crosstrain sends does).
GCLOUD_AUTOPACKAGE_KEYS = {"executor-image-uri", "python-module", "local-package-path", "requirements", "script"}


def _set(target: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value


def vertex_gcloud(case: Case) -> tuple[dict[str, Any], str]:
    """The CustomJob body `gcloud ai custom-jobs create` sends for the line, and its region."""
    words = command_line(case.original, case.variables)
    verb = next(i for i in range(len(words)) if words[i : i + 2] == ["custom-jobs", "create"])
    found, _ = flags(words, verb + 2)
    spec: dict[str, Any] = {}
    if "config" in found:
        spec = yaml.safe_load((case.folder / found["config"][0]).read_text())
    pools: list[dict[str, Any]] = spec.setdefault("workerPoolSpecs", [])
    for text in found.get("worker-pool-spec", []):
        pairs = dict(item.split("=", 1) for item in text.split(",") if item)
        pool: dict[str, Any] = {"replicaCount": "1"}
        for key, value in pairs.items():
            if key in GCLOUD_POOL_KEYS:
                _set(pool, GCLOUD_POOL_KEYS[key], value)
            elif key not in GCLOUD_AUTOPACKAGE_KEYS:
                raise ValueError(f"--worker-pool-spec key {key!r} is not mapped")
        if "python-module" in pairs:  # autopackaging; see GCLOUD_AUTOPACKAGE_KEYS
            pool["pythonPackageSpec"] = {
                "executorImageUri": pairs["executor-image-uri"],
                "pythonModule": pairs["python-module"],
                "packageUris": [f"<built from {pairs['local-package-path']}>"],
            }
        pools.append(pool)
    for flag, field in (("args", "args"), ("command", "command")):
        if flag in found:
            for pool in pools:
                target = pool.get("containerSpec") or pool.get("pythonPackageSpec") or {}
                target[field] = found[flag][0].split(",")
    for flag, field in (("service-account", "serviceAccount"), ("network", "network")):
        if flag in found:
            spec[field] = found[flag][0]
    if "enable-web-access" in found:
        spec["enableWebAccess"] = True
    body: dict[str, Any] = {"displayName": found["display-name"][0], "jobSpec": spec}
    if "labels" in found:
        body["labels"] = dict(item.split("=", 1) for item in found["labels"][0].split(","))
    return _vertex_proto(body), found["region"][0]


#: `gcloud ai hp-tuning-jobs create --algorithm` values -> StudySpec.Algorithm, from gcloud's reference
#: (cloud.google.com/sdk/gcloud/reference/ai/hp-tuning-jobs/create).
GCLOUD_ALGORITHMS = {
    "algorithm-unspecified": "ALGORITHM_UNSPECIFIED",
    "grid-search": "GRID_SEARCH",
    "random-search": "RANDOM_SEARCH",
}


def vertex_tuning_gcloud(case: Case) -> tuple[dict[str, Any], str]:
    """The HyperparameterTuningJob body `gcloud ai hp-tuning-jobs create` sends: its `--config` (a
    HyperparameterTuningJobSpec: studySpec, trialJobSpec...) with the flags over it, read into Vertex AI's own
    message and back."""
    from google.cloud.aiplatform_v1.types import HyperparameterTuningJob

    words = command_line(case.original, case.variables)
    verb = next(i for i in range(len(words)) if words[i : i + 2] == ["hp-tuning-jobs", "create"])
    found, _ = flags(words, verb + 2)
    body: dict[str, Any] = yaml.safe_load((case.folder / found["config"][0]).read_text())
    body["displayName"] = found["display-name"][0]
    if "algorithm" in found:
        body["studySpec"]["algorithm"] = GCLOUD_ALGORITHMS[found["algorithm"][0]]
    for flag, field in (
        ("max-trial-count", "maxTrialCount"),
        ("parallel-trial-count", "parallelTrialCount"),
        ("max-failed-trial-count", "maxFailedTrialCount"),
    ):
        if flag in found:
            body[field] = int(found[flag][0])
    if "labels" in found:
        body["labels"] = dict(item.split("=", 1) for item in found["labels"][0].split(","))
    unmapped = (
        set(found)
        - {"config", "display-name", "algorithm", "region", "labels"}
        - {
            "max-trial-count",
            "parallel-trial-count",
            "max-failed-trial-count",
        }
    )
    if unmapped:
        raise ValueError(f"gcloud flags {sorted(unmapped)} are not mapped")
    return _vertex_proto(body, HyperparameterTuningJob), found["region"][0]


def vertex_sdk(case: Case) -> tuple[dict[str, Any], str]:
    """`aiplatform.CustomJob(display_name=..., worker_pool_specs=..., ...)`'s own proto (the body its `run()`
    sends), from the keyword arguments transcribed in the case's sdk-call.yaml; a `custom_job` key is instead the
    dict a GAPIC notebook hands `JobServiceClient.create_custom_job`, read into the same proto, and a
    `training_job` key a CustomContainerTrainingJob (vertex_training_job)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform

    json_format = _json_format()

    values = dict(yaml.safe_load(case.original.read_text()))
    if "training_job" in values:
        return vertex_training_job(values)
    location = values.pop("location", "us-central1")
    if "custom_job" in values:  # the GAPIC client: JobServiceClient.create_custom_job(custom_job={...})
        from google.cloud.aiplatform_v1.types import CustomJob

        return json_format.MessageToDict(CustomJob.pb(CustomJob(**values["custom_job"]))), location
    anonymous = AnonymousCredentials()  # type: ignore[no-untyped-call]
    job = aiplatform.CustomJob(project="my-project", location=location, credentials=anonymous, **values)
    body: dict[str, Any] = json_format.MessageToDict(job._gca_resource._pb)
    _timeless_output(body["jobSpec"])
    return body, location


def _timeless_output(spec: dict[str, Any]) -> None:
    """The SDK's timestamped output folder (SDK_OUTPUT, SDK_TRAINING_OUTPUT) without its time."""
    output = spec.get("baseOutputDirectory", {})
    if "outputUriPrefix" in output:  # with no base_output_dir the SDK names a folder by the clock
        uri = re.sub(r"aiplatform-custom-job-[\d:.-]+$", SDK_OUTPUT, output["outputUriPrefix"])
        output["outputUriPrefix"] = re.sub(r"aiplatform-custom-training-[\d:.-]+$", SDK_TRAINING_OUTPUT, uri)


class _Sent(Exception):
    """Raised where the SDK would send its request: nothing goes on the wire."""


def vertex_training_job(values: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """What `aiplatform.CustomContainerTrainingJob(**training_job).submit(**submit)` (or `.run(**run)`) asks
    Vertex AI to run, built by the SDK's own code: the chief and worker pools (`_DistributedTrainingSpec.
    chief_worker_pool`), the container it puts on each, the scheduling and output folder
    (`_prepare_training_task_inputs_and_output_dir`) and the TrainingPipeline around them, up to the create
    call. The instance is made with AnonymousCredentials, and its client's `create_training_pipeline` is
    replaced by one that keeps the request and stops, so nothing touches the network. `init` holds
    `aiplatform.init`'s project, location and staging bucket, given to the constructor (which takes the same
    and overrides init's) so that no global configuration changes; `sync` is the client's, not the job's.

    A TrainingPipeline with the custom task definition (custom_task_1.0.0.yaml) runs a CustomJob whose spec is
    the pipeline's `trainingTaskInputs`: they are read into `aiplatform_v1.CustomJobSpec` (an unknown field or a
    bad value fails, as it would on the service) and compared as a CustomJob's `jobSpec`, with the pipeline's
    display name and labels as the job's."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform
    from google.cloud.aiplatform import schema
    from google.cloud.aiplatform_v1.types import CustomJobSpec, TrainingPipeline

    json_format = _json_format()
    init = dict(values.get("init") or {})
    location = str(init.pop("location", "us-central1"))
    project = str(init.pop("project", "my-project"))
    methods = [name for name in ("submit", "run") if name in values]
    assert len(methods) == 1, "sdk-call.yaml gives the keywords of one of submit: or run:"
    anonymous = AnonymousCredentials()  # type: ignore[no-untyped-call]
    job = aiplatform.CustomContainerTrainingJob(
        project=project, location=location, credentials=anonymous, **init, **values["training_job"]
    )
    sent: dict[str, Any] = {}

    def create_training_pipeline(**request: Any) -> None:
        sent.update(request)
        raise _Sent

    job.api_client.create_training_pipeline = create_training_pipeline  # type: ignore[attr-defined]
    logging.disable(logging.INFO)  # "Training Output directory: ..."
    try:
        getattr(job, methods[0])(**{**values[methods[0]], "sync": True})
    except _Sent:
        pass
    finally:
        logging.disable(logging.NOTSET)
    pipeline = sent["training_pipeline"]
    assert pipeline.training_task_definition == schema.training_job.definition.custom_task
    wire = json_format.MessageToDict(TrainingPipeline.pb(pipeline))
    spec = CustomJobSpec.pb(CustomJobSpec())
    json_format.ParseDict(wire["trainingTaskInputs"], spec)
    body = {"displayName": wire["displayName"], "labels": wire.get("labels", {})}
    body["jobSpec"] = json_format.MessageToDict(spec)
    _timeless_output(body["jobSpec"])
    return _vertex_proto(body), location


def _json_format() -> Any:
    return importlib.import_module("google.protobuf.json_format")  # protobuf ships no types


def _vertex_proto(body: dict[str, Any], kind: Any = None) -> dict[str, Any]:
    """The body read into Vertex AI's own CustomJob message (or `kind`) and back (an unknown field or a bad value
    fails)."""
    from google.cloud.aiplatform_v1.types import CustomJob

    json_format = _json_format()
    kind = kind or CustomJob
    message = kind.pb(kind())
    json_format.ParseDict(body, message)
    return dict(json_format.MessageToDict(message))


def vertex_original(case: Case) -> dict[str, Any]:
    if case.original.name == SDK_CALL:
        body, region = vertex_sdk(case)
    elif "hp-tuning-jobs" in case.original.read_text():
        body, region = vertex_tuning_gcloud(case)
    else:
        body, region = vertex_gcloud(case)
    return {"region": region, **body}


def vertex_crosstrain(request: Request) -> dict[str, Any]:
    from google.cloud.aiplatform_v1.types import CustomJob, HyperparameterTuningJob

    region = re.search(r"//([a-z0-9-]+)-aiplatform\.googleapis\.com", request.create.url)
    assert region is not None
    kind = HyperparameterTuningJob if "studySpec" in request.create.body else CustomJob
    return {"region": region.group(1), **_vertex_proto(request.create.body, kind)}


def _vertex_pool(pool: dict[str, Any], crosstrain: bool) -> dict[str, Any]:
    container = pool.get("containerSpec")
    package = pool.get("pythonPackageSpec")
    if package is not None:
        image = package.get("executorImageUri")
        argv = ["python", "-m", package["pythonModule"], *package.get("args", [])]
        env = package.get("env")
    else:
        image = (container or {}).get("imageUri")
        argv = [*(container or {}).get("command", [IMAGE_ENTRYPOINT]), *(container or {}).get("args", [])]
        env = (container or {}).get("env")
    argv, bundled = unbundle(argv) if crosstrain else (argv, False)
    machine = dict(pool.get("machineSpec") or {})
    if not machine.get("acceleratorCount"):
        machine.pop("acceleratorCount", None)
        machine.pop("acceleratorType", None)
    disk = dict(pool.get("diskSpec") or {})
    if disk in ({"bootDiskType": "pd-ssd", "bootDiskSizeGb": 100}, {}):
        disk = {}
    return {
        "replicaCount": int(pool.get("replicaCount") or 0),
        "machineSpec": machine,
        "diskSpec": disk,
        "image": image,
        "argv": argv,
        "env": env,
        "code": bool(package and package.get("packageUris")) or bundled,
    }


def vertex_normalize(body: dict[str, Any], crosstrain: bool) -> dict[str, Any]:
    """Rewritten, each for a reason:
    - each pool becomes its image, its argv (command + args: a container runs them as one list; a python
      package runs `python -m MODULE ARGS`), its machine, disk and env, and whether code is shipped: a package,
      gcloud's autopackaged image or crosstrain's bundle all put the same folder on the node; a crosstrain
      argv that starts with the bundle's runner is unwrapped (BUNDLE_PREFIXES);
    - a disk of pd-ssd 100 GB is Vertex's default, and `acceleratorCount: 0` is no accelerator;
    - a FLEX_START job without `maxWaitDuration` waits 24 hours for its machines, the API's default
      (aiplatform_v1's Scheduling.max_wait_duration: "The default is 24 hours"; one day on
      cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws), so it is compared as `86400s`;
    - crosstrain's identity labels (crosstrain-id, crosstrain-fp) are left out;
    - a tuning job's trial spec is compared as a CustomJob's spec is, beside its study and trial counts;
    - empty maps are not sent (prune)."""
    b = copy.deepcopy(body)
    spec = b.get("trialJobSpec") or b.get("jobSpec") or {}  # a tuning job's trials run its trialJobSpec
    spec["workerPoolSpecs"] = [_vertex_pool(p, crosstrain) for p in spec.get("workerPoolSpecs", [])]
    scheduling = spec.get("scheduling") or {}
    if scheduling.get("strategy") == "FLEX_START":
        scheduling.setdefault("maxWaitDuration", "86400s")
    b["labels"] = {k: v for k, v in (b.get("labels") or {}).items() if k not in IDENTITY_KEYS}
    return dict(prune(b))


# -- AI Platform Training ----------------------------------------------------------------------------------------
#: `gcloud ai-platform jobs submit training` flags -> trainingInput fields, from gcloud's reference for the command
#: (cloud.google.com/sdk/gcloud/reference/ai-platform/jobs/submit/training); `--config` is a YAML holding a
#: `trainingInput` the flags override; `--package-path`/`--packages` are built and uploaded to the staging bucket
#: and named in `packageUris`; the words after a lone `--` are `args`.
GCLOUD_TRAINING_FLAGS = {
    "region": "region",
    "scale-tier": "scaleTier",
    "runtime-version": "runtimeVersion",
    "python-version": "pythonVersion",
    "job-dir": "jobDir",
    "module-name": "pythonModule",
    "master-machine-type": "masterType",
    "worker-machine-type": "workerType",
    "parameter-server-machine-type": "parameterServerType",
    "worker-count": "workerCount",
    "parameter-server-count": "parameterServerCount",
    "service-account": "serviceAccount",
}
GCLOUD_IMAGE_FLAGS = {
    "master-image-uri": "masterConfig",
    "worker-image-uri": "workerConfig",
    "parameter-server-image-uri": "parameterServerConfig",
}
#: Flags about the client, not the job: where gcloud stages the package, and whether it waits or streams logs.
GCLOUD_CLIENT_FLAGS = {"staging-bucket", "async", "stream-logs", "config", "package-path", "packages"}


def aiplatform_original(case: Case) -> dict[str, Any]:
    """The trainingInput gcloud sends: config.yaml's, with the flags over it; checked against ml.v1's schema."""
    words = command_line(case.original, case.variables)
    verb = next(i for i in range(len(words)) if words[i : i + 2] == ["submit", "training"])
    found, rest = flags(words, verb + 3)  # after the job id
    training: dict[str, Any] = {}
    if "config" in found:
        training = yaml.safe_load((case.folder / found["config"][0]).read_text())["trainingInput"]
    for flag, values in found.items():
        if flag in GCLOUD_TRAINING_FLAGS:
            training[GCLOUD_TRAINING_FLAGS[flag]] = values[0]
        elif flag in GCLOUD_IMAGE_FLAGS:
            training.setdefault(GCLOUD_IMAGE_FLAGS[flag], {})["imageUri"] = values[0]
        elif flag not in GCLOUD_CLIENT_FLAGS:
            raise ValueError(f"gcloud flag --{flag} is not mapped")
    if "scaleTier" in training:
        training["scaleTier"] = str(training["scaleTier"]).upper().replace("-", "_")
    if "package-path" in found or "packages" in found:
        training["packageUris"] = [f"<built from {(found.get('package-path') or found['packages'])[0]}>"]
    if rest:
        training["args"] = rest
    for key in ("workerCount", "parameterServerCount", "evaluatorCount"):
        if key in training:
            training[key] = str(training[key])  # int64 travels as a string
    for key in ("runtimeVersion", "pythonVersion"):
        if key in training:
            training[key] = str(training[key])
    problems = discovery_violations("ml.v1", "GoogleCloudMlV1__TrainingInput", training)
    assert not problems, problems
    return training


def aiplatform_crosstrain(request: Request) -> dict[str, Any]:
    training: dict[str, Any] = request.create.body["trainingInput"]
    return {**training, "labels": request.create.body.get("labels") or {}}


def aiplatform_normalize(training: dict[str, Any], crosstrain: bool) -> dict[str, Any]:
    """Rewritten, each for a reason:
    - no `scaleTier` is BASIC (the API's default);
    - `packageUris` becomes whether code is shipped (a package gcloud built from the folder, or crosstrain's
      bundle of the same folder); crosstrain's `pythonModule: crosstrain_code` with args `-- python -m MODULE
      ARGS` is the bundle running `python -m MODULE ARGS`, so it is compared as that module and args;
    - crosstrain's identity labels are left out; counts are compared as numbers; empty maps are not sent."""
    t = copy.deepcopy(training)
    t.setdefault("scaleTier", "BASIC")
    t["code"] = bool(t.pop("packageUris", None))
    if crosstrain and t.get("pythonModule") == "crosstrain_code":
        argv, _ = unbundle(["python", "-m", "crosstrain_code", *t.get("args", [])])
        if argv[:2] == ["python", "-m"]:
            t["pythonModule"], t["args"] = argv[2], argv[3:]
    t["labels"] = {k: v for k, v in (t.get("labels") or {}).items() if k not in IDENTITY_KEYS}
    for key in ("workerCount", "parameterServerCount", "evaluatorCount"):
        if key in t:
            t[key] = int(t[key])
    return dict(prune(t))


# -- Databricks --------------------------------------------------------------------------------------------------
def databricks_original(case: Case) -> dict[str, Any]:
    """The cluster the run asks for, read into the SDK's `ClusterSpec` (an unknown field or a wrong type fails),
    and the `TorchDistributor(...)` or `DeepspeedTorchDistributor(...)` call (`class:`), bound to pyspark's own
    signature with its defaults. A function's command line is what pyspark gives it: nothing, or for DeepSpeed
    `--deepspeed --deepspeed_config FILE` (its `_create_torchrun_command`). The original is described in our own
    words (topology.yaml) where its licence does not allow a copy."""
    import inspect

    from databricks.sdk.service.compute import ClusterSpec
    from pyspark.ml.deepspeed.deepspeed_distributor import DeepspeedTorchDistributor
    from pyspark.ml.torch.distributor import TorchDistributor

    described = yaml.safe_load(case.original.read_text())
    keywords = dict(described["distributor"])
    kind = keywords.pop("class", "TorchDistributor")
    cls = {"TorchDistributor": TorchDistributor, "DeepspeedTorchDistributor": DeepspeedTorchDistributor}[kind]
    bound = inspect.signature(cls).bind(**keywords)
    bound.apply_defaults()
    distributor = {"class": kind, **{k: v for k, v in bound.arguments.items() if not k.startswith("_")}}
    run = dict(described["run"])
    if "function" in run:
        config = distributor.get("deepspeedConfig")
        deepspeed = ["--deepspeed", *(["--deepspeed_config", config] if config else [])]
        run["argv"] = deepspeed if kind == "DeepspeedTorchDistributor" else []
    return {"cluster": ClusterSpec.from_dict(described["cluster"]).as_dict(), "distributor": distributor, "run": run}


def databricks_crosstrain(request: Request) -> dict[str, Any]:
    from databricks.sdk.service.jobs import SubmitTask

    task = SubmitTask.from_dict(request.create.body["tasks"][0])
    assert task.spark_python_task is not None
    assert task.new_cluster is not None
    call = DistributorCall.parse(task.spark_python_task.parameters or [])
    run: dict[str, Any]
    if call.kind == "module" and call.target == "crosstrain.function":
        run = {"function": True, "argv": list(call.args)}
    else:
        run = {call.kind: call.target, "args": list(call.args)}
    distributor: dict[str, Any] = {
        "class": "TorchDistributor",
        "num_processes": call.num_processes,
        "local_mode": call.local_mode,
        "use_gpu": call.use_gpu,
    }
    if call.deepspeed:
        distributor = {
            "class": "DeepspeedTorchDistributor",
            "numGpus": call.num_processes // call.nodes,
            "nnodes": call.nodes,
            "localMode": call.local_mode,
            "useGpu": call.use_gpu,
            "deepspeedConfig": call.deepspeed_config or None,
        }
    return {"cluster": task.new_cluster.as_dict(), "distributor": distributor, "run": run}


#: Variables crosstrain sets on multi-node clusters so that gloo and NCCL talk on the nodes' one interface
#: (eth0), which is where Databricks' own ML runtime has them talk too.
SOCKET_VARIABLES = {"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"}
GPU_AMOUNT = "spark.task.resource.gpu.amount"


def databricks_normalize(request: dict[str, Any], crosstrain: bool) -> dict[str, Any]:
    """Rewritten, each for a reason:
    - `cluster_log_conf` (crosstrain has the cluster copy the driver's logs where `crosstrain logs` reads them)
      and crosstrain's identity tags are left out; so are SOCKET_VARIABLES;
    - an unset `driver_node_type_id` is `node_type_id` (the Clusters API's default), and on a GPU ML runtime an
      unset `spark.task.resource.gpu.amount` is 1 (Databricks' GPU compute preset: one GPU per task);
    - a function given to TorchDistributor is compared as "a function": its body and arguments travel pickled
      (crosstrain.function), like a notebook's closure; a file target is compared by its name, its folder
      being where each side uploaded it;
    - empty maps are not sent (prune)."""
    r = copy.deepcopy(request)
    cluster = r["cluster"]
    cluster.pop("cluster_log_conf", None)
    cluster.setdefault("driver_node_type_id", cluster.get("node_type_id"))
    if "-gpu-ml-" in str(cluster.get("spark_version")):
        cluster.setdefault("spark_conf", {}).setdefault(GPU_AMOUNT, "1")
    cluster["custom_tags"] = {k: v for k, v in (cluster.get("custom_tags") or {}).items() if k not in IDENTITY_KEYS}
    cluster["spark_env_vars"] = {
        k: v for k, v in (cluster.get("spark_env_vars") or {}).items() if k not in SOCKET_VARIABLES
    }
    run = r["run"]
    if "function" in run:
        r["run"] = {"function": True, "argv": run.get("argv", [])}
    elif "file" in run:
        run["file"] = Path(run["file"]).name
    return dict(prune(r))


# -- one table ---------------------------------------------------------------------------------------------------
Normalize = Callable[[dict[str, Any], bool], dict[str, Any]]
PLATFORM: dict[str, tuple[Callable[[Case], dict[str, Any]], Callable[[Request], dict[str, Any]], Normalize]] = {
    "azureml": (azureml_original, azureml_crosstrain, azureml_normalize),
    "vertex": (vertex_original, vertex_crosstrain, vertex_normalize),
    "aiplatform": (aiplatform_original, aiplatform_crosstrain, aiplatform_normalize),
    "databricks": (databricks_original, databricks_crosstrain, databricks_normalize),
}


def train_function() -> None:
    """Stands for the function a notebook hands TorchDistributor (its body travels pickled; see normalize)."""


#: A case folder's platform prefix where it is not the target's name (`air-...` cases render `databricks-air`).
TARGETS = {"air": "databricks-air"}


def crosstrain_request(case: Case) -> Request:
    """crosstrain's render of job.yaml for the case's platform (a Databricks job without a command runs
    `train_function`, as a notebook hands TorchDistributor a function)."""
    job = yaml.safe_load(case.job.read_text())
    if case.platform == "databricks" and "command" not in job:
        spec = with_function(train_function, case.job)
        return create_backend(case.platform, environ={}).render(spec, dict(job["targets"][case.platform]))
    return render(case.job, TARGETS.get(case.platform, case.platform), environ={})


def compare(case: Case) -> tuple[str, list[Difference], str]:
    """The verdict: REFUSED (with crosstrain's reason), EQUAL, or EQUIVALENT with the differences."""
    from crosstrain.errors import SpecError

    try:
        request = crosstrain_request(case)
    except SpecError as exc:
        return "REFUSED", [], str(exc)
    if case.platform == "air":  # Databricks AI Runtime: tests/corpus/air.py
        original = air.normalize(air.air_original(case), False)
        found = diff(original, air.normalize(air.air_crosstrain(request), True, request.identity))
        return ("EQUIVALENT" if found else "EQUAL"), found, ""
    original_of, crosstrain_of, normalize = PLATFORM[case.platform]
    original, crosstrain = original_of(case), crosstrain_of(request)
    if case.platform == "databricks":  # each side's DeepSpeed config, by what it holds
        code = yaml.safe_load(case.job.read_text()).get("code") or "."
        original, crosstrain = deepspeed_config(original, case.folder), deepspeed_config(crosstrain, case.folder / code)
    found = diff(normalize(original, False), normalize(crosstrain, True))
    return ("EQUIVALENT" if found else "EQUAL"), found, ""


def deepspeed_config(request: dict[str, Any], folder: Path) -> dict[str, Any]:
    """A DeepSpeed run's config compared by what it holds, not where it lies: pyspark writes a dict to a temporary
    file, crosstrain ships a file in the code folder; every rank is given the path of a file with those contents."""
    config = request["distributor"].get("deepspeedConfig")
    if not config:
        return request
    contents = json.loads((folder / config).read_text()) if isinstance(config, str) else config
    argv = request["run"].get("argv", [])
    given = ["<deepspeedConfig>" if i and argv[i - 1] == "--deepspeed_config" else a for i, a in enumerate(argv)]
    return {
        **request,
        "distributor": {**request["distributor"], "deepspeedConfig": contents},
        "run": {**request["run"], "argv": given},
    }
