"""The `gcloud ai custom-jobs create` form of a rendered request (`--format gcloud`)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from crosstrain.backends._google import (
    uploaded_object,
)
from crosstrain.records import Request

if TYPE_CHECKING:
    pass


# ---- --format gcloud ---------------------------------------------------------------------------------------
_FLAG_POOL_KEYS = {"replicaCount", "machineSpec", "containerSpec"}
_FLAG_SPEC_KEYS = {"workerPoolSpecs", "serviceAccount", "network"}


def gcloud_command(request: Request) -> str:
    """`gcloud ai custom-jobs create` for the request: flags where they express it all, else a `--config` file.

    gcloud applies `--command`/`--args` to every pool and has no flags for env, disks, scheduling or the output
    directory, so any of those (or a reduction server, whose pool takes no command) needs the config file.
    """
    body = request.create.body
    parent = urlparse(request.create.url).path.split("/")
    project, region = parent[3], parent[5]
    if "studySpec" in body:
        return _tuning_command(request, project, region)
    spec = body["jobSpec"]
    head = [
        "gcloud ai custom-jobs create",
        f"--project={project}",
        f"--region={region}",
        f"--display-name={body['displayName']}",
        "--labels=" + ",".join(f"{k}={v}" for k, v in body["labels"].items()),
    ]
    uploads = [where for call in request.calls[:-1] if (where := uploaded_object(call))]
    first = "".join(
        f"# crosstrain submit uploads the code package first (gcloud does not): gs://{bucket}/{name}\n"
        for bucket, name in uploads
    )
    unsent = sorted(set(body) - {"displayName", "labels", "jobSpec"})  # from targets.vertex.patch
    if unsent:
        first += f"# gcloud has no flag or config field for {', '.join(unsent)}; crosstrain submit sends them\n"
    flags = _pool_flags(spec)
    if flags is not None:
        return first + _shell(head + flags)
    config = f"{request.identity}.vertex.yaml"
    import yaml

    text = yaml.safe_dump(spec, sort_keys=False, default_flow_style=False, width=1000)
    lines = [f"cat > {shlex.quote(config)} <<'EOF'", text.rstrip("\n"), "EOF"]
    return first + "\n".join(lines) + "\n" + _shell([*head, f"--config={config}"])


def _tuning_command(request: Request, project: str, region: str) -> str:
    """`gcloud ai hp-tuning-jobs create` with the study and the trial spec in its `--config` file."""
    import yaml

    body = request.create.body
    head = [
        "gcloud ai hp-tuning-jobs create",
        f"--project={project}",
        f"--region={region}",
        f"--display-name={body['displayName']}",
        f"--max-trial-count={body['maxTrialCount']}",
        f"--parallel-trial-count={body['parallelTrialCount']}",
        "--labels=" + ",".join(f"{k}={v}" for k, v in body["labels"].items()),
    ]
    config = f"{request.identity}.vertex.yaml"
    spec = {key: body[key] for key in ("studySpec", "trialJobSpec", "maxFailedTrialCount") if key in body}
    text = yaml.safe_dump(spec, sort_keys=False, default_flow_style=False, width=1000)
    uploads = [where for call in request.calls[:-1] if (where := uploaded_object(call))]
    first = "".join(
        f"# crosstrain submit uploads the code package first (gcloud does not): gs://{bucket}/{name}\n"
        for bucket, name in uploads
    )
    lines = [f"cat > {shlex.quote(config)} <<'EOF'", text.rstrip("\n"), "EOF"]
    return first + "\n".join(lines) + "\n" + _shell([*head, f"--config={config}"])


def _shell(parts: list[str]) -> str:
    """One command per line group; the first part is the literal command, the rest are quoted arguments."""
    return " \\\n  ".join([parts[0], *(shlex.quote(part) for part in parts[1:])])


def _pool_flags(spec: Mapping[str, Any]) -> list[str] | None:
    """One `--worker-pool-spec` per pool plus the job-wide flags, or None where flags cannot say it all."""
    pools = spec["workerPoolSpecs"]
    if set(spec) - _FLAG_SPEC_KEYS or any(not pool or set(pool) - _FLAG_POOL_KEYS for pool in pools):
        return None
    if any(set(pool["machineSpec"]) - {"machineType", "acceleratorType", "acceleratorCount"} for pool in pools):
        return None  # e.g. a TPU topology from targets.vertex.patch
    containers = [pool["containerSpec"] for pool in pools]
    if any(set(c) - {"imageUri", "command", "args"} for c in containers):
        return None
    commands = {json.dumps([c.get("command"), c.get("args")]) for c in containers}
    if len(commands) > 1 or any("," in part for c in containers for part in c.get("command", []) + c.get("args", [])):
        return None  # gcloud sends one command to every pool, and splits list flags on commas
    flags = []
    for pool in pools:
        machine = pool["machineSpec"]
        parts = [f"machine-type={machine['machineType']}", f"replica-count={pool['replicaCount']}"]
        if "acceleratorType" in machine:
            parts += [
                f"accelerator-type={machine['acceleratorType']}",
                f"accelerator-count={machine['acceleratorCount']}",
            ]
        parts.append(f"container-image-uri={pool['containerSpec']['imageUri']}")
        flags.append("--worker-pool-spec=" + ",".join(parts))
    command, args = containers[0].get("command"), containers[0].get("args")
    if command:
        flags.append("--command=" + ",".join(command))
    if args:
        flags.append("--args=" + ",".join(args))
    for key, flag in (("serviceAccount", "--service-account"), ("network", "--network")):
        if key in spec:
            flags.append(f"{flag}={spec[key]}")
    return flags
