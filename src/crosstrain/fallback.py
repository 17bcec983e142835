"""Fallback with one live job: a job's `fallback:` alternatives, tried in order, one live job per run.

The job as written is attempt 0 (the primary); alternative i is attempt i+1. Every attempt is rendered before
anything is sent, so a bad alternative fails first. A run has one identity (`run_key`: the job's `run_id`, else a
digest of every attempt's request), recorded on each attempt's job as the label `crosstrain-run` (and its index
as `crosstrain-attempt`); attempt k's own identity is `<name>-<run key>-<k>`, so a retried create of one attempt
never makes two jobs (each backend's exactly-once submit).

`submit` moves on from attempt k to k+1 only when attempt k is known not to be live:

* its create was refused for quota or capacity (and no job with its identity exists), or
* it was created and then failed for quota or capacity before it ran, or its wait for capacity expired
  (`scheduling.max_wait`: the service failed it, or it was still queued past that and crosstrain cancelled it
  and read it ended).

Any other failure (a bad request, a permission, an outcome left unknown by lost answers) stops the run with
its reason. Before creating anything, submit looks for every attempt of the run on its target: a live one is
adopted, an ended one is moved on from (where it ended for quota or capacity) or returned. Submits of one run
on this machine take turns (a lock file under `$CROSSTRAIN_STATE_DIR`, default ~/.cache/crosstrain/runs),
which also keeps why each attempt was passed over; submits of one run from two machines at once are not
serialised.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crosstrain.errors import (
    CrosstrainError,
    IdentityConflict,
    JobFailed,
    Problem,
    SpecError,
    SubmitError,
    TransientError,
    WaitTimeout,
)
from crosstrain.failures import passed_over_kind
from crosstrain.frozen import frozen
from crosstrain.records import JobHandle, JobState, JobStatus

if TYPE_CHECKING:
    from crosstrain.backends.base import Backend
    from crosstrain.records import Request
    from crosstrain.spec import TrainingJob

RUN_LABEL = "crosstrain-run"
ATTEMPT_LABEL = "crosstrain-attempt"
#: Why an attempt is passed over: the only reasons a run moves on.
MOVE_ON = ("quota", "capacity", "wait-expired")


def ended_kind(status: JobStatus) -> str | None:
    """Why an ended attempt moves the run on: it failed for quota or capacity (so before it ran), or its wait for
    capacity expired; None for any other end (success, a failure of its own, a cancel)."""
    if status.state is not JobState.FAILED:
        return None
    return passed_over_kind(f"{status.native_state} {status.message}")


@frozen
class Attempt:
    """One place the run may go: the job as it is sent there, with the settings over its own."""

    index: int
    target: str
    job: TrainingJob
    overrides: Mapping[str, Any]
    where: str

    @property
    def title(self) -> str:
        return f"attempt {self.index} ({self.where})"


@frozen
class PassedOver:
    attempt: int
    where: str
    kind: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "where": self.where, "kind": self.kind, "message": self.message[:500]}

    def __str__(self) -> str:
        return f"attempt {self.attempt} ({self.where}) passed over for {self.kind}: {self.message[:300]}"


class RunStopped(SubmitError):
    """The run stopped without a live attempt: every alternative was passed over, or one failed for a reason
    that does not move a run on (the error says which and what was passed over before it)."""

    def __init__(self, message: str, passed: list[PassedOver], *, job_may_exist: bool = False) -> None:
        lines = [message, *(f"  - {p}" for p in passed)]
        super().__init__("\n".join(lines), job_may_exist=job_may_exist)
        self.passed = list(passed)


def _machine_text(job: TrainingJob) -> str:
    machine = job.pools()[0].machine
    if machine is None:
        return ""
    gpu = machine.accelerator
    return f"{gpu.type}:{gpu.count}" if gpu else machine.type or ""


def _where(target: str, region: Any, job: TrainingJob) -> str:
    """An attempt in a few words: `vertex us-east1 A100:8`."""
    return " ".join(part for part in (target, str(region or ""), _machine_text(job)) if part)


def attempts(job: TrainingJob, target: str, overrides: Mapping[str, Any] | None = None) -> list[Attempt]:
    """The primary and each alternative, as the jobs they send (no run id or labels yet); a bad alternative is a
    `SpecError` at its field path."""
    from crosstrain.errors import UnknownBackend
    from crosstrain.registry import entries, get_backend_class

    base = job.model_copy(update={"fallback": []})
    problems: list[Problem] = []
    made: list[Attempt] = []
    for index, alt in enumerate([None, *job.fallback]):
        where = f"fallback[{index - 1}]"
        name = (alt.target if alt is not None else None) or target
        own: dict[str, Any] = dict(overrides or {}) if name == target else {}
        update: dict[str, Any] = {}
        if alt is not None:
            try:
                fields = get_backend_class(name).settings_model.model_fields
            except UnknownBackend:
                problems.append(
                    Problem(f"{where}.target", f"unknown target {name!r}", f"use one of {', '.join(entries())}")
                )
                continue
            except CrosstrainError:
                fields = {}
            if alt.region is not None:
                if fields and "region" not in fields:
                    problems.append(
                        Problem(
                            f"{where}.region",
                            f"{name} has no region setting",
                            f"say where with the alternative's settings (`crosstrain schema` lists {name}'s)",
                        )
                    )
                own["region"] = alt.region
            own.update(alt.settings)
            if alt.machine is not None:
                update["primary"] = base.primary.model_copy(update={"machine": alt.machine})
                if base.workers.machine is not None:
                    update["workers"] = base.workers.model_copy(update={"machine": alt.machine})
        sent = base.model_copy(update=update) if update else base
        made.append(Attempt(index, name, sent, own, _where(name, own.get("region"), sent)))
    if problems:
        raise SpecError(problems, headline="invalid fallback")
    return made


def _labelled(attempt: Attempt, key: str) -> TrainingJob:
    labels = {**attempt.job.labels, RUN_LABEL: key, ATTEMPT_LABEL: str(attempt.index)}
    return attempt.job.model_copy(update={"run_id": f"{key}-{attempt.index}", "labels": labels})


@dataclass
class Plan:
    """Every attempt of a run, rendered, with the backend that sends each."""

    key: str
    attempts: list[Attempt]
    backends: list[Backend[Any, Any]]
    requests: list[Request]


def plan(
    job: TrainingJob,
    target: str,
    overrides: Mapping[str, Any] | None = None,
    *,
    backend: Callable[[str], Backend[Any, Any]] | None = None,
) -> Plan:
    """Render every attempt (a probe with a placeholder run key first, whose fingerprints give the key where the
    job names no run id), so an alternative that cannot run fails before anything is sent."""
    from crosstrain.backends.base import fingerprint_of
    from crosstrain.registry import create_backend

    made = attempts(job, target, overrides)
    backends: list[Backend[Any, Any]] = []
    for attempt in made:
        same = next((b for a, b in zip(made, backends, strict=False) if a.target == attempt.target), None)
        backends.append(same or (backend or create_backend)(attempt.target))

    def render_all(key: str) -> list[Request]:
        problems: list[Problem] = []
        out: list[Request] = []
        for attempt, sender in zip(made, backends, strict=True):
            try:
                out.append(sender.render(_labelled(attempt, key), attempt.overrides))
            except SpecError as refused:
                if attempt.index == 0:
                    raise
                at = f"fallback[{attempt.index - 1}]"
                problems += [
                    Problem(f"{at}.{p.path}" if p.path else at, f"{attempt.where}: {p.message}", p.fix)
                    for p in refused.problems
                ]
        if problems:
            raise SpecError(problems, headline="an alternative of the job's fallback cannot run")
        return out

    key = job.run_id or fingerprint_of([r.fingerprint for r in render_all("0" * 10)])[:10]
    requests = render_all(key)
    said = [  # the region the request goes to, wherever it was set (the environment, the config file)
        dataclasses.replace(a, where=_where(a.target, r.settings.get("region"), a.job))
        for a, r in zip(made, requests, strict=True)
    ]
    return Plan(key, said, backends, requests)


def rendered(
    job: TrainingJob, target: str, overrides: Mapping[str, Any] | None = None, **kwargs: Any
) -> tuple[Backend[Any, Any], Request]:
    """What `render` shows of a job with `fallback:`: the primary's request, its notes saying the alternatives."""
    made = plan(job, target, overrides, **kwargs)
    notes = [
        f"fallback: {a.title} if those before it have no quota or capacity: identity {r.identity}"
        for a, r in zip(made.attempts[1:], made.requests[1:], strict=True)
    ]
    primary = dataclasses.replace(made.requests[0], notes=(*made.requests[0].notes, *notes))
    return made.backends[0], primary


def state_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    return Path(env.get("CROSSTRAIN_STATE_DIR") or os.path.expanduser("~/.cache/crosstrain/runs"))


_THREAD_LOCKS: dict[str, threading.Lock] = {}
_THREAD_LOCKS_LOCK = threading.Lock()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """This machine's turn at a run: a lock file (and a lock per process, where there is no flock)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _THREAD_LOCKS_LOCK:
        local = _THREAD_LOCKS.setdefault(str(path), threading.Lock())
    with local, open(path, "a+") as held:
        try:
            import fcntl
        except ImportError:  # Windows: submits of one run from two processes are not serialised
            yield
            return
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


@frozen
class Found:
    attempt: int
    handle: JobHandle
    status: JobStatus
    created: float


class Run:
    """One logical run of a job with `fallback:`: `submit` finds or starts its attempt, `wait` follows it and
    moves on when it is passed over, `status` reads it."""

    def __init__(
        self,
        job: TrainingJob,
        target: str,
        overrides: Mapping[str, Any] | None = None,
        *,
        backend: Callable[[str], Backend[Any, Any]] | None = None,
        environ: Mapping[str, str] | None = None,
        watch: float = 0.0,
        end_bound: float = 120.0,
        resends: int = 2,
        check: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`watch`: seconds submit follows a new attempt for a capacity failure before it returns (0: one status
        read). `end_bound`: how long to wait for a cancelled attempt to read ended before the run stops.
        `resends`: how many times an attempt whose create's outcome stayed unknown is sent again (exactly-once by
        its identity) before the run stops. `check`: each attempt's preflight (`crosstrain check`) is read before
        its create: quota or capacity there passes it over uncreated, any other failed check stops the run."""
        self.resends, self.check = resends, check
        self.job = job
        self.plan = plan(job, target, overrides, backend=backend)
        self.watch, self.end_bound, self.clock = watch, end_bound, clock
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", job.name)
        self._journal = state_dir(environ) / f"{slug}-{self.plan.key}.json"
        self.passed: list[PassedOver] = []
        self.handle: JobHandle | None = None
        self.current = -1
        self._since = 0.0
        self._ran = False  # whether the followed attempt was seen running (then no capacity failure moves on)

    # -- what is known of the run ------------------------------------------------------------------------
    def _read_journal(self) -> dict[int, PassedOver]:
        try:
            data = json.loads(self._journal.read_text())
        except (OSError, ValueError):
            return {}
        return {int(p["attempt"]): PassedOver(int(p["attempt"]), p["where"], p["kind"], p["message"]) for p in data}

    def _pass(self, attempt: Attempt, kind: str, message: str) -> None:
        passed = PassedOver(attempt.index, attempt.where, kind, message)
        self.passed = [p for p in self.passed if p.attempt != attempt.index] + [passed]
        known = self._read_journal() | {attempt.index: passed}
        partial = self._journal.with_name(f".{self._journal.name}.{os.getpid()}.{threading.get_ident()}")
        partial.write_text(json.dumps([known[k].to_dict() for k in sorted(known)]))
        os.replace(partial, self._journal)

    def _find(self, index: int) -> Found | None:
        backend, request = self.plan.backends[index], self.plan.requests[index]
        settings = dict(request.settings)
        summaries = backend.retry.poll(lambda: list(backend.list_jobs(settings)))
        summary = next((s for s in summaries if s.identity == request.identity and s.handle is not None), None)
        if summary is None or summary.handle is None:
            return None
        handle = summary.handle
        return Found(index, handle, backend.retry.poll(lambda: backend.status(handle)), summary.created)

    def survey(self) -> list[Found]:
        """Every attempt of this run that exists, on every alternative's target."""
        return [found for index in range(len(self.plan.attempts)) if (found := self._find(index)) is not None]

    # -- submit --------------------------------------------------------------------------------------------
    def submit(self) -> JobHandle:
        """The live attempt of the run (found, or started after passing over those before it), or the ended one
        where the run is over; `RunStopped` where nothing runs."""
        return self._submit_by(None)

    def _submit_by(self, until: float | None) -> JobHandle:
        """`submit`, its status reads bounded by `until` (a `wait`'s deadline) where there is one."""
        with _locked(self._journal.with_suffix(".lock")):
            return self._submit(until)

    def _submit(self, until: float | None) -> JobHandle:
        journal = self._read_journal()
        found = self.survey()
        live = [f for f in found if not f.status.state.terminal]
        if len(live) > 1:
            raise RunStopped(
                f"{len(live)} attempts of run {self.plan.key} are live (attempts "
                f"{', '.join(str(f.attempt) for f in live)}): cancel all but one",
                self.passed,
                job_may_exist=True,
            )
        start = 0
        self.passed = [journal[i] for i in sorted(journal)]
        if live or found:
            current = live[0] if live else max(found, key=lambda f: f.attempt)
            for index in range(current.attempt):
                if index not in journal:
                    self.passed.append(self._gone(index, found))
            self.passed = sorted(self.passed, key=lambda p: p.attempt)
            kind = None if live else ended_kind(current.status)
            if kind is None and current.status.state is JobState.CANCELLED and current.attempt in journal:
                kind = journal[current.attempt].kind  # cancelled by the run, when its wait expired
            if kind is None:
                return self._follow(current.attempt, current.handle, current.created, adopted=True)
            if current.attempt not in journal:
                self._pass(self.plan.attempts[current.attempt], kind, current.status.message)
            start = current.attempt + 1
        for attempt in self.plan.attempts[start:]:
            if self.check and not self._checked(attempt):
                continue
            handle = self._create(attempt)
            if handle is None:
                continue
            status = self._watch(attempt, until)
            kind = ended_kind(status) if status.state.terminal else None
            if kind is not None:
                self._pass(attempt, kind, status.message)
                continue
            if status.state.terminal or status.state is JobState.RUNNING or not self._expired():
                return self.handle or handle
            self._end(attempt, handle)
        raise RunStopped(f"run {self.plan.key}: every alternative was passed over", self.passed)

    def _gone(self, index: int, found: list[Found]) -> PassedOver:
        """Why an attempt before the current one was passed over, where this machine kept no note of it."""
        attempt = self.plan.attempts[index]
        there = next((f for f in found if f.attempt == index), None)
        if there is None:
            return PassedOver(index, attempt.where, "refused", "no job exists: its create was refused")
        return PassedOver(
            index, attempt.where, ended_kind(there.status) or there.status.state.value.lower(), there.status.message
        )

    def _checked(self, attempt: Attempt) -> bool:
        """Whether the attempt's preflight passes; False where it says quota or capacity (then the attempt is
        passed over, never created); `RunStopped` where it fails otherwise (a permission, a missing workspace)."""
        from crosstrain.preflight import Outcome

        backend = self.plan.backends[attempt.index]
        report = backend.check(_labelled(attempt, self.plan.key), attempt.overrides)
        failed = report.failed
        if not failed:
            return True
        if all(check.outcome in (Outcome.QUOTA, Outcome.CAPACITY) for check in failed):
            said = "; ".join(f"{check.name}: {check.message}" for check in failed)
            self._pass(attempt, failed[0].outcome.value, f"crosstrain check: {said}")
            return False
        raise RunStopped(
            f"run {self.plan.key}: the check of {attempt.title} failed, which does not move a run on, so no other "
            f"alternative was tried: {failed[0]}",
            self.passed,
        )

    def _create(self, attempt: Attempt) -> JobHandle | None:
        """The attempt's job (created, or found made already), or None where its create was refused for quota or
        capacity and no job of it exists."""
        backend, request = self.plan.backends[attempt.index], self.plan.requests[attempt.index]
        for resend in range(self.resends + 1):
            try:
                handle = backend.send(request)
                break
            except SubmitError as error:
                kind = passed_over_kind(str(error))
                if kind in ("quota", "capacity") and self._absent(attempt, error):
                    self._pass(attempt, kind, str(error))
                    return None
                again = error.job_may_exist or isinstance(error, TransientError)  # unknown, or refused for now
                if again and not isinstance(error, IdentityConflict) and resend < self.resends:
                    continue  # the same attempt again: its identity finds what an earlier send made
                stop = "its outcome is unknown" if error.job_may_exist else "that does not move a run on"
                raise RunStopped(
                    f"run {self.plan.key}: {attempt.title} failed and {stop}, so no other alternative was tried: "
                    f"{error}",
                    self.passed,
                    job_may_exist=error.job_may_exist,
                ) from error
        self._follow(attempt.index, handle, self.clock(), adopted=handle.adopted)
        return handle

    def _absent(self, attempt: Attempt, error: SubmitError) -> bool:
        """Whether a refused create left no job: the refusal proves it, or the platform, which dedupes a create
        by its identity, refused the identity and a look finds no job with it."""
        if not error.job_may_exist:
            return True
        if not self.plan.backends[attempt.index].capabilities.dedupes_create:
            return False
        try:
            return self._find(attempt.index) is None
        except CrosstrainError:
            return False

    def _follow(self, index: int, handle: JobHandle, since: float, *, adopted: bool) -> JobHandle:
        """`handle`, told the run's history (`ref["fallback"]`), as the handle the run follows now."""
        backend = self.plan.backends[index]
        attempts = [
            {"target": a.target, "where": a.where, "identity": r.identity}
            | ({"region": r.settings["region"]} if isinstance(r.settings.get("region"), str) else {})
            for a, r in zip(self.plan.attempts, self.plan.requests, strict=True)
        ]
        history = {
            "run": self.plan.key,
            "attempt": index,
            "attempts": attempts,
            "passed": [p.to_dict() for p in self.passed],
        }
        told = dataclasses.replace(handle, ref={**handle.ref, "fallback": history}, adopted=adopted, origin=None)
        self.handle, self.current, self._since, self._ran = backend.issue(told), index, since, False
        return self.handle

    def _expired(self) -> bool:
        """Whether the followed attempt has waited for capacity past the job's `scheduling.max_wait` (with a
        tenth more, so a service that ends it itself does so first)."""
        wait = self.job.scheduling.max_wait
        return wait is not None and self.clock() - self._since > wait * 1.1 + 1.0

    def _status(self, deadline: float | None = None, timeout: float | None = None) -> JobStatus:
        """The followed attempt's status, read by `deadline` where `wait` has one (of `timeout` seconds)."""
        from crosstrain.retry import by_deadline

        backend, handle = self.plan.backends[self.current], self.handle
        assert handle is not None

        def unanswered() -> WaitTimeout:
            return WaitTimeout(
                f"run {self.plan.key}: {backend.name} gave no whole answer to a status read of job "
                f"{handle.identity} within the {timeout:g}s given, so its state is unknown"
            )

        status = by_deadline(lambda: backend.retry.poll(lambda: backend.status(handle)), deadline, unanswered)
        self._ran = self._ran or status.state is JobState.RUNNING
        return status

    def _passed_over(self, status: JobStatus) -> bool:
        """Whether the followed attempt ended for a reason that moves the run on, before it ran."""
        return status.state.terminal and not self._ran and ended_kind(status) is not None

    def _watch(self, attempt: Attempt, until: float | None) -> JobStatus:
        """The new attempt's status, read until it ends or runs, or `watch` seconds pass (at most until `until`, a
        `wait`'s deadline, which bounds each read too); UNKNOWN where no read answered by it (the job exists: it is
        followed as it is)."""
        deadline = min(time.monotonic() + self.watch, until if until is not None else float("inf"))
        backend = self.plan.backends[attempt.index]
        while True:
            try:
                status = self._status(until, None if until is None else max(0.0, until - time.monotonic()))
            except WaitTimeout:
                return JobStatus(JobState.UNKNOWN, "", "no status read answered by the wait's deadline")
            if status.state.terminal or status.state is JobState.RUNNING or time.monotonic() >= deadline:
                return status
            if self._expired():
                return status
            backend.retry.sleep(min(0.5, max(0.0, deadline - time.monotonic())))

    def _end(self, attempt: Attempt, handle: JobHandle) -> None:
        """Cancel an attempt whose wait for capacity expired, and read it until it has ended (then it is passed
        over); where it cannot be read ended within `end_bound`, the run stops: no next attempt starts."""
        from crosstrain.retry import by_deadline

        backend = self.plan.backends[attempt.index]
        deadline = time.monotonic() + self.end_bound
        asked = False

        def unanswered() -> WaitTimeout:
            return WaitTimeout(f"{attempt.title} gave no whole answer to a status read within {self.end_bound:g}s")

        while True:
            if not asked:
                try:
                    backend.cancel(handle)
                    asked = True
                except CrosstrainError:
                    pass  # read, and ask again
            try:
                status = by_deadline(lambda: backend.retry.poll(lambda: backend.status(handle)), deadline, unanswered)
            except CrosstrainError:  # no answer, or not a whole one by the bound: read again, or stop at the bound
                status = None
            if status is not None and status.state.terminal:
                if status.state is not JobState.CANCELLED and ended_kind(status) is None:
                    raise RunStopped(
                        f"run {self.plan.key}: {attempt.title} ended {status.state.value} as it was cancelled",
                        self.passed,
                    )
                said = f"still queued after scheduling.max_wait, so crosstrain cancelled it ({status.native_state})"
                self._pass(attempt, "wait-expired", said)
                return
            if time.monotonic() >= deadline:
                raise RunStopped(
                    f"run {self.plan.key}: {attempt.title} waited past scheduling.max_wait and was cancelled, but it "
                    f"did not read ended within {self.end_bound:g}s, so no other alternative was tried",
                    self.passed,
                    job_may_exist=True,
                )
            if status is not None and status.state is not JobState.CANCELLING:
                asked = False  # the cancel may not have landed: ask again
            backend.retry.sleep(0.2)

    # -- follow --------------------------------------------------------------------------------------------
    @property
    def identity(self) -> str:
        return self.handle.identity if self.handle is not None else ""

    @property
    def console_url(self) -> str:
        return self.handle.console_url if self.handle is not None else ""

    @property
    def ref(self) -> Mapping[str, Any]:
        return self.handle.ref if self.handle is not None else {}

    def status(self) -> JobStatus:
        """The followed attempt's status (submitting first where nothing is followed yet)."""
        if self.handle is None:
            self.submit()
        return self._status()

    def wait(
        self,
        timeout: float | None = None,
        *,
        poll_interval: float = 1.0,
        max_interval: float = 30.0,
        progress: Callable[[JobStatus], None] | None = None,
        until_running: bool = False,
    ) -> JobStatus:
        """Follow the run until it ends (or, with `until_running`, until an attempt runs), moving on from an
        attempt passed over. Raises `JobFailed` where the run ends other than succeeded, `WaitTimeout` after
        `timeout`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        interval = poll_interval
        if self.handle is None:
            self._submit_by(deadline)
        while True:
            status = self._status(deadline, timeout)
            if progress is not None:
                progress(status)
            if until_running and status.state is JobState.RUNNING:
                return status
            expired = not status.state.terminal and status.state is not JobState.RUNNING and self._expired()
            if self._passed_over(status) or expired:
                if expired:
                    with _locked(self._journal.with_suffix(".lock")):
                        assert self.handle is not None
                        self._end(self.plan.attempts[self.current], self.handle)
                self._submit_by(deadline)  # passes the ended attempt over and starts the next, or says none is left
                interval = poll_interval
                continue
            if status.state.terminal:
                if status.state is not JobState.SUCCEEDED:
                    assert self.handle is not None
                    detail = f": {status.message}" if status.message else ""
                    raise JobFailed(f"job {self.handle.identity} ended {status.state.value}{detail}")
                return status
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"run {self.plan.key} is still {status.state.value} after {timeout:g}s")
            pause = interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic()))
            self.plan.backends[self.current].retry.sleep(pause)
            interval = min(interval * 1.5, max_interval)


def history(handle: JobHandle) -> list[str]:
    """What a handle of a run with `fallback:` says of it: which attempt it is, and why those before it were
    passed over (empty for a job without fallback)."""
    told = handle.ref.get("fallback") if isinstance(handle.ref, Mapping) else None
    if not isinstance(told, Mapping):
        return []
    attempts = told.get("attempts") or []
    index = told.get("attempt")
    lines = [
        f"run {told.get('run')}: following attempt {index} of {len(attempts)}"
        + (f" ({attempts[index]['where']})" if isinstance(index, int) and 0 <= index < len(attempts) else "")
    ]
    if isinstance(index, int) and index + 1 < len(attempts):
        lines[0] += "; a repeated `crosstrain submit` of the job moves on where this attempt is passed over"
    for passed in told.get("passed") or []:
        if isinstance(passed, Mapping):
            lines.append(
                f"attempt {passed.get('attempt')} ({passed.get('where')}) was passed over for {passed.get('kind')}: "
                f"{str(passed.get('message', ''))[:300]}"
            )
    return lines


def following(handle: JobHandle, *, config_profile: str | None = None, **settings: Any) -> JobHandle:
    """The attempt of a handle's run that is followed now: the latest attempt after the handle's own that exists
    (looked for on its target as this machine configures it, in the region the run chose: only its identity and
    region come from the handle), told why those before it were passed over; else `handle` itself. `settings`
    (`--set`) configure the handle's own target."""
    from crosstrain.registry import create_backend

    told = handle.ref.get("fallback") if isinstance(handle.ref, Mapping) else None
    if not isinstance(told, Mapping) or not isinstance(told.get("attempt"), int):
        return handle
    index, attempts = told["attempt"], told.get("attempts")
    if not isinstance(attempts, list):
        return handle
    for later in reversed(range(index + 1, len(attempts))):
        entry = attempts[later]
        if not (isinstance(entry, Mapping) and isinstance(entry.get("target"), str)):
            continue
        region = entry.get("region")
        try:
            own = dict(settings) if entry["target"] == handle.target else {}
            backend = create_backend(entry["target"], config_profile=config_profile, settings=own)
            overrides = {"region": region} if isinstance(region, str) else {}
            found = next((s for s in backend.list_jobs(overrides) if s.identity == entry.get("identity")), None)
        except CrosstrainError:
            continue  # not configured here for that target: the handle's own attempt is followed
        if found is None or found.handle is None:
            continue
        passed = [p for p in told.get("passed") or [] if isinstance(p, Mapping)]
        for skipped in range(index, later):
            where = attempts[skipped].get("where", "") if isinstance(attempts[skipped], Mapping) else ""
            said = "a later attempt of the run exists (`crosstrain submit` of the job again says which)"
            passed.append(
                {"attempt": skipped, "where": where, "kind": "quota, capacity or an expired wait", "message": said}
            )
        history = {**told, "attempt": later, "passed": passed}
        return dataclasses.replace(found.handle, ref={**found.handle.ref, "fallback": history})
    return handle
