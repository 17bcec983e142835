"""An Azure ML sweep's trials' metrics, from the workspace's MLflow tracking service, where each trial logs them
(`crosstrain.runtime.report` writes MLflow on Azure ML).

* Where: the workspace's MLflow tracking URI is `azureml://<region>.api.azureml.ms/mlflow/v1.0/<workspace's ARM
  path>` (azure-ai-ml's `Workspace.mlflow_tracking_uri`); MLflow's REST client adds `/api/2.0/mlflow/...` to it
  over https. So the call goes to the run history's own host (`trials.run_history`, checked to be a region's
  `https://<region>.api.azureml.ms`), through the run history client's own azure-core pipeline: the same
  transport, token, timeouts and no SDK retries (crosstrain's retry policy polls it).
* What: one MLflow `runs/search` for every trial (`filter: tags.mlflow.parentRunId = '<sweep>'`, the trials'
  experiment, paged by `next_page_token`): MLflow's `Run{info, data{metrics[{key, value, step, timestamp}]}}`.
  Its `data.metrics` hold each metric's latest value, which is the value a trial shows.
* The trials' experiment: the run history's `Run.experimentId` of a child, which azure-ai-ml's
  `_BaseJob._from_rest_object` keeps as the listed job's `experiment_name`.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from crosstrain.backends.azureml.wire import _send
from crosstrain.errors import CrosstrainError
from crosstrain.records import HttpCall

if TYPE_CHECKING:
    from crosstrain.retry import RetryPolicy

#: MLflow's search of runs, under the workspace's tracking URI's path on the run history host.
SEARCH = "/mlflow/v1.0{workspace}/api/2.0/mlflow/runs/search"
#: Runs asked for per page (MLflow's own default and most), and pages read at most (a sweep's trials fit).
PAGE_SIZE = 1000
PAGES = 50
#: A run's name as a filter may quote it.
_NAME = re.compile(r"[A-Za-z0-9_.:-]+")


@dataclass
class Read:
    """What the search read: each trial run's latest value and step of the metric, by run id; `error` where
    the metrics could not be read (then `values` is empty)."""

    values: dict[str, tuple[float, int | None]] = field(default_factory=dict)
    error: str | None = None
    #: False where no search was made (`list`): a trial without a value then says nothing of it.
    searched: bool = True


def workspace_path(ref: Mapping[str, Any]) -> str:
    names = [quote(str(ref.get(key) or ""), safe="") for key in ("subscription_id", "resource_group", "workspace")]
    return (
        f"/subscriptions/{names[0]}/resourceGroups/{names[1]}"
        f"/providers/Microsoft.MachineLearningServices/workspaces/{names[2]}"
    )


def search_body(sweep: str, experiments: list[str], page_token: str | None) -> dict[str, Any]:
    """MLflow's `SearchRuns` request for the sweep's trials."""
    body: dict[str, Any] = {
        "experiment_ids": experiments,
        "filter": f"tags.mlflow.parentRunId = '{sweep}'",
        "max_results": PAGE_SIZE,
    }
    if page_token:
        body["page_token"] = page_token
    return body


def latest(run: Any, metric: str) -> tuple[str, float, int | None] | None:
    """An MLflow `Run`'s id and the metric's value and step, where it logged a finite one."""
    if not isinstance(run, Mapping):
        return None
    info, data = run.get("info") or {}, run.get("data") or {}
    run_id = info.get("run_id") or info.get("run_uuid") if isinstance(info, Mapping) else None
    metrics = data.get("metrics") if isinstance(data, Mapping) else None
    if not run_id or not isinstance(metrics, list):
        return None
    for entry in metrics:
        if isinstance(entry, Mapping) and entry.get("key") == metric:
            try:
                value = float(entry.get("value"))  # type: ignore[arg-type]
            except (TypeError, ValueError):
                return None
            step = entry.get("step")
            whole = int(step) if isinstance(step, (int, str)) and str(step).lstrip("-").isdigit() else None
            return (str(run_id), value, whole) if math.isfinite(value) else None
    return None


def read(
    ml: Any,
    origin: str,
    ref: Mapping[str, Any],
    sweep: str,
    experiments: Iterable[str],
    metric: str,
    retry: RetryPolicy,
) -> Read:
    """The metric of every trial of `sweep` that logged it, by one paged MLflow search on `origin` (the checked
    run history host). Never raises for the service's answer: a failure is kept as `error`."""
    wanted = sorted({e for e in experiments if e})
    if not metric:
        return Read(error="the sweep names no metric")
    if not wanted:
        return Read(error="the trials name no experiment")
    if not _NAME.fullmatch(sweep):
        return Read(error=f"{sweep!r} is not a run name a search may quote")
    url = origin + SEARCH.format(workspace=workspace_path(ref))
    try:
        pipeline = ml.jobs._runs_operations._operation._client  # the run history client's pipeline
    except AttributeError as error:  # another azure-ai-ml than the one this was written for
        return Read(error=f"this azure-ai-ml has no run history client ({error})")
    found = Read()
    token: str | None = None
    try:
        for _ in range(PAGES):
            call = HttpCall("POST", url, search_body(sweep, wanted, token), {"Content-Type": "application/json"})
            answer = retry.poll(functools.partial(_send, pipeline, call))
            body = answer[1] if answer else {}
            for run in body.get("runs") or []:
                got = latest(run, metric)
                if got is not None:
                    found.values[got[0]] = (got[1], got[2])
            token = str(body.get("next_page_token") or "") or None
            if token is None:
                break
    except CrosstrainError as error:  # refused, failed or unreadable: the trials stand without their metrics
        return Read(error=str(error))
    return found
