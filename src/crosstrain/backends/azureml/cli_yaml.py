"""The Azure ML CLI v2 YAML form of a rendered request (`--format azureml-yaml`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from crosstrain.backends.azureml.settings import _PRIORITY, ARM, CLI_SCHEMA
from crosstrain.backends.azureml.wire import _yaml_bindings, seconds_of
from crosstrain.records import Request

if TYPE_CHECKING:
    pass


# -- the CLI v2 YAML form ----------------------------------------------------------------------------------
#: The job properties `cli_yaml` writes (or that have no CLI field and say nothing: jobType, isArchived).
_CLI_FIELDS = frozenset(
    {
        "jobType", "displayName", "experimentName", "command", "environmentId", "codeId", "environmentVariables",
        "computeId", "distribution", "resources", "limits", "queueSettings", "identity", "tags", "properties",
        "description", "services", "inputs", "outputs", "isArchived",
    }
)  # fmt: skip


def cli_yaml(request: Request) -> dict[str, Any]:
    """The rendered job as Azure ML CLI v2 YAML (`az ml job create -f`), derived from the request itself."""
    props = request.create.body["properties"]
    registers = {
        c.url.split("?")[0].removeprefix(ARM): c.body["properties"]
        for c in request.calls[:-1]
        if c.method == "PUT" and {"image", "build"} & set((c.body or {}).get("properties") or {})
    }
    env_id = props["environmentId"]
    environment: Any
    if env_id in registers and "build" in registers[env_id] and request.build_context is not None:
        # the local folder, which `az ml job create` uploads and registers as this same anonymous environment
        build = registers[env_id]["build"]
        environment = {"build": {"path": request.build_context.folder}}
        if build.get("dockerfilePath"):
            environment["build"]["dockerfile_path"] = build["dockerfilePath"]
    elif env_id in registers and "image" in registers[env_id]:
        registered = registers[env_id]
        environment = {"image": registered["image"]}
        if "condaFile" in registered:  # the az CLI takes the conda file inline as well as by path
            import yaml

            environment["conda_file"] = yaml.safe_load(registered["condaFile"])
    else:
        match = re.search(r"^/subscriptions/.*/environments/([^/]+)/versions/([^/]+)$", env_id)
        environment = f"azureml:{match[1]}:{match[2]}" if match else env_id
    out: dict[str, Any] = {
        "$schema": CLI_SCHEMA,
        "type": "command",
        "name": request.identity,
        "command": props["command"],
        "environment": environment,
    }
    for wire, field_name in (
        ("displayName", "display_name"),
        ("experimentName", "experiment_name"),
    ):
        if props.get(wire):  # a patch may remove them
            out[field_name] = props[wire]
    if "codeId" in props:  # the code asset submit uploads (or finds by its content): by name and version
        match = re.search(r"/codes/([^/]+)/versions/([^/]+)$", props["codeId"])
        out["code"] = f"azureml:{match[1]}:{match[2]}" if match else props["codeId"]
    if props.get("environmentVariables"):
        out["environment_variables"] = dict(props["environmentVariables"])
    if props.get("inputs"):  # a local input by its path, which `az ml job create` uploads to the same place
        local = {name: ref.folder for name, ref in request.inputs.items()}
        out["inputs"] = _yaml_bindings(props["inputs"], "jobInputType", local)
    if props.get("outputs"):
        out["outputs"] = _yaml_bindings(props["outputs"], "jobOutputType")
    if "computeId" in props:
        out["compute"] = "azureml:" + props["computeId"].rsplit("/", 1)[-1]
    dist = props.get("distribution") or {}  # a patch may remove it
    if dist.get("distributionType") == "TensorFlow":
        out["distribution"] = {
            "type": "tensorflow",
            "worker_count": dist["workerCount"],
            "parameter_server_count": dist["parameterServerCount"],
        }
    elif dist:
        out["distribution"] = {
            "type": dist["distributionType"].lower(),
            "process_count_per_instance": dist["processCountPerInstance"],
        }
    wire_names = {
        "instanceCount": "instance_count",
        "instanceType": "instance_type",
        "shmSize": "shm_size",
        "dockerArgs": "docker_args",
    }
    out["resources"] = {
        snake: props["resources"][camel] for camel, snake in wire_names.items() if camel in props["resources"]
    }
    if (props.get("limits") or {}).get("timeout"):  # a patch may remove it
        out["limits"] = {"timeout": seconds_of(props["limits"]["timeout"])}
    if "queueSettings" in props:
        queue = props["queueSettings"]
        out["queue_settings"] = {}
        if "jobTier" in queue:
            out["queue_settings"]["job_tier"] = queue["jobTier"].lower()
        if "priority" in queue:
            out["queue_settings"]["priority"] = {v: k for k, v in _PRIORITY.items()}[queue["priority"]]
    if "identity" in props:
        identity = props["identity"]
        kind = {"Managed": "managed", "AMLToken": "aml_token", "UserIdentity": "user_identity"}[
            identity["identityType"]
        ]
        out["identity"] = {
            "type": kind,
            **({"client_id": identity["clientId"]} if "clientId" in identity else {}),
        }
    if props.get("tags"):
        out["tags"] = dict(props["tags"])
    if props.get("properties"):
        out["properties"] = dict(props["properties"])
    if props.get("description"):  # from targets.azureml.patch
        out["description"] = props["description"]
    if props.get("services"):
        out["services"] = {name: _cli_service(service) for name, service in props["services"].items()}
    return out


#: REST job service types -> the CLI's (azure-ai-ml's JobServiceTypeNames), and the service properties the CLI
#: names as fields of their own.
_SERVICE_TYPES = {
    "JupyterLab": "jupyter_lab",
    "SSH": "ssh",
    "TensorBoard": "tensor_board",
    "VSCode": "vs_code",
}
_SERVICE_FIELDS = {"sshPublicKeys": "ssh_public_keys", "logDir": "log_dir"}


def _cli_service(service: Mapping[str, Any]) -> dict[str, Any]:
    """A job service (`targets.azureml.patch: {properties: {services: ...}}`) as the CLI YAML writes it."""
    kind = service.get("jobServiceType")
    out: dict[str, Any] = {"type": _SERVICE_TYPES.get(kind, kind)} if kind else {}
    if "port" in service:
        out["port"] = service["port"]
    if (service.get("nodes") or {}).get("nodesValueType") == "All":
        out["nodes"] = "all"
    rest = dict(service.get("properties") or {})
    for wire, field_name in _SERVICE_FIELDS.items():
        if wire in rest:
            out[field_name] = rest.pop(wire)
    if rest:
        out["properties"] = rest
    return out
