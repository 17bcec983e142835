"""A sweep on Vertex AI: a HyperparameterTuningJob whose trials run the job's own CustomJobSpec.

Fields from google.cloud.aiplatform_v1's `HyperparameterTuningJob` and `StudySpec`
(https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.hyperparameterTuningJobs). Vertex AI
passes a trial's values to every pool as `--NAME=VALUE` arguments appended to its command
(https://cloud.google.com/vertex-ai/docs/training/using-hyperparameter-tuning), which crosstrain's bootstrap places
where the job writes `${sweep.NAME}`; a trial reports its metric through the hypertune metrics file
(`crosstrain.runtime.report`).
"""

from __future__ import annotations

from typing import Any

from crosstrain.sweep import Parameter, Sweep, SweepSupport

SUPPORT = SweepSupport(
    "Vertex AI",
    frozenset({"grid", "random", "bayesian"}),
    policies=frozenset({"median"}),
    why_not=(
        (
            "early_stopping",
            "its automated stopping compares a trial with the median of the others (decay-curve and convex "
            "stopping are not offered by crosstrain)",
        ),
    ),
)

_ALGORITHMS = {"grid": "GRID_SEARCH", "random": "RANDOM_SEARCH"}  # bayesian: ALGORITHM_UNSPECIFIED, the default
_SCALES = {"linear": "UNIT_LINEAR_SCALE", "log": "UNIT_LOG_SCALE"}


def parameter_spec(name: str, parameter: Parameter) -> dict[str, Any]:
    """One `StudySpec.ParameterSpec`, as the SDK's `hyperparameter_tuning` classes build it."""
    spec: dict[str, Any] = {"parameterId": name}
    if parameter.type == "double":
        spec["doubleValueSpec"] = {"minValue": parameter.min, "maxValue": parameter.max}
    elif parameter.type == "integer":
        low, high = parameter.bounds
        spec["integerValueSpec"] = {"minValue": str(int(low)), "maxValue": str(int(high))}
    elif parameter.type == "discrete":
        spec["discreteValueSpec"] = {"values": parameter.numbers}
    else:
        spec["categoricalValueSpec"] = {"values": list(parameter.values or [])}
    if parameter.type in ("double", "integer"):
        spec["scaleType"] = _SCALES[parameter.scale or "linear"]
    elif parameter.type == "discrete" and parameter.scale is not None:  # else SCALE_TYPE_UNSPECIFIED
        spec["scaleType"] = _SCALES[parameter.scale]
    return spec


def study_spec(sweep: Sweep) -> dict[str, Any]:
    """The `StudySpec`: the metric and its goal, the parameters, the algorithm, early stopping."""
    spec: dict[str, Any] = {
        "metrics": [{"metricId": sweep.metric, "goal": sweep.goal.upper()}],
        "parameters": [parameter_spec(name, parameter) for name, parameter in sweep.parameters.items()],
        "measurementSelectionType": "BEST_MEASUREMENT",
    }
    if sweep.algorithm in _ALGORITHMS:
        spec["algorithm"] = _ALGORITHMS[sweep.algorithm]
    if sweep.early_stopping is not None:  # SUPPORT lets only `median` through
        spec["medianAutomatedStoppingSpec"] = {}
    return spec


def tuning_body(sweep: Sweep, name: str, labels: dict[str, str], job_spec: dict[str, Any]) -> dict[str, Any]:
    """The HyperparameterTuningJob: the study, the trial limits, and the job's own spec for every trial."""
    body: dict[str, Any] = {
        "displayName": name,
        "labels": labels,
        "studySpec": study_spec(sweep),
        "maxTrialCount": sweep.trial_count,
        "parallelTrialCount": sweep.parallel_trials,
        "trialJobSpec": job_spec,
    }
    if sweep.max_failed_trials is not None:
        body["maxFailedTrialCount"] = sweep.max_failed_trials
    return body


def notes(sweep: Sweep, reducer: bool) -> list[str]:
    """What the render says of the sweep."""
    said = [
        f"a hyperparameter tuning job: {sweep.trial_count} trials ({sweep.algorithm}"
        + (", Vertex AI's default algorithm" if sweep.algorithm == "bayesian" else "")
        + f"), {sweep.parallel_trials} at a time, each a CustomJob of the job's pools; Vertex AI appends "
        "--NAME=VALUE to each pool's arguments and reads the metric from the hypertune file "
        "(crosstrain.runtime.report)"
    ]
    if reducer:
        said.append(
            "the trials carry the reduction server's pool: Vertex AI's schema takes it in a trial's spec, and its "
            "documentation does not say whether tuning trials run it"
        )
    return said


def trials_said(job: Any) -> str:
    """A HyperparameterTuningJob's trials as one line: how many in each state, and the best so far (its
    parameters and final metric), with the job's error where it has one."""
    return str(trials_outcome(job)["message"])


def trials_outcome(job: Any) -> dict[str, Any]:
    """The tuning job's trials as status keeps them on the handle (`--json`, the notebook's table): each trial's
    state, parameters and final metric, the best so far, and the line `trials_said` says."""
    trials = list(getattr(job, "trials", []) or [])
    metric_spec = job.study_spec.metrics[0] if job.study_spec.metrics else None
    goal = metric_spec.goal.name if metric_spec is not None else "MINIMIZE"
    metric = metric_spec.metric_id if metric_spec is not None else ""
    states: dict[str, int] = {}
    results: list[dict[str, Any]] = []
    for trial in trials:
        states[trial.state.name] = states.get(trial.state.name, 0) + 1
        result: dict[str, Any] = {
            "trial": trial.id,
            "params": {p.parameter_id: p.value for p in trial.parameters},
            "state": trial.state.name,
        }
        metrics = list(trial.final_measurement.metrics)
        if metrics:
            result.update(value=float(metrics[0].value), step=int(trial.final_measurement.step_count))
        results.append(result)
    said = [
        f"{len(trials)} trials"
        + (f" ({', '.join(f'{n} {s.lower()}' for s, n in sorted(states.items()))})" if states else "")
    ]
    measured = [r for r in results if "value" in r]
    best = (max if goal == "MAXIMIZE" else min)(measured, key=lambda r: r["value"]) if measured else None
    if best is not None:
        values = ", ".join(f"{name}={_value(value)}" for name, value in best["params"].items())
        said.append(f"best: trial {best['trial']} ({values}), {metric} {best['value']:.6g}")
    if job.error.message:
        said.append(job.error.message)
    sweep = {"metric": metric, "goal": goal.lower(), "trials": results, "best": best}
    return {"message": "; ".join(said), "sweep": sweep}


def _value(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def listed(job: Any) -> dict[str, Any]:
    """The tuning job's row of `list`: its trials by state and the best so far."""
    from crosstrain.sweep import listed as row

    return row(trials_outcome(job))
