"""A sweep's trial, on the node: its id, its parameters, and `report`, which writes what the tuning service reads.

    from crosstrain import runtime

    lr = runtime.params()["lr"]          # this trial's values of the sweep's parameters
    ...
    runtime.report({"val_loss": loss}, step=epoch)

`report` writes where each platform's service looks: the hypertune metrics file on Vertex AI and AI Platform
(`$CLOUD_ML_HP_METRIC_FILE`, by default /tmp/hypertune/output.metrics: one JSON object per line, the last 100
reports, as GoogleCloudPlatform/cloudml-hypertune writes it), MLflow on Azure ML (`mlflow.log_metric`, where mlflow
is installed: the sweep job reads the primary metric from the trial's run), and on Databricks and the local target
a results file crosstrain reads (`$CROSSTRAIN_SWEEP_RESULTS`, JSON lines). Only the primary process (rank 0)
reports. Standard library only, Python 3.7 and later.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from typing import Any

#: The sweep's parameter names, comma-separated, set by crosstrain on every node of a trial.
PARAMS_ENV = "CROSSTRAIN_SWEEP"
#: One variable per parameter, `CROSSTRAIN_SWEEP_<NAME>`, set by crosstrain (locally, on Databricks) or by the
#: bootstrap from what the service passed (Vertex AI's and AI Platform's arguments, Azure ML's variables).
VALUE_PREFIX = "CROSSTRAIN_SWEEP_"
TRIAL_ENV = "CROSSTRAIN_TRIAL_ID"
RESULTS_ENV = "CROSSTRAIN_SWEEP_RESULTS"
HYPERTUNE_FILE_ENV = "CLOUD_ML_HP_METRIC_FILE"
HYPERTUNE_DEFAULT = "/tmp/hypertune/output.metrics"
#: How many reports the hypertune file keeps (as cloudml-hypertune does).
HYPERTUNE_KEEP = 100
_said: set[str] = set()


def names(environ: Mapping[str, str] | None = None) -> list[str]:
    """The sweep's parameter names; empty outside a sweep."""
    env = os.environ if environ is None else environ
    return [name for name in env.get(PARAMS_ENV, "").split(",") if name]


def typed(text: str) -> Any:
    """A parameter's value as the program wants it: an int, a float, or the word."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def from_args(argv: list[str], wanted: list[str]) -> dict[str, str]:
    """`--NAME=VALUE` or `--NAME VALUE` of the wanted names among `argv` (the last one wins): how Vertex AI and AI
    Platform pass a trial's values."""
    found: dict[str, str] = {}
    i = 0
    while i < len(argv):
        word = argv[i]
        if word.startswith("--"):
            key, eq, value = word[2:].partition("=")
            if key in wanted and eq:
                found[key] = value
            elif key in wanted and i + 1 < len(argv):
                found[key] = argv[i + 1]
                i += 1
        i += 1
    return found


def params(environ: Mapping[str, str] | None = None, argv: list[str] | None = None) -> dict[str, Any]:
    """This trial's value of each of the sweep's parameters; empty outside a sweep."""
    env = os.environ if environ is None else environ
    wanted = names(env)
    args = from_args(list(sys.argv[1:] if argv is None else argv), wanted)
    values: dict[str, Any] = {}
    for name in wanted:
        own = env.get(VALUE_PREFIX + name.replace("-", "_"))
        for source in (own, env.get("AZUREML_SWEEP_" + name), args.get(name)):
            if source is not None:
                values[name] = typed(source)
                break
    return values


def trial_id(environ: Mapping[str, str] | None = None) -> str | None:
    """This trial's id: crosstrain's (locally, on Databricks), Vertex AI's (`CLUSTER_SPEC`'s task.trial), AI
    Platform's (`TF_CONFIG`'s task.trial), `CLOUD_ML_TRIAL_ID`, or Azure ML's (the trial's run id); None outside a
    sweep."""
    env = os.environ if environ is None else environ
    if env.get(TRIAL_ENV):
        return env[TRIAL_ENV]
    for variable in ("CLUSTER_SPEC", "TF_CONFIG"):
        try:
            task = json.loads(env.get(variable) or "{}").get("task") or {}
        except (ValueError, AttributeError):
            task = {}
        if isinstance(task, dict) and task.get("trial"):
            return str(task["trial"])
    if env.get("CLOUD_ML_TRIAL_ID"):
        return env["CLOUD_ML_TRIAL_ID"]
    if names(env) and env.get("AZUREML_RUN_ID"):
        return env["AZUREML_RUN_ID"]
    return None


def _primary(env: Mapping[str, str]) -> bool:
    return env.get("RANK", "0") in ("", "0")


def _where(env: Mapping[str, str]) -> str:
    """Which service reads the reports: `hypertune` (Vertex AI, AI Platform), `mlflow` (Azure ML), or `file`."""
    if env.get(RESULTS_ENV):
        return "file"
    if env.get("CLUSTER_SPEC") or env.get("CLOUD_ML_JOB_ID") or env.get("CLOUD_ML_TRIAL_ID"):
        return "hypertune"
    if env.get("AZUREML_RUN_ID"):
        return "mlflow"
    return "hypertune" if env.get(HYPERTUNE_FILE_ENV) else "file"


def report(metrics: Mapping[str, float], step: int | None = None, environ: Mapping[str, str] | None = None) -> str:
    """Report this trial's metrics (at `step`) where the platform's tuning service reads them; returns where:
    `hypertune`, `mlflow`, `file` or `none` (not the primary process, or nowhere to write)."""
    env = os.environ if environ is None else environ
    values = {str(name): float(value) for name, value in metrics.items()}
    if not values:
        raise ValueError("report needs at least one metric, e.g. report({'val_loss': 0.12})")
    if not _primary(env):
        return "none"
    where = _where(env)
    if where == "hypertune":
        _hypertune(values, step, env)
    elif where == "mlflow":
        try:
            import mlflow  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            _say_once(
                "mlflow is not installed: Azure ML's sweep reads the metric from MLflow, so install mlflow and "
                "azureml-mlflow in the job's environment (requirements); the report is not seen"
            )
            return "none"
        for name, value in values.items():
            mlflow.log_metric(name, value, step=step or 0)
    elif env.get(RESULTS_ENV):
        _append(env[RESULTS_ENV], values, step, env)
    else:
        _say_once("not in a sweep's trial: the report goes nowhere")
        return "none"
    return where


def _hypertune(values: Mapping[str, float], step: int | None, env: Mapping[str, str]) -> None:
    """One line of the hypertune metrics file, the file rewritten whole with the last `HYPERTUNE_KEEP` lines."""
    path = env.get(HYPERTUNE_FILE_ENV) or HYPERTUNE_DEFAULT
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    lines: list[str] = []
    try:
        with open(path) as existing:
            lines = [line for line in existing.read().splitlines() if line.strip()]
    except OSError:
        pass
    entry: dict[str, Any] = {
        "timestamp": time.time(),
        "trial": str(env.get("CLOUD_ML_TRIAL_ID", 0)),
        "global_step": str(int(step) if step else 0),
    }
    entry.update({name: str(value) for name, value in values.items()})
    lines = [*lines, json.dumps(entry, sort_keys=True)][-HYPERTUNE_KEEP:]
    handle, partial = tempfile.mkstemp(dir=folder, prefix=".output.metrics.")
    with os.fdopen(handle, "w") as out:
        out.write("".join(line + "\n" for line in lines))
    os.replace(partial, path)


def _append(path: str, values: Mapping[str, float], step: int | None, env: Mapping[str, str]) -> None:
    """One JSON line in crosstrain's results file: the trial, its step, its metrics."""
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    entry: dict[str, Any] = {"trial": trial_id(env), "step": step, "time": time.time(), "metrics": dict(values)}
    try:
        with open(path) as existing:
            before = existing.read()
    except OSError:
        before = ""
    # Written whole, never appended to: a Unity Catalog volume (a Databricks trial's results file) takes no
    # appends through its FUSE mount, only files written from the start.
    with open(path, "w") as out:
        out.write(before + json.dumps(entry, sort_keys=True) + "\n")


def _say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        print("crosstrain: " + message, file=sys.stderr, flush=True)


def read_results(path: str, metric: str) -> dict[str, Any] | None:
    """The last report of `metric` in a results file (with its step), or None."""
    try:
        with open(path) as results:
            return last_report(results.read(), metric)
    except OSError:
        return None


def last_report(text: str, metric: str) -> dict[str, Any] | None:
    """The last report of `metric` in a results file's text (with its step), or None."""
    last = None
    for line in text.splitlines():
        try:
            entry = json.loads(line)
            if isinstance(entry, dict) and metric in (entry.get("metrics") or {}):
                last = {"value": float(entry["metrics"][metric]), "step": entry.get("step")}
        except (ValueError, TypeError, AttributeError):
            continue
    return last
