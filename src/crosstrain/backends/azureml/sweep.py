"""A sweep on Azure ML: a sweep job (REST `jobType: Sweep`) whose trial is the job's command with its
distribution, as azure-ai-ml's `command(...).sweep(...)` sends it
(https://learn.microsoft.com/azure/machine-learning/how-to-tune-hyperparameters).

The service writes a trial's values into its command (`${{search_space.NAME}}`, what `${sweep.NAME}` becomes) and
its variables (`AZUREML_SWEEP_NAME`); a trial reports its metric to MLflow (`crosstrain.runtime.report`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from crosstrain.backends.azureml.wire import iso_duration, seconds_of
from crosstrain.errors import Problem
from crosstrain.records import Request
from crosstrain.sweep import Parameter, Sweep, SweepSupport, needs_bootstrap

SUPPORT = SweepSupport(
    "Azure ML",
    frozenset({"grid", "random", "bayesian"}),
    policies=frozenset({"median", "bandit", "truncation"}),
    max_failed=False,
    timeout=True,
    why_not=(("early_stopping", "its sweep jobs stop trials by a bandit, median or truncation policy"),),
)

_ALGORITHMS = {"grid": "Grid", "random": "Random", "bayesian": "Bayesian"}
#: Most values a `choice` of an integer range lists.
_CHOICES = 1000


def reference(name: str) -> str:
    """What `${sweep.NAME}` becomes in a trial's command: the service writes the value there."""
    return f"${{{{search_space.{name}}}}}"


def refusals(job: Any) -> list[Problem]:
    """What Azure ML's sweep jobs cannot say of the job's sweep, per field."""
    sweep: Sweep | None = job.sweep
    if sweep is None:
        return []
    problems = needs_bootstrap(job, "Azure ML", fields=("env",))
    for name, parameter in sweep.parameters.items():
        at = f"sweep.parameters.{name}"
        if "-" in name:
            problems.append(
                Problem(
                    at,
                    "Azure ML names a search space's parameters as its command's inputs: letters, digits and '_'",
                    f"rename it, e.g. {name.replace('-', '_')}",
                )
            )
        if parameter.type == "integer":
            low, high = parameter.bounds
            span = int(high) - int(low) + 1
            if span > _CHOICES and not (parameter.min == 0 and parameter.scale != "log"):
                problems.append(
                    Problem(
                        at,
                        f"Azure ML draws integers from a list (choice, here {span} values: more than {_CHOICES}) or "
                        "from 0 up (randint)",
                        f"narrow the range to {_CHOICES} values, start it at 0, or use type: double",
                    )
                )
            elif parameter.scale == "log" and sweep.algorithm != "grid":
                problems.append(
                    Problem(
                        f"{at}.scale",
                        "Azure ML has no log scale for integers (its qloguniform returns floats)",
                        "use scale: linear, list the values, or use type: double",
                    )
                )
        if sweep.algorithm == "bayesian" and parameter.type == "double" and parameter.scale == "log":
            problems.append(
                Problem(
                    f"{at}.scale",
                    "Azure ML's Bayesian sampling takes choice, uniform and quniform only, not loguniform",
                    "use scale: linear, or algorithm: random",
                )
            )
    if sweep.algorithm == "bayesian" and sweep.early_stopping is not None:
        problems.append(
            Problem(
                "sweep.early_stopping",
                "Azure ML's Bayesian sampling has no early termination",
                "remove early_stopping, or use algorithm: random",
            )
        )
    return problems


def search_space(sweep: Sweep) -> dict[str, Any]:
    """The REST `searchSpace`: each parameter as `[distribution, [arguments]]`."""
    space: dict[str, Any] = {}
    for name, parameter in sweep.parameters.items():
        space[name] = _distribution(parameter, sweep.algorithm)
    return space


def _distribution(parameter: Parameter, algorithm: str) -> list[Any]:
    if parameter.type == "double":
        low, high = parameter.bounds
        if parameter.scale == "log":  # loguniform's bounds are exponents: exp(uniform(min, max))
            return ["loguniform", [math.log(low), math.log(high)]]
        return ["uniform", [low, high]]
    values = parameter.grid() or []
    if parameter.type == "integer" and len(values) > _CHOICES:  # refusals let only 0..upper through
        return ["randint", [len(values)]]
    return ["choice", [values]]


def sweep_properties(command: dict[str, Any], sweep: Sweep) -> dict[str, Any]:
    """The sweep job's properties from the command job's: the trial is the command, its code, environment,
    variables, distribution and resources; the job's own fields stay on the sweep."""
    trial_keys = ("command", "codeId", "environmentId", "environmentVariables", "distribution", "resources")
    trial = {key: command[key] for key in trial_keys if key in command}
    properties = {key: value for key, value in command.items() if key not in trial_keys and key != "limits"}
    properties["jobType"] = "Sweep"
    algorithm: dict[str, Any] = {"samplingAlgorithmType": _ALGORITHMS[sweep.algorithm]}
    if sweep.algorithm == "random" and sweep.seed is not None:
        algorithm["seed"] = sweep.seed
    limits: dict[str, Any] = {
        "jobLimitsType": "Sweep",
        "maxTotalTrials": sweep.trial_count,
        "maxConcurrentTrials": sweep.parallel_trials,
    }
    if sweep.timeout is not None:
        limits["timeout"] = iso_duration(sweep.timeout)
    timeout = (command.get("limits") or {}).get("timeout")
    if timeout:
        limits["trialTimeout"] = timeout
    properties.update(
        {
            "samplingAlgorithm": algorithm,
            "searchSpace": search_space(sweep),
            "objective": {"goal": sweep.goal, "primaryMetric": sweep.metric},  # lowercase, as azure-ai-ml sends it
            "limits": limits,
            "trial": trial,
        }
    )
    stopping = sweep.early_stopping
    if stopping is not None:
        policy: dict[str, Any] = {
            "policyType": {"median": "MedianStopping", "bandit": "Bandit", "truncation": "TruncationSelection"}[
                stopping.policy
            ],
            "evaluationInterval": stopping.evaluation_interval or 1,
            "delayEvaluation": stopping.delay_evaluation or 0,
        }
        if stopping.slack_factor is not None:
            policy["slackFactor"] = stopping.slack_factor
        if stopping.truncation_percentage is not None:
            policy["truncationPercentage"] = stopping.truncation_percentage
        properties["earlyTermination"] = policy
    return properties


def sweep_yaml(command: dict[str, Any], properties: dict[str, Any]) -> dict[str, Any]:
    """The CLI v2 YAML of the sweep job, from the command job's YAML and the sweep's REST properties."""
    trial_keys = ("command", "code", "environment", "environment_variables", "distribution", "resources")
    out = {key: value for key, value in command.items() if key not in trial_keys and key != "limits"}
    out["$schema"] = "https://azuremlschemas.azureedge.net/latest/sweepJob.schema.json"
    out["type"] = "sweep"
    out["trial"] = {key: command[key] for key in trial_keys if key in command}
    space: dict[str, Any] = {}
    for name, (kind, arguments) in properties["searchSpace"].items():
        if kind == "choice":
            space[name] = {"type": "choice", "values": arguments[0]}
        elif kind == "randint":
            space[name] = {"type": "randint", "upper": arguments[0]}
        else:
            space[name] = {"type": kind, "min_value": arguments[0], "max_value": arguments[1]}
    out["search_space"] = space
    algorithm = properties["samplingAlgorithm"]
    kind = algorithm["samplingAlgorithmType"].lower()
    out["sampling_algorithm"] = {"type": kind, "seed": algorithm["seed"]} if "seed" in algorithm else kind
    objective = properties["objective"]
    out["objective"] = {"goal": objective["goal"].lower(), "primary_metric": objective["primaryMetric"]}
    limits = properties["limits"]
    out["limits"] = {
        "max_total_trials": limits["maxTotalTrials"],
        "max_concurrent_trials": limits["maxConcurrentTrials"],
    }
    if "trialTimeout" in limits:
        out["limits"]["trial_timeout"] = (command.get("limits") or {}).get("timeout")
    if "timeout" in limits:
        out["limits"]["timeout"] = seconds_of(limits["timeout"])
    policy = properties.get("earlyTermination")
    if policy:
        names = {"MedianStopping": "median_stopping", "Bandit": "bandit", "TruncationSelection": "truncation_selection"}
        out["early_termination"] = {
            "type": names[policy["policyType"]],
            "evaluation_interval": policy["evaluationInterval"],
            "delay_evaluation": policy["delayEvaluation"],
            **({"slack_factor": policy["slackFactor"]} if "slackFactor" in policy else {}),
            **({"truncation_percentage": policy["truncationPercentage"]} if "truncationPercentage" in policy else {}),
        }
    return out


def note(sweep: Sweep) -> str:
    return (
        f"a sweep job: {sweep.trial_count} trials ({sweep.algorithm} sampling), {sweep.parallel_trials} at a time, "
        f"each the job's command; Azure ML writes the trial's values at ${{{{search_space.NAME}}}} and in "
        f"AZUREML_SWEEP_NAME, and reads {sweep.metric} from MLflow (crosstrain.runtime.report: the environment "
        "needs mlflow and azureml-mlflow)"
    )


def as_command(request: Request) -> Request:
    """The request with its sweep job's trial as a command job: what its YAML form starts from."""
    props = request.create.body["properties"]
    sweep_keys = ("samplingAlgorithm", "searchSpace", "objective", "limits", "trial", "earlyTermination")
    command = {key: value for key, value in props.items() if key not in sweep_keys}
    command.update(props.get("trial") or {})
    command["jobType"] = "Command"
    timeout = (props.get("limits") or {}).get("trialTimeout")
    if timeout:
        command["limits"] = {"jobLimitsType": "Command", "timeout": timeout}
    create = dataclasses.replace(request.create, body={**request.create.body, "properties": command})
    return dataclasses.replace(request, calls=(*request.calls[:-1], create))
