"""The local target's sweeps: each trial a local run of the job with its values, up to `parallel_trials` (and
this machine's cores) at a time, to the end; the best trial named.

Grid and random trials are chosen here (`crosstrain.sweep.trials`: the same for one spec on every machine). Each
trial runs as the job does locally, with `${sweep.NAME}` written as its value and `crosstrain.runtime.report`
writing to a results file of its own under `runs_dir`, which is read when the trial ends.
"""

from __future__ import annotations

import concurrent.futures
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crosstrain import sweep as sweeps
from crosstrain.records import HttpCall, JobHandle, JobState, Request

if TYPE_CHECKING:
    from crosstrain.backends.base import Ids
    from crosstrain.backends.local import LocalBackend, LocalSettings
    from crosstrain.spec import TrainingJob

SUPPORT = sweeps.SweepSupport(
    "local",
    frozenset({"grid", "random"}),
    why_not=(("bayesian", "crosstrain chooses local trials itself, by grid or at random, and has no optimiser"),),
    chosen_here=True,
)


def render(backend: LocalBackend, job: TrainingJob, settings: LocalSettings, ids: Ids) -> Request:
    """One local run per trial, each rendered as the job is; the sweep's metric, goal and limits beside them."""
    from crosstrain.backends.base import Ids

    sweep = job.sweep
    if sweep is None:
        raise ValueError("render takes a job with a sweep")
    folder = Path(os.path.expanduser(settings.runs_dir)).absolute() / "sweeps" / ids.identity
    runs: list[dict[str, Any]] = []
    first: Request | None = None
    for index, values in enumerate(sweeps.trials(sweep), 1):
        results = str(folder / f"trial-{index}.jsonl")
        trial = sweeps.for_trial(job, str(index), values, results)
        rendered = backend._render(trial, settings, None, Ids(f"{ids.identity}-t{index}", ids.fingerprint))
        first = first or rendered
        runs.append({"trial": index, "params": values, "results": results, "run": rendered.create.body})
    assert first is not None  # a sweep has at least one trial
    body = {
        "identity": ids.identity,
        "fingerprint": ids.fingerprint,
        "sweep": {
            "metric": sweep.metric,
            "goal": sweep.goal,
            "algorithm": sweep.algorithm,
            "parallel_trials": sweep.parallel_trials,
            "max_failed_trials": sweep.max_failed_trials,
            "trials": runs,
        },
    }
    note = (
        f"a sweep of {len(runs)} trials ({sweep.algorithm}), each a local run of the job, up to "
        f"{sweep.parallel_trials} at a time (and this machine's cores); each reports {sweep.metric} with "
        "crosstrain.runtime.report to its results file"
    )
    call = HttpCall("RUN", first.create.url, body, purpose="run every trial here, to the end, and name the best")
    return Request(backend.name, ids.identity, job.name, (call,), first.settings, (*first.notes, note), code=first.code)


def send(backend: LocalBackend, request: Request) -> JobHandle:
    """Run the trials, `parallel_trials` at a time (at most this machine's cores); stop starting new ones once more
    than `max_failed_trials` failed. The handle's outcome holds every trial and the best."""
    body = request.create.body
    spec = body["sweep"]
    workers = max(1, min(int(spec["parallel_trials"]), os.cpu_count() or 1))
    max_failed = spec.get("max_failed_trials")
    outcomes: dict[int, dict[str, Any]] = {}

    def one(trial: dict[str, Any]) -> dict[str, Any]:
        Path(trial["results"]).unlink(missing_ok=True)  # an earlier run's reports are not this one's
        call = HttpCall("RUN", request.create.url, trial["run"], purpose="one trial")
        sub = Request(
            backend.name, trial["run"]["identity"], request.job_name, (call,), request.settings, (), code=request.code
        )
        _say(f"trial {trial['trial']} of {len(spec['trials'])}: {_shown(trial['params'])}")
        handle = backend.send(sub)
        state = handle.status().state
        found = sweeps_results(trial["results"], spec["metric"])
        return {
            "trial": trial["trial"],
            "params": trial["params"],
            "state": state.value,
            "run_id": handle.job_id,
            **({"value": found["value"], "step": found["step"]} if found else {}),
        }

    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        pending = {pool.submit(one, trial): trial["trial"] for trial in spec["trials"]}
        for future in concurrent.futures.as_completed(pending):
            result = future.result()
            outcomes[result["trial"]] = result
            _say(
                f"trial {result['trial']} {result['state'].lower()}: "
                + (f"{spec['metric']} {result['value']:.6g}" if "value" in result else f"no {spec['metric']} reported")
            )
            failed = sum(1 for r in outcomes.values() if r["state"] != JobState.SUCCEEDED.value)
            if max_failed is not None and failed > max_failed:
                for other in pending:
                    other.cancel()
    trials = [outcomes[n] for n in sorted(outcomes)]
    best = sweeps.best(spec["goal"], trials)
    failed = sum(1 for r in trials if r["state"] != JobState.SUCCEEDED.value)
    stopped = len(spec["trials"]) - len(trials)
    state = JobState.FAILED if best is None or (max_failed is not None and failed > max_failed) else JobState.SUCCEEDED
    counts = f"{len(trials) - failed} of {len(spec['trials'])} trials succeeded" + (
        f", {stopped} not started (more than {max_failed} failed)" if stopped else ""
    )
    if best is not None:
        message = (
            f"best: trial {best['trial']} ({_shown(best['params'])}), {spec['metric']} {best['value']:.6g}; {counts}"
        )
    else:
        message = f"no trial reported {spec['metric']} (crosstrain.runtime.report); {counts}"
    _say(message)
    outcome = {
        "state": state.value,
        "message": message,
        "sweep": {"metric": spec["metric"], "goal": spec["goal"], "trials": trials, "best": best},
    }
    return JobHandle(
        backend.name, request.identity, f"sweep-{request.identity}", console_url="", ref={"outcome": outcome}
    )


def handle_file(request: Request) -> Path:
    """Where a sweep's handle is kept, beside its trials' results under `runs_dir/sweeps/` (`crosstrain list`)."""
    return Path(request.create.body["sweep"]["trials"][0]["results"]).parent / "handle.json"


def sweeps_results(path: str, metric: str) -> dict[str, Any] | None:
    from crosstrain.runtime.sweep import read_results

    return read_results(path, metric)


def _shown(params: dict[str, Any]) -> str:
    return ", ".join(f"{name}={sweeps.text(value)}" for name, value in params.items())


def _say(message: str) -> None:
    print(f"crosstrain: {message}", file=sys.stderr, flush=True)
