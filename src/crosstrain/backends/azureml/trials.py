"""An Azure ML sweep's trials, as status and wait show them: each trial is a child run of the sweep job in the
workspace's run history service, listed by azure-ai-ml's `MLClient.jobs.list(parent_job_name=...)`
(`GET https://<region>.api.azureml.ms/history/v1.0/.../runs/<sweep>/children`, a `PaginatedRunList`).

* A trial's values: the service (HyperDrive) records them on the sweep job, as a tag per trial named by its run
  (`<sweep>_<N>`: the values as JSON), which is how `HyperDriveRun.get_hyperparameters` reads them.
* The metric: each trial logs it to MLflow; the sweep job records the best trial so far and its value on its own
  properties (`best_child_run_id`, `score`). That value is shown; other trials' values stay in MLflow.
* The run history host is the workspace's region's API host, which the SDK learns from the workspace's discovery
  URL; it is read first and must be `https://<region>.api.azureml.ms` (`RUN_HISTORY`), or no trial is read:
  the Azure token goes nowhere else.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from crosstrain import sweep as sweeps
from crosstrain.adaptors import azure
from crosstrain.backends.azureml.settings import STATE_MAP
from crosstrain.backends.binding import origin_of
from crosstrain.errors import CrosstrainError, SubmitError
from crosstrain.records import JobHandle, JobState

if TYPE_CHECKING:
    from crosstrain.backends.azureml.backend import AzureMLBackend

#: The run history service's origin: the workspace region's Azure ML API host.
RUN_HISTORY = re.compile(r"https://[a-z0-9]+\.api\.azureml\.ms")
_TRIAL = re.compile(r"^(?P<sweep>.+)_(?P<index>\d+)$")


def run_history(ml: Any, workspace: str) -> str:
    """The run history service's origin, as the SDK will call it, checked to be a region's Azure ML API host."""
    api = azure.call(lambda: str(ml.jobs._api_url), f"read the discovery URL of workspace {workspace}")
    origin = origin_of(api)
    if origin is None or not RUN_HISTORY.fullmatch(origin):
        raise SubmitError(
            f"workspace {workspace}'s discovery names {api!r} for its run history, which is not a region's Azure ML "
            "API host (https://<region>.api.azureml.ms): its trials are not read there (the Azure token goes "
            "nowhere else)"
        )
    return origin


def params_of(tags: Mapping[str, Any], run: str) -> dict[str, Any]:
    """A trial's values, from the sweep job's tag named by the trial's run (JSON), else none."""
    try:
        values = json.loads(str(tags.get(run) or "{}"))
    except ValueError:
        return {}
    return {str(k): v for k, v in values.items()} if isinstance(values, dict) else {}


def _score(properties: Mapping[str, Any]) -> float | None:
    try:
        value = float(properties.get("score"))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def said(backend: AzureMLBackend, handle: JobHandle, job: Any, state: JobState) -> str:
    """The sweep's trials by state and the best so far, in words; every trial (state, values, the best's
    metric) kept on the handle as its outcome (`status --json`, the notebook's table)."""
    name = handle.job_id
    ml = backend._client(handle.ref)
    try:
        where = run_history(ml, str(handle.ref.get("workspace")))
        what = f"list the trials of sweep {name} ({where})"
        children = backend.retry.poll(
            lambda: azure.call(lambda: [c for c in ml.jobs.list(parent_job_name=name) if c], what)
        )
    except CrosstrainError as error:  # the trials are an aid: the sweep's state stands without them
        return f"its trials are not read ({error}): az ml job list --parent-job-name {name}, or the studio"
    tags = dict(getattr(job, "tags", None) or {})
    properties = dict(getattr(job, "properties", None) or {})
    objective = getattr(job, "objective", None)
    metric = str(getattr(objective, "primary_metric", "") or "")
    goal = str(getattr(objective, "goal", "") or "").lower()
    best_run, score = properties.get("best_child_run_id"), _score(properties)
    trials: list[dict[str, Any]] = []
    for child in children:
        run = str(child.name)
        found = _TRIAL.match(run)
        native = str(getattr(child.status, "value", child.status) or "Unknown")
        trial: dict[str, Any] = {
            "trial": int(found["index"]) if found else run,
            "params": params_of(tags, run),
            "state": STATE_MAP.get(native, JobState.UNKNOWN).value,
            "native_state": native,
            "run_id": run,
        }
        if run == best_run and score is not None:
            trial["value"] = score
        trials.append(trial)
    trials.sort(key=lambda t: (not isinstance(t["trial"], int), str(t["trial"]).zfill(12)))
    best = next((t for t in trials if t["run_id"] == best_run), None)
    states = [JobState(t["state"]) for t in trials]
    counts = ", ".join(f"{states.count(s)} {s.value.lower()}" for s in JobState if s in states)
    message = f"{len(trials)} trials" + (f" ({counts})" if counts else "")
    if best is not None:
        which = "best" if state.terminal else "best so far"
        value = f", {metric} {score:.6g}" if score is not None else ""
        message += f"; {which}: trial {best['trial']} ({sweeps_shown(best['params'])}){value}"
    elif best_run:
        message += f"; best trial so far: {best_run}"
    if isinstance(handle.ref, dict):
        handle.ref["outcome"] = {
            "state": state.value,
            "message": message,
            "sweep": {"metric": metric, "goal": goal, "trials": trials, "best": best},
        }
    return message


def sweeps_shown(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{name}={sweeps.text(value)}" for name, value in params.items())


def listed(backend: AzureMLBackend, handle: JobHandle, job: Any, state: JobState) -> dict[str, Any]:
    """The sweep job's row of `list`: its trials by state (one run history call) and the best so far."""
    probe = JobHandle(handle.target, handle.identity, handle.job_id, handle.console_url, dict(handle.ref))
    message = said(backend, probe, job, state)
    return sweeps.listed(probe.ref.get("outcome") or {"message": message})
