"""An Azure ML sweep's trials, as status and wait show them: each trial is a child run of the sweep job in the
workspace's run history service, listed by azure-ai-ml's `MLClient.jobs.list(parent_job_name=...)`
(`GET https://<region>.api.azureml.ms/history/v1.0/.../runs/<sweep>/children`, a `PaginatedRunList`).

* A trial's values: the service (HyperDrive) records them on the sweep job, as a tag per trial named by its run
  (`<sweep>_<N>`: the values as JSON), which is how `HyperDriveRun.get_hyperparameters` reads them.
* The metric: each trial logs it to MLflow, and every trial's latest value is read from the workspace's MLflow
  tracking service on the same host in one paged search (`metrics`). A trial without one says so ("no val_loss
  logged yet"; "val_loss not read" where the search failed, with the reason once): the status never fails for it.
* The best: the sweep job records the best trial so far and its value on its own properties
  (`best_child_run_id`, `score`); that one is the best where given (and a better value read is said beside it),
  else the best of the values read, by the sweep's goal.
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
from crosstrain.backends.azureml import metrics as mlflow_metrics
from crosstrain.backends.azureml.settings import STATE_MAP
from crosstrain.backends.binding import origin_of
from crosstrain.errors import CrosstrainError, SubmitError
from crosstrain.records import JobHandle, JobState

if TYPE_CHECKING:
    from crosstrain.backends.azureml.backend import AzureMLBackend

#: The run history service's origin: the workspace region's Azure ML API host.
RUN_HISTORY = re.compile(r"https://[a-z0-9]+\.api\.azureml\.ms")
_TRIAL = re.compile(r"^(?P<sweep>.+)_(?P<index>\d+)$")
#: Trials whose metric the status line names one by one (the rest: `status --json`, the notebook's table).
SHOWN = 12


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


def said(backend: AzureMLBackend, handle: JobHandle, job: Any, state: JobState, *, metrics: bool = True) -> str:
    """The sweep's trials by state, each trial's metric and the best so far, in words; every trial (state,
    values, metric or why none) kept on the handle as its outcome (`status --json`, the notebook's table).
    `metrics`: read the trials' metrics from MLflow (`list` does not: one run history call per sweep)."""
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
    read = (
        mlflow_metrics.read(
            ml,
            where,
            handle.ref,
            name,
            (str(getattr(c, "experiment_name", "") or "") for c in children),
            metric,
            backend.retry,
        )
        if children and metrics
        else mlflow_metrics.Read(searched=False)
    )
    trials = [_trial(child, tags, metric, read, best_run, score) for child in children]
    trials.sort(key=lambda t: (not isinstance(t["trial"], int), str(t["trial"]).zfill(12)))
    best, better = _best(trials, best_run, goal)
    states = [JobState(t["state"]) for t in trials]
    counts = ", ".join(f"{states.count(s)} {s.value.lower()}" for s in JobState if s in states)
    message = f"{len(trials)} trials" + (f" ({counts})" if counts else "")
    if best is not None:
        which = "best" if state.terminal else "best so far"
        value = best.get("value") if best["run_id"] != best_run or score is None else score
        shown = f", {metric} {value:.6g}" if isinstance(value, float) else ""
        message += f"; {which}: trial {best['trial']} ({sweeps_shown(best['params'])}){shown}"
        if better is not None:
            message += (
                f" (the service's choice; of the values read, trial {better['trial']}'s {metric} "
                f"{better['value']:.6g} is better)"
            )
    elif best_run:
        message += f"; best trial so far: {best_run}"
    if trials and metric and metrics:
        message += "; " + _metrics_said(trials, metric)
    if read.error is not None and trials:
        message += f" ({metric or 'the metric'} not read: {read.error})"
    if isinstance(handle.ref, dict):
        sweep: dict[str, Any] = {"metric": metric, "goal": goal, "trials": trials, "best": best}
        if read.error is not None and trials:
            sweep["metrics_error"] = read.error
        handle.ref["outcome"] = {"state": state.value, "message": message, "sweep": sweep}
    return message


def _trial(
    child: Any, tags: Mapping[str, Any], metric: str, read: mlflow_metrics.Read, best_run: Any, score: float | None
) -> dict[str, Any]:
    """One trial as status keeps it: its number, values, state, run and metric (else why none)."""
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
    if run in read.values:
        trial["value"], step = read.values[run]
        if step is not None:
            trial["step"] = step
    elif run == best_run and score is not None:  # the service's value, where MLflow gave none
        trial["value"] = score
    elif read.searched:
        name = metric or "metric"
        trial["note"] = f"{name} not read" if read.error is not None else f"no {name} logged yet"
    return trial


def _best(
    trials: list[dict[str, Any]], best_run: Any, goal: str
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The best trial so far (the service's where it names one, else the best value read by `goal`), and a trial
    whose value read is better than the service's choice (None where they agree)."""
    measured = [t for t in trials if isinstance(t.get("value"), float)]
    pick = max if goal == "maximize" else min
    ours = pick(measured, key=lambda t: t["value"]) if measured else None
    service = next((t for t in trials if t["run_id"] == best_run), None) if best_run else None
    if service is None:
        return ours, None
    theirs = service.get("value")
    if ours is None or ours is service or not isinstance(theirs, float):
        return service, None
    disagree = ours["value"] > theirs if goal == "maximize" else ours["value"] < theirs
    return service, (ours if disagree else None)


def _metrics_said(trials: list[dict[str, Any]], metric: str) -> str:
    """Each trial's metric, or why it has none, the first `SHOWN` trials by name."""
    said = [
        f"trial {t['trial']} {metric} {t['value']:.6g}"
        if isinstance(t.get("value"), float)
        else f"trial {t['trial']} {t.get('note', '')}"
        for t in trials[:SHOWN]
    ]
    more = len(trials) - SHOWN
    return ", ".join(said) + (f" and {more} more (status --json)" if more > 0 else "")


def sweeps_shown(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{name}={sweeps.text(value)}" for name, value in params.items())


def listed(backend: AzureMLBackend, handle: JobHandle, job: Any, state: JobState) -> dict[str, Any]:
    """The sweep job's row of `list`: its trials by state (one run history call) and the best so far (the
    service's: the trials' metrics are read by status, not by list)."""
    probe = JobHandle(handle.target, handle.identity, handle.job_id, handle.console_url, dict(handle.ref))
    message = said(backend, probe, job, state, metrics=False)
    return sweeps.listed(probe.ref.get("outcome") or {"message": message})
