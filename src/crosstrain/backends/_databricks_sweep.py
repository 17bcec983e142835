"""Sweeps on both Databricks targets: Databricks has no tuning service for runs, so crosstrain chooses the trials
(grid or random, `crosstrain.sweep.trials`: the same trials as the local target's, on every machine) and sends one
`runs/submit` per trial, each the job's own render with that trial's values placed, under one sweep identity.

Each trial's idempotency token is the sweep's identity and the trial's number (`trial_token`), so a re-submit of
the sweep (a retry, a second `submit`) starts no run twice. A trial reports its metric with
`crosstrain.runtime.report` to a results file under the job's `output_dir` (a Unity Catalog volume or DBFS, files
on every node), which status reads back through the Files API.

The render side imports no SDK; status reads through the workspace machinery of `_databricks`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from crosstrain import sweep as sweeps
from crosstrain.errors import CrosstrainError, Problem, SpecError
from crosstrain.records import HttpCall, JobHandle, JobState, JobStatus, JobSummary, Request

if TYPE_CHECKING:
    from databricks.sdk import WorkspaceClient
    from databricks.sdk.service.jobs import Run

    from crosstrain.backends._databricks import WorkspaceBackend, WorkspaceSettings
    from crosstrain.spec import TrainingJob

WHY = (
    "Databricks runs/submit has no tuning service: crosstrain chooses the trials itself, by grid or at random, "
    "and sends one run per trial"
)
SUPPORT = sweeps.SweepSupport(
    "Databricks",
    frozenset({"grid", "random"}),
    max_failed=False,
    why_not=(("bayesian", WHY), ("early_stopping", WHY)),
    chosen_here=True,
)
#: The longest idempotency_token runs/submit takes.
TOKEN_MAX = 64
SUBMIT_PATH = "/api/2.2/jobs/runs/submit"


def trial_token(identity: str, index: int) -> str:
    """The idempotency token of trial `index` of the sweep `identity`: the identity and `-t<index>`, with the
    identity shortened (its digest kept, so two sweeps never share a token) where both exceed 64 characters."""
    suffix = f"-t{index}"
    if len(identity) + len(suffix) <= TOKEN_MAX:
        return identity + suffix
    digest = hashlib.sha256(identity.encode()).hexdigest()[:8]
    return f"{identity[: TOKEN_MAX - len(suffix) - len(digest) - 1]}-{digest}{suffix}"


def is_submit(call: HttpCall) -> bool:
    return call.method == "POST" and call.url.endswith(SUBMIT_PATH)


def results_folder(output_dir: str | None, identity: str) -> tuple[str, str] | None:
    """Where the trials' results files are: (as the nodes see it, as the Files API reads it), under the job's
    output_dir on a Unity Catalog volume or DBFS; None where the job has no such output_dir."""
    if not output_dir:
        return None
    folder = output_dir.rstrip("/")
    if folder.startswith("/Volumes/"):
        node, read = folder, folder
    elif folder.startswith("dbfs:/"):
        node, read = "/dbfs/" + folder.removeprefix("dbfs:/").lstrip("/"), folder
    elif folder.startswith("/dbfs/"):
        node, read = folder, "dbfs:/" + folder.removeprefix("/dbfs/")
    else:
        return None
    return f"{node}/crosstrain-sweep/{identity}", f"{read}/crosstrain-sweep/{identity}"


def refusals(job: TrainingJob, settings: WorkspaceSettings) -> list[Problem]:
    """What a sweep cannot have on Databricks beyond its `Capabilities.sweeps`: a patch (it is one create call's,
    and a sweep sends one per trial)."""
    if job.sweep is None or settings.patch is None:
        return []
    return [
        Problem(
            "targets.patch",
            "a patch applies to one runs/submit body, and a sweep sends one per trial",
            "remove the patch, or submit each trial as a job of its own",
        )
    ]


def shown(params: dict[str, Any]) -> str:
    return ", ".join(f"{name}={sweeps.text(value)}" for name, value in params.items())


def _groups(calls: tuple[HttpCall, ...]) -> Iterator[tuple[HttpCall, ...]]:
    """A render's uploads in groups, each a check (GET or HEAD) and the calls it guards (skipped together)."""
    group: list[HttpCall] = []
    for call in calls:
        if call.method in ("GET", "HEAD") and group:
            yield tuple(group)
            group = []
        group.append(call)
    if group:
        yield tuple(group)


def render(backend: WorkspaceBackend[Any, Any], job: TrainingJob, settings: Any, ids: Any) -> Request:
    """One runs/submit per trial, each the job's own render of that trial (its values placed, its results file
    named), after the uploads of every trial, each upload once (the code archive is the same for all)."""
    from crosstrain.backends.base import Ids

    sweep = job.sweep
    if sweep is None:
        raise ValueError("render takes a job with a sweep")
    folder = results_folder(job.output_dir, ids.identity)
    chosen = sweeps.trials(sweep)
    uploads: dict[str, tuple[HttpCall, ...]] = {}
    submits: list[HttpCall] = []
    trials: list[dict[str, Any]] = []
    first: Request | None = None
    for index, values in enumerate(chosen, 1):
        token = trial_token(ids.identity, index)
        node, read = (f"{folder[0]}/trial-{index}.jsonl", f"{folder[1]}/trial-{index}.jsonl") if folder else ("", "")
        trial = sweeps.for_trial(job, str(index), values, node)
        rendered = backend._render(trial, settings, backend.plan(trial, settings), Ids(token, ids.fingerprint))
        first = first or rendered
        for group in _groups(rendered.calls[:-1]):
            uploads.setdefault(json.dumps([c.to_dict() for c in group], sort_keys=True), group)
        said = shown(values)
        body = {**rendered.create.body, "run_name": f"{job.name} trial {index}: {said}"}
        purpose = f"trial {index} of {len(chosen)} ({said}): {rendered.create.purpose}"
        submits.append(dataclasses.replace(rendered.create, body=body, purpose=purpose))
        trials.append({"trial": index, "params": values, "token": token, "results": read})
    assert first is not None  # a sweep has at least one trial
    note = (
        f"a sweep of {len(chosen)} trials ({sweep.algorithm}, chosen by crosstrain: {WHY.split(': ')[0]}), each "
        f"its own one-time run whose idempotency token is the sweep's identity and the trial's number; submit "
        f"sends the first {sweep.parallel_trials} (parallel_trials), and status and wait send each next one as a "
        "trial ends (its token: never twice); nothing sends them while neither runs: `crosstrain wait` drives "
        "the sweep to its end"
    )
    if folder:
        note += f"; each reports {sweep.metric} with crosstrain.runtime.report to {folder[1]}/trial-N.jsonl"
    else:
        note += (
            f"; the trials' {sweep.metric} is not read back: set output_dir to a Unity Catalog volume "
            "(/Volumes/...) or dbfs:/ for crosstrain.runtime.report's results files"
        )
    calls = tuple(call for group in uploads.values() for call in group) + tuple(submits)
    spec = {
        "metric": sweep.metric,
        "goal": sweep.goal,
        "algorithm": sweep.algorithm,
        "parallel_trials": sweep.parallel_trials,
        "trials": trials,
    }
    return dataclasses.replace(first, identity=ids.identity, calls=calls, notes=(note, *first.notes), sweep=spec)


def check_runs(request: Request, arguments: list[dict[str, Any]]) -> None:
    """The request's trials are the runs it sends, each by its idempotency token (checked before any upload)."""
    trials = list((request.sweep or {}).get("trials") or [])
    tokens = [kwargs.get("idempotency_token") for kwargs in arguments]
    if tokens != [trial.get("token") for trial in trials]:  # each trial deduped by the token its run is sent with
        raise SpecError(
            [
                Problem(
                    "sweep.trials",
                    f"the request's trials ({len(trials)}) are not the runs it sends ({len(arguments)}), each by its "
                    "idempotency token",
                    "render the sweep again instead of editing its runs",
                )
            ]
        )


def _submit(
    backend: WorkspaceBackend[Any, Any], w: WorkspaceClient, trial: dict[str, Any], kwargs: dict[str, Any]
) -> Run:
    """Send trial's runs/submit (its token dedupes a retry, a re-submit and a status that sends it again) and
    read its run back."""
    from crosstrain.adaptors import databricks as adaptor
    from crosstrain.errors import SubmitError

    def submit() -> Any:
        return adaptor.call(lambda: w.jobs.submit(**kwargs), "runs/submit")

    waiter = backend.retry.create(submit, dedupes=backend.capabilities.dedupes_create, identity=trial["token"])
    run_id = int(waiter.run_id)
    try:
        return backend._read_run(w, run_id)
    except SubmitError as error:
        raise SubmitError(
            f"trial {trial['trial']}'s run {run_id} was submitted with token {trial['token']}, but reading it "
            f"back failed: {error}. Submit the same sweep again to adopt its runs (each token returns its run)",
            job_may_exist=True,
        ) from error


def send(
    backend: WorkspaceBackend[Any, Any],
    request: Request,
    w: WorkspaceClient,
    host: str,
    profile: str | None,
    arguments: list[dict[str, Any]],
) -> JobHandle:
    """Submit the first `parallel_trials` trials once each (a token dedupes a retry and a re-submit), read each
    back, and check it was made by this request. The handle holds every trial: the sent ones' runs, and the
    pending ones' runs/submit bodies, which status and wait send as trials end."""
    spec = dict(request.sweep or {})
    trials = [dict(t) for t in spec.get("trials") or []]
    bodies = [call.body for call in request.calls if is_submit(call)]
    parallel = int(spec.get("parallel_trials") or len(trials))  # a request rendered before: all at once
    console = ""
    for index, (trial, kwargs, body) in enumerate(zip(trials, arguments, bodies, strict=True)):
        if index >= parallel:
            trial["submit"] = body
            continue
        run = _submit(backend, w, trial, kwargs)
        recorded = backend.recorded(run)
        if recorded is not None:
            backend.check_same_request(request, recorded.fingerprint, f"run {run.run_id} on {host}")
        trial["run_id"] = int(run.run_id or 0)
        console = console or run.run_page_url or ""
    ref = {
        "host": host,
        "profile": profile,
        "run_id": trials[0]["run_id"],
        "sweep": {
            "metric": spec.get("metric"),
            "goal": spec.get("goal"),
            "parallel_trials": parallel,
            "trials": trials,
        },
    }
    return backend.issue(
        JobHandle(
            backend.name, request.identity, f"sweep-{request.identity}", console_url=console, ref=ref, adopted=False
        )
    )


def _send_pending(backend: WorkspaceBackend[Any, Any], w: WorkspaceClient, identity: str, trial: dict[str, Any]) -> Run:
    """Send a pending trial: the runs/submit body the handle holds, under the trial's own token only (the sweep's
    identity and the trial's number: so it is never run twice), to the handle's host (checked before the client
    was made)."""
    from crosstrain.adaptors import databricks as adaptor

    body, token = trial.get("submit"), trial_token(identity, int(trial.get("trial") or 0))
    if not isinstance(body, dict) or not body.get("idempotency_token") == trial.get("token") == token:
        raise SpecError(
            [
                Problem(
                    f"handle.ref.sweep.trials[{trial.get('trial')}]",
                    "a pending trial's runs/submit must carry the trial's own idempotency token",
                    "submit the sweep again (each trial's token returns its run)",
                )
            ]
        )
    run = _submit(backend, w, trial, adaptor.submit_arguments(body))
    recorded = backend.recorded(run)
    if recorded is not None and recorded.identity and recorded.identity != trial["token"]:
        raise SpecError(
            [
                Problem(
                    f"handle.ref.sweep.trials[{trial.get('trial')}]",
                    f"run {run.run_id} records identity {recorded.identity}, not the trial's {trial['token']}",
                    "submit the sweep again",
                )
            ]
        )
    trial["run_id"] = int(run.run_id or 0)
    del trial["submit"]
    return run


def _reported(backend: WorkspaceBackend[Any, Any], w: WorkspaceClient, location: str, metric: str) -> Any:
    from crosstrain.runtime.sweep import last_report

    if not location:
        return None
    files, path = backend._files_at(w, location)
    try:
        size = files.size(path)
        if not size:
            return None
        return last_report(files.chunk(path, 0, min(size, 16 * 1024 * 1024)).decode("utf-8", "replace"), metric)
    except CrosstrainError:  # the metric is an aid: the trial's state stands without it
        return None


def status(backend: WorkspaceBackend[Any, Any], handle: JobHandle) -> JobStatus:
    """Every trial's state, parameters and metric (where it reported one), and the best so far; kept on the
    handle as its outcome (`--json`). Where fewer than `parallel_trials` sent trials are still going, the next
    pending trials are sent (each under its own token: a status read again, or elsewhere, sends none twice),
    unless a trial was cancelled (the sweep is stopped)."""
    w = backend._handle_client(handle)
    spec = handle.ref["sweep"]
    metric, goal = str(spec.get("metric") or ""), str(spec.get("goal") or "")
    trials = list(spec.get("trials") or [])
    parallel = int(spec.get("parallel_trials") or len(trials))
    runs = {int(t["run_id"]): backend._read_run(w, int(t["run_id"])) for t in trials if "run_id" in t}
    states = {run_id: backend.run_state(run) for run_id, run in runs.items()}
    stopped = bool(spec.get("cancelled")) or any(s[0] is JobState.CANCELLED for s in states.values())
    going = sum(1 for s in states.values() if not s[0].terminal)
    for trial in trials:
        if stopped or going >= parallel:
            break
        if "run_id" not in trial:
            run = _send_pending(backend, w, handle.identity, trial)
            runs[int(trial["run_id"])] = run
            states[int(trial["run_id"])] = backend.run_state(run)
            going += 1
    results: list[dict[str, Any]] = []
    for trial in trials:
        if "run_id" not in trial:
            results.append({"trial": trial["trial"], "params": trial["params"], "state": "PENDING"})
            continue
        state, native, _ = states[int(trial["run_id"])]
        found = _reported(backend, w, str(trial.get("results") or ""), metric) if metric else None
        results.append(
            {
                "trial": trial["trial"],
                "params": trial["params"],
                "state": state.value,
                "native_state": native,
                "run_id": trial["run_id"],
                **({"value": found["value"], "step": found["step"]} if found else {}),
            }
        )
    best = sweeps.best(goal, results)
    sent = [JobState(r["state"]) for r in results if r["state"] != "PENDING"]
    pending = [r["trial"] for r in results if r["state"] == "PENDING"]
    counts = {s: sent.count(s) for s in JobState if s in sent}
    said = ", ".join(f"{n} {s.value.lower()}" for s, n in counts.items())
    if pending:
        why = "never sent: the sweep was cancelled" if stopped else f"sent as trials end, {parallel} at a time"
        said += f", {len(pending)} pending ({why})"
    if not all(s.terminal for s in sent) or (pending and not stopped):
        state = JobState.RUNNING if JobState.RUNNING in sent else JobState.QUEUED
    elif JobState.CANCELLED in sent and best is None:
        state = JobState.CANCELLED
    else:
        state = JobState.SUCCEEDED if best is not None else JobState.FAILED
    message = f"{len(results)} trials: {said}"
    if best is not None:
        which = "best" if state.terminal else "best so far"
        message += f"; {which}: trial {best['trial']} ({shown(best['params'])}), {metric} {best['value']:.6g}"
    elif state.terminal and not metric:
        message += "; the metric is read with the handle submit wrote (this one, from list, does not name it)"
    elif state.terminal:
        message += f"; no trial reported {metric} (crosstrain.runtime.report, with output_dir on a volume)"
    if isinstance(handle.ref, dict):  # what `status --json` prints, and the notebook's table of trials
        handle.ref["outcome"] = {
            "state": state.value,
            "message": message,
            "sweep": {"metric": metric, "goal": goal, "trials": results, "best": best, "pending": pending},
        }
    return JobStatus(state, f"{len(results)} trials", message)


def cancel(backend: WorkspaceBackend[Any, Any], handle: JobHandle) -> None:
    """Cancel every sent trial's run (a run that ended stays as it is); no pending trial is sent after it (a
    cancelled trial stops the sweep, wherever its status is read)."""
    from functools import partial

    w = backend._handle_client(handle)
    handle.ref["sweep"]["cancelled"] = True
    for trial in handle.ref["sweep"].get("trials") or []:
        if "run_id" not in trial:
            continue
        run_id = int(trial["run_id"])
        backend._safe_call(partial(w.jobs.cancel_run, run_id), f"runs/cancel {run_id}")


def logs(
    backend: WorkspaceBackend[Any, Any],
    handle: JobHandle,
    read: Callable[[JobHandle], Iterator[str]],
) -> Iterator[str]:
    """Every sent trial's logs in trial order (`read`: the backend's own logs of one run), each line tagged
    `[trial N]`; a pending trial is said to be pending. With follow, each trial's lines until it ends."""
    backend.check_handle(handle)
    for trial in handle.ref["sweep"].get("trials") or []:
        tag = f"[trial {trial['trial']}] "
        if "run_id" not in trial:
            yield f"{tag}[crosstrain: pending: not sent yet ({shown(trial['params'])})]"
            continue
        ref = {key: handle.ref[key] for key in ("host", "profile") if key in handle.ref}
        one = JobHandle(
            backend.name, trial["token"], str(trial["run_id"]), handle.console_url, {**ref, "run_id": trial["run_id"]}
        )
        if backend.is_issued(handle):  # a run of a handle this backend made (and checked) is its too
            one = backend.issue(one)
        yield from (tag + line for line in read(one))


_TRIAL_NAME = re.compile(r" trial (?P<trial>\d+): (?P<said>.*)$")
_TRIAL_TOKEN = re.compile(r"^(?P<sweep>.+)-t(?P<trial>\d+)$")


def trial_of(run: Run, identity: str) -> tuple[str, int, dict[str, str]] | None:
    """(the sweep's identity, the trial's number, its values as its run's name says them) of a trial's run:
    its identity is `<sweep>-t<N>` and its name `<job> trial N: NAME=VALUE, ...`; None for a job's run."""
    token, named = _TRIAL_TOKEN.match(identity), _TRIAL_NAME.search(run.run_name or "")
    if token is None or named is None or token["trial"] != named["trial"]:
        return None
    values = dict(part.partition("=")[::2] for part in named["said"].split(", ") if "=" in part)
    return token["sweep"], int(token["trial"]), values


def listed(
    backend: WorkspaceBackend[Any, Any],
    host: str,
    profile: str | None,
    trials: list[tuple[Run, str, int, dict[str, str]]],
) -> JobSummary:
    """One sweep's row of `list`, from its trials' runs (newest first, as listed): its state from theirs, how
    many per state, and a handle whose status reads every trial (the metric is on the handle submit wrote: the
    runs do not say it, so the best is not known here). Pending trials have no run, so are not seen."""
    ordered = sorted(trials, key=lambda item: item[2])
    identity = _TRIAL_TOKEN.match(ordered[0][1])["sweep"]  # type: ignore[index]
    states = [backend.run_state(run)[0] for run, *_ in ordered]
    counts = {s.value: states.count(s) for s in JobState if s in states}
    said = ", ".join(f"{n} {s.lower()}" for s, n in counts.items())
    if not all(s.terminal for s in states):
        state = JobState.RUNNING if JobState.RUNNING in states else JobState.QUEUED
    elif all(s is JobState.CANCELLED for s in states):
        state = JobState.CANCELLED
    else:
        state = JobState.SUCCEEDED if JobState.SUCCEEDED in states else JobState.FAILED
    first = ordered[0][0]
    ref = {
        "host": host,
        "profile": profile,
        "run_id": first.run_id,
        "sweep": {
            "metric": None,
            "goal": None,
            "trials": [
                {"trial": n, "params": values, "token": token, "results": "", "run_id": run.run_id}
                for run, token, n, values in ordered
            ],
        },
    }
    console = first.run_page_url or ""
    handle = JobHandle(backend.name, identity, f"sweep-{identity}", console_url=console, ref=ref)
    summary = f"{len(ordered)} trials: {said}"
    sweep = {"trials": len(ordered), "states": counts, "summary": summary, "best": None}
    created = min((run.start_time or 0) for run, *_ in ordered) / 1000
    return JobSummary(identity, state, summary, created, console, handle, sweep=sweep)
