"""Sweeps: one `sweep:` of a job, tuned on each platform's own service.

A job with `sweep:` is a hyperparameter tuning job: each trial runs the job with `${sweep.NAME}` in its command,
args and env values set to that trial's value of the parameter NAME, and reports the sweep's metric with
`crosstrain.runtime.report`. Vertex AI renders a HyperparameterTuningJob, AI Platform `trainingInput.hyperparameters`,
Azure ML a sweep job; Databricks and the local target run grid and random sweeps as one run per trial, whose
parameters are chosen here (`trials`). What a target's service lacks (an algorithm, a parameter type, an early
stopping policy) is refused with the reason, through its `Capabilities.sweeps` (`refusals`).

The spec side only: pydantic and the standard library (it is on the render path).
"""

from __future__ import annotations

import itertools
import math
import random
import re
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationError, field_validator, model_validator

from crosstrain.errors import Problem
from crosstrain.frozen import frozen
from crosstrain.spec_fields import Duration, SpecModel, error_at, invalid

#: `${sweep.NAME}` in a command word, an argument or an environment value.
SWEEP_REFERENCE = re.compile(r"\$\{sweep\.([^{}]*)\}")
_PARAMETER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
_METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]{0,127}")
#: A categorical value: one word in any shell line or argument, so a trial's value never needs quoting.
_CATEGORY = re.compile(r"[A-Za-z0-9_.:+-]{1,128}")
#: Most trials a sweep may ask for, and most values a grid may enumerate on a target that enumerates them here.
MAX_TRIALS = 10000
#: The environment variable naming a sweep's parameters on every node (comma-separated), so the node side knows
#: what to fill in (`crosstrain.runtime.sweep`).
PARAMS_ENV = "CROSSTRAIN_SWEEP"


class Parameter(SpecModel):
    """One hyperparameter: a range (`double`, `integer`) or a list of values (`discrete`: numbers, `categorical`:
    words). A list alone is short for `values:` (numbers: discrete, else categorical)."""

    type: Literal["double", "integer", "discrete", "categorical"] = Field(
        description="double or integer: a range from min to max; discrete: numbers; categorical: words."
    )
    min: float | None = Field(None, description="The range's lower end (double, integer).")
    max: float | None = Field(None, description="The range's upper end (double, integer).")
    scale: Literal["linear", "log"] | None = Field(
        None,
        description="How values are drawn and modelled: linear (a range's default), or log (above 0). A discrete "
        "parameter without one leaves it to the service.",
    )
    values: list[float] | list[str] | None = Field(
        None, description="The values tried (discrete: numbers; categorical: words), at most 1000."
    )

    @model_validator(mode="after")
    def _shape(self) -> Parameter:
        ranged = self.type in ("double", "integer")
        if ranged:
            if self.values is not None:
                raise invalid(
                    f"a {self.type} parameter is a range, not values", "remove `values`, or use type: discrete"
                )
            if self.min is None or self.max is None:
                raise invalid(f"a {self.type} parameter needs min and max", "add `min:` and `max:`")
            if not (math.isfinite(self.min) and math.isfinite(self.max)) or self.min >= self.max:
                raise invalid(f"min ({self.min}) must be below max ({self.max})", "give a range with min < max")
            if self.type == "integer" and (self.min != int(self.min) or self.max != int(self.max)):
                raise invalid("an integer parameter's min and max are whole numbers", "use whole numbers, or double")
            if self.scale == "log" and self.min <= 0:
                raise invalid("a log scale needs min above 0", "raise min above 0, or use scale: linear")
            if max(abs(self.min), abs(self.max)) > 1e300:
                raise invalid("the range is too large", "keep min and max within 1e300")
            return self
        if self.min is not None or self.max is not None:
            raise invalid(f"a {self.type} parameter is a list of values, not a range", "remove `min` and `max`")
        values = self.values or []
        if not values:
            raise invalid(f"a {self.type} parameter needs values", "list the values tried under `values:`")
        if len(values) > 1000:
            raise invalid(f"{len(values)} values are too many", "list at most 1000")
        if len(set(values)) != len(values):
            raise invalid("the values repeat", "list each value once")
        if self.type == "discrete":
            if not all(isinstance(v, float) and math.isfinite(v) for v in values):
                raise invalid("a discrete parameter's values are numbers", "use numbers, or type: categorical")
            if self.scale == "log" and min(self.numbers) <= 0:
                raise invalid("a log scale needs values above 0", "use scale: linear")
        else:
            bad = next((v for v in values if not isinstance(v, str) or not _CATEGORY.fullmatch(v)), None)
            if bad is not None:
                raise invalid(
                    f"{bad!r} is not a categorical value",
                    "use words of letters, digits and _ . : + - (a trial's value is one word of its command line)",
                )
            if self.scale is not None:
                raise invalid("a categorical parameter has no scale", "remove `scale`")
        return self

    @property
    def bounds(self) -> tuple[float, float]:
        """A range's min and max (the spec's check holds both for double and integer parameters)."""
        if self.min is None or self.max is None:
            raise ValueError(f"a {self.type} parameter has no range")
        return self.min, self.max

    @property
    def numbers(self) -> list[float]:
        """A discrete parameter's values, in increasing order (as AI Platform wants them)."""
        return sorted(float(v) for v in self.values or [])

    def grid(self) -> list[Any] | None:
        """Every value of the parameter a grid tries; None for a double range (no finite grid)."""
        if self.type == "double":
            return None
        if self.type == "integer":
            low, high = self.bounds
            return list(range(int(low), int(high) + 1))
        if self.type == "discrete":
            return [_number(v) for v in self.numbers]
        return list(self.values or [])

    def draw(self, rng: random.Random) -> Any:
        """One value at random, on the parameter's scale."""
        if self.type in ("discrete", "categorical"):
            return rng.choice(self.grid() or [])
        low, high = self.bounds
        log = self.scale == "log"
        value = math.exp(rng.uniform(math.log(low), math.log(high))) if log else rng.uniform(low, high)
        if self.type == "integer":
            return min(max(round(value), int(low)), int(high))
        return float(f"{min(max(value, low), high):.6g}")


def _parameter(value: Any) -> Any:
    """A list alone is the values: numbers make a discrete parameter, anything else a categorical one."""
    if isinstance(value, list):
        numeric = bool(value) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        return {"type": "discrete" if numeric else "categorical", "values": value}
    if isinstance(value, dict) and "type" not in value:
        if "values" in value:
            values = value["values"]
            numeric = isinstance(values, list) and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in values
            )
            return {**value, "type": "discrete" if numeric and values else "categorical"}
        if "min" in value or "max" in value:
            whole = all(isinstance(value.get(k), int) and not isinstance(value.get(k), bool) for k in ("min", "max"))
            return {**value, "type": "integer" if whole else "double"}
    return value


ParameterField = Annotated[
    Parameter,
    BeforeValidator(_parameter, json_schema_input_type=Parameter | list[float] | list[str]),
]


class EarlyStopping(SpecModel):
    """Stops trials that fall behind, by a policy the target's service offers."""

    policy: Literal["median", "bandit", "truncation", "service"] = Field(
        description="median: stop a trial below the median of the others (Vertex AI, Azure ML); bandit: outside "
        "a slack of the best (Azure ML); truncation: the worst percentage (Azure ML); service: the service's own "
        "rule (AI Platform)."
    )
    evaluation_interval: int | None = Field(None, ge=1, le=1000, description="Azure ML: how often it applies.")
    delay_evaluation: int | None = Field(None, ge=0, le=100000, description="Azure ML: intervals before the first.")
    slack_factor: float | None = Field(None, gt=0, le=100, description="bandit: the slack, as a ratio of the best.")
    truncation_percentage: int | None = Field(None, ge=1, le=99, description="truncation: the percentage stopped.")

    @model_validator(mode="after")
    def _fields(self) -> EarlyStopping:
        if self.slack_factor is not None and self.policy != "bandit":
            raise invalid("slack_factor belongs to the bandit policy", "remove it, or use policy: bandit")
        if self.truncation_percentage is not None and self.policy != "truncation":
            raise invalid("truncation_percentage belongs to the truncation policy", "remove it")
        if self.policy == "bandit" and self.slack_factor is None:
            raise invalid("the bandit policy needs slack_factor", "add slack_factor, e.g. 0.1")
        return self


def _early_stopping(value: Any) -> Any:
    if value is True:
        return {"policy": "service"}
    if isinstance(value, str):
        return {"policy": value}
    return value


class Sweep(SpecModel):
    """Hyperparameter tuning: trials of the job, each with its own values of `parameters`, to find the best
    value of `metric` (what each trial reports with `crosstrain.runtime.report`)."""

    parameters: dict[str, ParameterField] = Field(
        description="NAME: {type, min, max, scale} or NAME: [values]. `${sweep.NAME}` in command, args and env "
        "values is the trial's value."
    )
    metric: str = Field(description="The metric each trial reports and the sweep optimises, e.g. val_loss.")
    goal: Literal["minimize", "maximize"] = Field(description="Whether the best trial has the lowest or highest.")
    algorithm: Literal["grid", "random", "bayesian"] = Field(
        "random",
        description="grid: every combination; random: values drawn at random; bayesian: the service's own "
        "optimiser (Vertex AI's and AI Platform's default algorithm, Azure ML's Bayesian sampling).",
    )
    max_trials: int | None = Field(
        None, ge=1, le=MAX_TRIALS, description="Trials in all; a grid's size by default, else required."
    )
    parallel_trials: int = Field(1, ge=1, le=1000, description="Trials that run at once.")
    max_failed_trials: int | None = Field(
        None,
        ge=1,
        le=MAX_TRIALS,
        description="Failed trials after which the sweep stops; the service decides if unset.",
    )
    early_stopping: Annotated[
        EarlyStopping | None,
        BeforeValidator(_early_stopping, json_schema_input_type=EarlyStopping | bool | str | None),
    ] = None
    seed: int | None = Field(None, ge=0, le=2**31 - 1, description="Random sampling's seed, where one is taken.")
    timeout: Duration | None = Field(
        None, description="The whole sweep's time limit (Azure ML); each trial's is the job's scheduling.timeout."
    )

    @field_validator("parameters")
    @classmethod
    def _names(cls, value: dict[str, Parameter]) -> dict[str, Parameter]:
        if not value:
            raise invalid("a sweep needs parameters", "name at least one, e.g. lr: {min: 0.0001, max: 0.1, scale: log}")
        if len(value) > 100:
            raise invalid(f"{len(value)} parameters are too many", "sweep at most 100")
        for name in value:
            if not _PARAMETER_NAME.fullmatch(name):
                raise invalid(
                    f"{name!r} is not a parameter name",
                    "use letters, digits, '_' and '-', not starting with a digit (it is written ${sweep.NAME})",
                )
        variables = [value_env(name) for name in value]
        if len(set(variables)) != len(variables):
            raise invalid(
                "two parameter names differ only in '-' and '_'",
                "rename one: each is the variable CROSSTRAIN_SWEEP_NAME",
            )
        return value

    @field_validator("metric")
    @classmethod
    def _metric(cls, value: str) -> str:
        if not _METRIC_NAME.fullmatch(value):
            raise invalid(f"{value!r} is not a metric name", "use letters, digits and _ . / -, e.g. val_loss")
        return value

    @model_validator(mode="after")
    def _trials(self) -> Sweep:
        errors = []
        if self.algorithm == "grid":
            for name, parameter in self.parameters.items():
                if parameter.type == "double":
                    errors.append(
                        error_at(
                            ("parameters", name, "type"),
                            parameter.type,
                            "a grid tries every value, and a double range has no finite list of them",
                            "list the values (values: [...]), or use algorithm: random",
                        )
                    )
            size = self.grid_size()
            if not errors and self.max_trials is None and size > MAX_TRIALS:
                errors.append(
                    error_at(
                        ("max_trials",), None, f"the grid has {size} combinations", f"set max_trials (<= {MAX_TRIALS})"
                    )
                )
        elif self.max_trials is None:
            errors.append(
                error_at(("max_trials",), None, f"{self.algorithm} search needs a number of trials", "set max_trials")
            )
        if self.max_trials is not None and self.parallel_trials > self.max_trials:
            errors.append(
                error_at(
                    ("parallel_trials",),
                    self.parallel_trials,
                    f"{self.parallel_trials} parallel trials exceed max_trials ({self.max_trials})",
                    f"set parallel_trials to at most {self.max_trials}",
                )
            )
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

    def grid_size(self) -> int:
        size = 1
        for parameter in self.parameters.values():
            values = parameter.grid()
            size *= len(values) if values is not None else 0
            if size > 10**9:
                break
        return size

    @property
    def trial_count(self) -> int:
        """How many trials the sweep runs."""
        if self.max_trials is not None:
            return self.max_trials if self.algorithm != "grid" else min(self.max_trials, self.grid_size())
        return self.grid_size()


def value_env(name: str) -> str:
    """The variable that holds a parameter's value on a trial's nodes: `CROSSTRAIN_SWEEP_<NAME>`, '-' as '_'."""
    return f"{PARAMS_ENV}_{name.replace('-', '_')}"


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


def reference_problems(job: Any) -> list[Any]:
    """Errors (pydantic's) for every `${sweep.NAME}` that names no parameter of the job's sweep."""
    errors = []
    sweep: Sweep | None = job.sweep
    for path, text in job.reference_sites():
        for found in SWEEP_REFERENCE.finditer(text):
            if sweep is None:
                errors.append(
                    error_at(
                        path,
                        text,
                        f"{found[0]} names a sweep parameter, and the job has no sweep",
                        "add `sweep:` with the parameter, or remove the reference",
                    )
                )
            elif found[1] not in sweep.parameters:
                errors.append(
                    error_at(
                        path,
                        text,
                        f"{found[0]} names no parameter of the sweep",
                        f"use one of {', '.join(f'${{sweep.{n}}}' for n in sweep.parameters)}",
                    )
                )
    return errors


def referenced(job: Any) -> list[tuple[str, str]]:
    """(field path, parameter name) of every `${sweep.NAME}` in the job's commands, args and env values."""
    return [
        (_dotted(loc), found[1]) for loc, text_ in job.reference_sites() for found in SWEEP_REFERENCE.finditer(text_)
    ]


# -- what a target's service does with a sweep ------------------------------------------------------------------


@frozen
class SweepSupport:
    """What a target's tuning service takes: its algorithms (each with why another is missing), its parameter
    types, its early stopping policies, whether it stops a sweep after a number of failed trials, and whether it
    enumerates the trials itself (False: crosstrain chooses them, one run per trial)."""

    service: str
    algorithms: frozenset[str]
    policies: frozenset[str] = frozenset()
    max_failed: bool = True
    #: Whether the service stops a whole sweep after `sweep.timeout`.
    timeout: bool = False
    #: Why an algorithm (by name) or early stopping (`early_stopping`) is missing, where there is more to say.
    why_not: tuple[tuple[str, str], ...] = ()
    chosen_here: bool = False


def refusals(job: Any, support: SweepSupport | None, target: str) -> list[Problem]:
    """Why the job's sweep cannot run on `target`, per field."""
    sweep: Sweep | None = job.sweep
    if sweep is None:
        return []
    if support is None:
        return [
            Problem(
                "sweep",
                f"{target} has no hyperparameter tuning in crosstrain: no tuning service it renders for, and no "
                "trials it runs itself there yet",
                "remove `sweep:`, or use --target vertex, aiplatform, azureml, databricks, databricks-air or local",
            )
        ]
    why = dict(support.why_not)
    problems = []
    if sweep.algorithm not in support.algorithms:
        problems.append(
            Problem(
                "sweep.algorithm",
                f"{support.service} has no {sweep.algorithm} search"
                + (f": {why[sweep.algorithm]}" if sweep.algorithm in why else ""),
                f"use algorithm: {' or '.join(sorted(support.algorithms))}",
            )
        )
    stopping = sweep.early_stopping
    if stopping is not None and stopping.policy not in support.policies:
        problems.append(
            Problem(
                "sweep.early_stopping.policy",
                f"{support.service} has no {stopping.policy} early stopping"
                + (f": {why['early_stopping']}" if "early_stopping" in why else ""),
                f"use policy: {' or '.join(sorted(support.policies))}" if support.policies else "remove early_stopping",
            )
        )
    if sweep.max_failed_trials is not None and not support.max_failed:
        problems.append(
            Problem(
                "sweep.max_failed_trials",
                f"{support.service} does not stop a sweep after a number of failed trials",
                "remove max_failed_trials",
            )
        )
    if sweep.timeout is not None and not support.timeout:
        problems.append(
            Problem(
                "sweep.timeout",
                f"{support.service} has no time limit for a whole sweep",
                "remove sweep.timeout; each trial's limit is scheduling.timeout",
            )
        )
    if support.chosen_here and sweep.trial_count > 1000:
        problems.append(
            Problem(
                "sweep.max_trials",
                f"{target} runs one run per trial, and {sweep.trial_count} are more than 1000",
                "lower max_trials",
            )
        )
    return problems


def trials(sweep: Sweep, seed: int = 0) -> list[dict[str, Any]]:
    """The parameters of each trial, where crosstrain chooses them (grid or random): the same for one spec on
    every machine, so a re-submit sends the same runs."""
    if sweep.algorithm == "grid":
        names = list(sweep.parameters)
        grids = [sweep.parameters[name].grid() or [] for name in names]
        combos: Iterator[tuple[Any, ...]] = itertools.product(*grids)
        return [dict(zip(names, combo, strict=True)) for combo in itertools.islice(combos, sweep.trial_count)]
    rng = random.Random(sweep.seed if sweep.seed is not None else seed)
    return [{name: p.draw(rng) for name, p in sweep.parameters.items()} for _ in range(sweep.trial_count)]


def text(value: Any) -> str:
    """A parameter's value as a trial's command line has it."""
    if isinstance(value, float):
        return repr(value) if not value.is_integer() else str(int(value)) if abs(value) < 1e16 else repr(value)
    return str(value)


def filled(text_: str, values: Mapping[str, Any]) -> str:
    """`text_` with every `${sweep.NAME}` replaced by the trial's value."""
    return SWEEP_REFERENCE.sub(lambda found: text(values[found[1]]), text_)


def marked(job: Any, reference: Any = None) -> Any:
    """The job as a trial's nodes run it: `CROSSTRAIN_SWEEP` (the parameter names) in its env where it names a
    command, so the node side knows what to fill in (`crosstrain.runtime.params`), and where the service itself
    places values in the command (`reference(NAME)`, e.g. Azure ML's `${{search_space.NAME}}`), `${sweep.NAME}`
    in command words and args written that way."""
    sweep: Sweep | None = job.sweep
    if sweep is None:
        return job
    update: dict[str, Any] = {}
    if any(pool.command for pool in job.pools()):  # an image's own entrypoint reads no crosstrain variable
        update["env"] = {**job.env, PARAMS_ENV: ",".join(sweep.parameters)}
    if reference is not None:

        def fill(words: list[str] | None) -> list[str] | None:
            if words is None:
                return None
            return [SWEEP_REFERENCE.sub(lambda found: str(reference(found[1])), word) for word in words]

        update["command"], update["args"] = fill(job.command), fill(job.args)
        for role in ("primary", "workers", "parameter_servers", "evaluators"):
            pool = getattr(job, role)
            if pool is not None and (pool.command is not None or pool.args is not None):
                update[role] = _same_fields(pool, {"command": fill(pool.command), "args": fill(pool.args)})
    return _same_fields(job, update)


def _same_fields(model: Any, update: dict[str, Any]) -> Any:
    """`model` with `update`, its fields set as the user set them (as `crosstrain.data` places paths)."""
    filled = model.model_copy(update=update)
    object.__setattr__(filled, "__pydantic_fields_set__", set(model.model_fields_set))
    return filled


def needs_bootstrap(job: Any, platform: str, fields: tuple[str, ...] = ("command", "args", "env")) -> list[Problem]:
    """Where the service passes a trial's values to the program (Vertex AI's and AI Platform's appended
    arguments, Azure ML's variables) and crosstrain's bootstrap places them at `${sweep.NAME}`: a job that ships
    no code runs without the bootstrap, so each such reference is refused."""
    if job.sweep is None or job.code is not None or job.function_payload is not None:
        return []
    problems = []
    for loc, text_ in job.reference_sites():
        field = next(part for part in loc if part in ("command", "args", "env"))
        for found in SWEEP_REFERENCE.finditer(text_):
            if field not in fields:
                continue
            problems.append(
                Problem(
                    _dotted(loc),
                    f"{platform} passes a trial's values to the program itself, and crosstrain places them at "
                    f"{found[0]} where the job ships its code (crosstrain's bootstrap runs the command)",
                    f"ship the code (`code:`), or read the value in the program "
                    f"({_HOW_PASSED.get(platform, 'its arguments')})",
                )
            )
    return list(dict.fromkeys(problems))


def _dotted(loc: tuple[str | int, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


_HOW_PASSED = {
    "Vertex AI": "Vertex AI appends --NAME=VALUE to the command",
    "AI Platform": "AI Platform appends --NAME=VALUE to the command",
    "Azure ML": "the variable AZUREML_SWEEP_NAME",
}


#: The variables a trial run by crosstrain (locally, on Databricks) is given: its id and where it reports.
TRIAL_ENV = "CROSSTRAIN_TRIAL_ID"
RESULTS_ENV = "CROSSTRAIN_SWEEP_RESULTS"


def for_trial(job: Any, trial: str, values: Mapping[str, Any], results: str) -> Any:
    """The job one trial runs, where crosstrain runs each trial itself: `${sweep.NAME}` written as the trial's
    value in every command, argument and variable, the values in `CROSSTRAIN_SWEEP_<NAME>`, the trial's id and
    the results file `crosstrain.runtime.report` writes; no sweep of its own."""
    sweep: Sweep | None = job.sweep
    names = list(sweep.parameters) if sweep is not None else list(values)

    def fill_env(env: Mapping[str, Any]) -> dict[str, Any]:
        return {k: filled(v, values) if isinstance(v, str) else v for k, v in env.items()}

    def fill(words: list[str] | None) -> list[str] | None:
        return None if words is None else [filled(word, values) for word in words]

    env = {
        **fill_env(job.env),
        PARAMS_ENV: ",".join(names),
        **{value_env(name): text(value) for name, value in values.items()},
        TRIAL_ENV: trial,
        RESULTS_ENV: results,
    }
    update: dict[str, Any] = {"env": env, "command": fill(job.command), "args": fill(job.args), "sweep": None}
    for role in ("primary", "workers", "parameter_servers", "evaluators"):
        pool = getattr(job, role)
        if pool is not None:
            update[role] = _same_fields(
                pool, {"command": fill(pool.command), "args": fill(pool.args), "env": fill_env(pool.env)}
            )
    return _same_fields(job, update)


def best(goal: str, results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The trial with the best reported value (each result: `{"value": ...}` or without one), or None."""
    reported = [r for r in results if isinstance(r.get("value"), float) and math.isfinite(r["value"])]
    if not reported:
        return None
    pick = min if goal == "minimize" else max
    return pick(reported, key=lambda r: r["value"])


def listed(outcome: Mapping[str, Any]) -> dict[str, Any]:
    """A sweep's row of `list` (`JobSummary.sweep`) from the outcome its status keeps: how many trials, how many
    in each state, the line status says, and the best so far (None where none is known)."""
    trials = list((outcome.get("sweep") or {}).get("trials") or [])
    states: dict[str, int] = {}
    for trial in trials:
        states[str(trial.get("state"))] = states.get(str(trial.get("state")), 0) + 1
    best = (outcome.get("sweep") or {}).get("best")
    return {"trials": len(trials), "states": states, "summary": str(outcome.get("message") or ""), "best": best}
