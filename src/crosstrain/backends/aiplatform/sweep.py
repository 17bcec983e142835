"""A sweep on AI Platform Training: `trainingInput.hyperparameters`, a `HyperparameterSpec` of the ml v1 API
(https://cloud.google.com/ai-platform/training/docs/reference/rest/v1/projects.jobs#HyperparameterSpec).

AI Platform runs each trial as the job itself, passing the trial's values as `--NAME=VALUE` arguments, and reads
the metric named by `hyperparameterMetricTag` from the hypertune metrics file (`crosstrain.runtime.report`). Its
early stopping (`enableTrialEarlyStopping`) is the service's own rule, with no policy to choose.
"""

from __future__ import annotations

from typing import Any

from crosstrain.sweep import Parameter, Sweep, SweepSupport

SUPPORT = SweepSupport(
    "AI Platform Training",
    frozenset({"grid", "random", "bayesian"}),
    policies=frozenset({"service"}),
    why_not=(("early_stopping", "it stops trials early by its own rule (enableTrialEarlyStopping), with no policy"),),
)

_ALGORITHMS = {"grid": "GRID_SEARCH", "random": "RANDOM_SEARCH"}  # bayesian: ALGORITHM_UNSPECIFIED, the default
_SCALES = {"linear": "UNIT_LINEAR_SCALE", "log": "UNIT_LOG_SCALE"}


def parameter_spec(name: str, parameter: Parameter) -> dict[str, Any]:
    """One `ParameterSpec`: a range with its scale, increasing discrete values, or categories."""
    spec: dict[str, Any] = {"parameterName": name, "type": parameter.type.upper()}
    if parameter.type in ("double", "integer"):
        spec["minValue"], spec["maxValue"] = parameter.min, parameter.max
        spec["scaleType"] = _SCALES[parameter.scale or "linear"]
    elif parameter.type == "discrete":
        spec["discreteValues"] = parameter.numbers  # "strictly increasing"
        if parameter.scale is not None:  # else left to the service
            spec["scaleType"] = _SCALES[parameter.scale]
    else:
        spec["categoricalValues"] = list(parameter.values or [])
    return spec


def hyperparameters(sweep: Sweep) -> dict[str, Any]:
    """The `HyperparameterSpec`."""
    spec: dict[str, Any] = {
        "goal": sweep.goal.upper(),
        "hyperparameterMetricTag": sweep.metric,
        "params": [parameter_spec(name, parameter) for name, parameter in sweep.parameters.items()],
        "maxTrials": sweep.trial_count,
        "maxParallelTrials": sweep.parallel_trials,
    }
    if sweep.max_failed_trials is not None:
        spec["maxFailedTrials"] = sweep.max_failed_trials
    if sweep.algorithm in _ALGORITHMS:
        spec["algorithm"] = _ALGORITHMS[sweep.algorithm]
    if sweep.early_stopping is not None:  # SUPPORT lets only `service` through
        spec["enableTrialEarlyStopping"] = True
    return spec


def note(sweep: Sweep) -> str:
    return (
        f"a hyperparameter tuning job: {sweep.trial_count} trials ({sweep.algorithm}"
        + (", AI Platform's default algorithm" if sweep.algorithm == "bayesian" else "")
        + f"), {sweep.parallel_trials} at a time; AI Platform appends --NAME=VALUE to the command and reads "
        f"{sweep.metric} from the hypertune file (crosstrain.runtime.report)"
    )


def trials_said(job: dict[str, Any]) -> str:
    """A tuning job's trials (`trainingOutput.trials`, each a `HyperparameterOutput`) as one line: how many in
    each state, and the best so far by the spec's goal, its hyperparameters and final objective value; "" for a
    job that is no tuning job."""
    outcome = trials_outcome(job)
    return str(outcome["message"]) if outcome else ""


def trials_outcome(job: dict[str, Any]) -> dict[str, Any] | None:
    """The tuning job's trials as status keeps them on the handle (`--json`, the notebook's table): each trial's
    state, hyperparameters and final objective value, the best so far, and the line `trials_said` says; None
    for a job that is no tuning job."""
    output = job.get("trainingOutput") or {}
    if not output.get("isHyperparameterTuningJob"):
        return None
    trials = [t for t in output.get("trials") or [] if isinstance(t, dict)]
    spec = (job.get("trainingInput") or {}).get("hyperparameters") or {}
    metric = str(output.get("hyperparameterMetricTag") or spec.get("hyperparameterMetricTag") or "the metric")
    states: dict[str, int] = {}
    results: list[dict[str, Any]] = []
    for trial in trials:
        state = str(trial.get("state", "STATE_UNSPECIFIED"))
        states[state] = states.get(state, 0) + 1
        result: dict[str, Any] = {
            "trial": trial.get("trialId"),
            "params": dict(sorted((trial.get("hyperparameters") or {}).items())),
            "state": state,
        }
        final = trial.get("finalMetric") or {}
        value = final.get("objectiveValue")
        if isinstance(value, (int, float)):
            result["value"] = float(value)
            if final.get("trainingStep") is not None:
                result["step"] = int(final["trainingStep"])
        results.append(result)
    counts = ", ".join(f"{n} {s.lower()}" for s, n in sorted(states.items()))
    said = [f"{len(trials)} trials" + (f" ({counts})" if counts else "")]
    measured = [r for r in results if "value" in r]
    goal = "maximize" if spec.get("goal") == "MAXIMIZE" else "minimize"
    best = (max if goal == "maximize" else min)(measured, key=lambda r: r["value"]) if measured else None
    if best is not None:
        values = ", ".join(f"{k}={v}" for k, v in best["params"].items())
        said.append(f"best: trial {best['trial']} ({values}), {metric} {best['value']:.6g}")
    sweep = {"metric": metric, "goal": goal, "trials": results, "best": best}
    return {"message": "; ".join(said), "sweep": sweep}
