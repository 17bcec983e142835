"""The plain records every layer passes around: `HttpCall` and `Request` (what submit will send), `JobState`,
`JobStatus` and `JobSummary` (what a platform says of a job), and `JobHandle` (a submitted job, which a CI step
saves as text and a later step loads)."""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Any

from crosstrain.errors import Problem, SpecError
from crosstrain.frozen import frozen
from crosstrain.safe import redact

if TYPE_CHECKING:
    from crosstrain.backends.base import Backend
    from crosstrain.packaging import CodeRef
    from crosstrain.pricing import Cost


# Headers that carry credentials never appear in a rendered request (Azure ML's x-azureml-token: the submitter's
# token, which submit adds to a user-identity job's PUT).
CREDENTIAL_HEADERS = frozenset({"authorization", "x-api-key", "cookie", "proxy-authorization", "x-azureml-token"})


@frozen
class HttpCall:
    """One HTTP call that submit will make, as the platform receives it (credentials left out)."""

    method: str
    url: str
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    purpose: str = ""

    def __post_init__(self) -> None:
        leaked = CREDENTIAL_HEADERS & {h.lower() for h in self.headers}
        if leaked:
            raise ValueError(f"a rendered request must not carry credentials ({', '.join(sorted(leaked))})")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method, "url": self.url}
        if self.headers:
            out["headers"] = dict(self.headers)
        if self.body is not None:
            out["body"] = self.body
        if self.purpose:
            out["purpose"] = self.purpose
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HttpCall:
        return cls(data["method"], data["url"], data.get("body"), data.get("headers") or {}, data.get("purpose", ""))


@frozen
class Request:
    """Everything submit will send for one job on one target. The create call comes last."""

    target: str
    identity: str
    job_name: str
    calls: tuple[HttpCall, ...]
    settings: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    #: A digest of what this request asks the platform for, identity left out; recorded on the job, so a
    #: different request under the same identity is refused instead of silently adopting the old job.
    fingerprint: str = ""
    #: The local folder the calls upload, and its digest at render (not part of the fingerprint: the digest
    #: is, in the calls' destinations).
    code: CodeRef | None = None
    #: The local folder the calls upload as an image's build context (Azure ML builds an environment from it), and
    #: its digest at render; outside the fingerprint as `code` is (its digest is in the calls).
    build_context: CodeRef | None = None
    #: The local files and folders the calls upload as the job's data inputs (Azure ML uploads them to the
    #: workspace's blob store), by input name, and their digests at render; outside the fingerprint as `code` is.
    inputs: Mapping[str, CodeRef] = field(default_factory=dict)
    #: Where a function job's rank 0 leaves what the function returned (`JobHandle.result` reads it there).
    result_at: str = ""
    #: What the job costs per hour and at most, as the render priced it; not sent, not in `to_dict` (a request
    #: file is what is sent): `render --json` shows it beside the request (`with_cost`). A request read back
    #: from such a file keeps what it said as `cost_said`, data shown again and never acted on.
    cost: Cost | None = field(default=None, compare=False)
    cost_said: Mapping[str, Any] | None = field(default=None, compare=False)
    #: A sweep whose trials crosstrain chooses and sends as one create call each (Databricks): its metric, goal and
    #: each trial's number, parameters, identity and results file; None for a job.
    sweep: Mapping[str, Any] | None = None

    @property
    def create(self) -> HttpCall:
        return self.calls[-1]

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "identity": self.identity,
            "fingerprint": self.fingerprint,
            "job_name": self.job_name,
            "settings": dict(self.settings),
            "calls": [c.to_dict() for c in self.calls],
            "notes": list(self.notes),
            **({"code": self.code.to_dict()} if self.code else {}),
            **({"build_context": self.build_context.to_dict()} if self.build_context else {}),
            **({"inputs": {name: ref.to_dict() for name, ref in self.inputs.items()}} if self.inputs else {}),
            **({"result_at": self.result_at} if self.result_at else {}),
            **({"sweep": dict(self.sweep)} if self.sweep is not None else {}),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False)

    def with_cost(self) -> dict[str, Any]:
        """The request as `render --json` prints it: `to_dict`, and its cost (None where the target prices
        nothing)."""
        cost = self.cost.to_dict() if self.cost is not None else self.cost_said
        return {**self.to_dict(), "cost": dict(cost) if cost is not None else None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Request:
        return cls(
            target=data["target"],
            identity=data["identity"],
            job_name=data["job_name"],
            calls=tuple(HttpCall.from_dict(c) for c in data["calls"]),
            settings=dict(data.get("settings") or {}),
            notes=tuple(data.get("notes") or ()),
            fingerprint=str(data.get("fingerprint") or ""),
            code=_code_ref(data.get("code")),
            build_context=_code_ref(data.get("build_context")),
            inputs={str(n): ref for n, r in (data.get("inputs") or {}).items() if (ref := _code_ref(r)) is not None},
            result_at=str(data.get("result_at") or ""),
            cost_said=data["cost"] if isinstance(data.get("cost"), Mapping) else None,
            sweep=dict(data["sweep"]) if isinstance(data.get("sweep"), Mapping) else None,
        )

    def _repr_html_(self) -> str:
        from crosstrain.display import request_html

        return request_html(self)


class JobState(str, enum.Enum):
    """The common state of a job on any platform; `JobStatus.native_state` keeps the platform's own."""

    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLING = "CANCELLING"
    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"

    @property
    def terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


@frozen
class JobStatus:
    state: JobState
    native_state: str
    message: str = ""

    def __post_init__(self) -> None:
        """The message is the platform's (its state message, the run's error and trace): no credential it echoes
        is kept."""
        object.__setattr__(self, "message", redact(self.message))

    def to_dict(self) -> dict[str, str]:
        return {"state": self.state.value, "native_state": self.native_state, "message": self.message}


@frozen
class JobSummary:
    """One job crosstrain made on a target, as `crosstrain list` shows it."""

    identity: str
    state: JobState
    native_state: str
    created: float  # seconds since the epoch
    console_url: str = ""
    handle: JobHandle | None = None  # what `status`/`wait`/`logs` take, where the listing gives enough to make one
    #: A sweep's row: `trials` (how many the listing saw), `states` (trials per state), `summary` (in words) and
    #: `best` (the best trial so far, where the listing knows it); None for a job.
    sweep: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "identity": self.identity,
            "state": self.state.value,
            "native_state": self.native_state,
            "created": self.created,
            "console_url": self.console_url,
            "handle": self.handle.dumps() if self.handle else None,
            **({"sweep": dict(self.sweep)} if self.sweep is not None else {}),
        }


@frozen
class JobHandle:
    """A submitted job. `str(handle)` is a one-line JSON that `JobHandle.loads` reads back in a later process."""

    target: str
    identity: str
    job_id: str
    console_url: str = ""
    ref: Mapping[str, Any] = field(default_factory=dict)
    adopted: bool = field(default=False, compare=False)
    #: The backend whose `send` made this handle (never saved): its verbs go through it, which trusts what it
    #: made from the job's own settings. A handle loaded from text has none and is checked.
    origin: Backend[Any, Any] | None = field(default=None, compare=False, repr=False)
    #: Where a function job's result is left (`result()`); empty for a command's job.
    result_at: str = ""
    #: crosstrain's seal on `result_at`, for this user on this machine (`crosstrain.seal`): whether `result()`
    #: may unpickle what is there without being told the handle is trusted.
    result_seal: str = field(default="", compare=False)

    def dumps(self) -> str:
        data = {
            "target": self.target,
            "identity": self.identity,
            "job_id": self.job_id,
            "console_url": self.console_url,
            "ref": dict(self.ref),
            **({"result_at": self.result_at} if self.result_at else {}),
            **({"result_seal": self.result_seal} if self.result_seal else {}),
        }
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    __str__ = dumps

    @classmethod
    def loads(cls, text: str) -> JobHandle:
        """Read a handle back, within `untrusted.HANDLE`'s limits; also takes the object `submit --json` prints.
        Anything else is a `SpecError` naming the field, before any backend is created."""
        from crosstrain import untrusted
        from crosstrain.errors import MissingDependency, UnknownBackend
        from crosstrain.registry import entries, get_backend_class

        fix = "pass the line `crosstrain submit` printed, or the file it was saved to"

        def bad(path: str, message: str, hint: str = fix) -> SpecError:
            return SpecError([Problem(path, message, hint)], headline="invalid job handle")

        data: Any = None
        for _ in range(2):  # a handle, or `submit --json`'s object holding one under "handle"
            try:
                data = untrusted.parse_json(text, untrusted.HANDLE, None)
            except untrusted.NotJSON as exc:
                raise bad(
                    "handle", f"not JSON ({untrusted.cut(str(exc), 80)}): {untrusted.excerpt(text.strip())}"
                ) from None
            if isinstance(data, dict) and isinstance(data.get("handle"), str):
                text = data["handle"]
                continue
            break
        if not isinstance(data, dict):
            kind = "null" if data is None else type(data).__name__
            raise bad("handle", f"a handle is a JSON object, not {kind}: {untrusted.excerpt(text.strip())}")
        optional = ("console_url", "result_at", "result_seal")
        for key, limit in (("target", 64), ("identity", 1024), ("job_id", 1024), *((key, 4096) for key in optional)):
            if key not in data:
                if key in optional:
                    continue
                raise bad(f"handle.{key}", "missing")
            value = data[key]
            if not isinstance(value, str) or (not value and key not in optional):
                raise bad(f"handle.{key}", f"must be a non-empty string, not {untrusted.excerpt(value)}")
            if len(value) > limit:
                raise bad(f"handle.{key}", f"longer than {limit:,} characters: {untrusted.excerpt(value)}")
        ref = data.get("ref")
        if ref is not None and not isinstance(ref, dict):
            raise bad("handle.ref", f"must be a JSON object, not {untrusted.excerpt(ref)}")
        try:
            backend = get_backend_class(data["target"])
        except UnknownBackend:
            known = ", ".join(sorted(entries()))
            raise bad(
                "handle.target", f"unknown target {untrusted.excerpt(data['target'])}", f"use one of {known}"
            ) from None
        except MissingDependency:
            pass  # using the handle says which package to install
        else:
            for field_name, expected in backend.handle_ref.items():
                value = (ref or {}).get(field_name)
                if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
                    got = "missing" if value is None else f"not {untrusted.excerpt(value)}"
                    raise bad(
                        f"handle.ref.{field_name}", f"{data['target']} needs {field_name}: a {_kind(expected)}, {got}"
                    )
        return cls(
            data["target"],
            data["identity"],
            data["job_id"],
            data.get("console_url", ""),
            ref or {},
            result_at=data.get("result_at", ""),
            result_seal=data.get("result_seal", ""),
        )

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled without its origin (a backend holds clients and locks): as a loaded handle."""
        fields = (self.target, self.identity, self.job_id, self.console_url, dict(self.ref), self.adopted)
        return (JobHandle, (*fields, None, self.result_at, self.result_seal))

    def of(self, request: Request) -> JobHandle:
        """This handle, told where the request's function job leaves its result (sealed: made here)."""
        if not request.result_at:
            return self
        from crosstrain.seal import seal

        mark = seal(*self._sealed(request.result_at))
        return dataclasses.replace(self, result_at=request.result_at, result_seal=mark)

    def _sealed(self, result_at: str) -> tuple[str, ...]:
        return (self.target, self.identity, self.job_id, result_at)

    def _trusted(self) -> bool:
        """Whether crosstrain sealed this handle's result location for this user (on this machine)."""
        from crosstrain.seal import verifies

        return verifies(self.result_seal, *self._sealed(self.result_at))

    def _backend(self, settings: Mapping[str, Any], config_profile: str | None = None) -> Backend[Any, Any]:
        """The origin backend, or a new one configured with `settings` (e.g. `host="https://..."`: what this
        machine is configured for, which the handle must match; the environment and the config file, in its
        profile `config_profile`, fill the rest)."""
        if self.origin is not None and not settings and config_profile is None:
            return self.origin
        from crosstrain.registry import create_backend, get_backend_class

        if not settings:
            return create_backend(self.target, config_profile=config_profile)
        binding = get_backend_class(self.target).binding_settings
        unknown = sorted(set(settings) - set(binding))
        if unknown:
            raise SpecError(
                [
                    Problem(
                        f"--set {unknown[0]}",
                        f"a {self.target} handle takes only the settings that say where it may be sent"
                        + (f" ({', '.join(binding)})" if binding else ": none"),
                        "leave the others out; they were fixed when the job was submitted",
                    )
                ]
            )
        return create_backend(self.target, settings=settings, config_profile=config_profile)

    def status(self, *, config_profile: str | None = None, **settings: Any) -> JobStatus:
        return self._backend(settings, config_profile).status(self)

    def wait(
        self,
        timeout: float | None = None,
        *,
        poll_interval: float = 1.0,
        progress: Callable[[JobStatus], None] | None = None,
        config_profile: str | None = None,
        **settings: Any,
    ) -> JobStatus:
        """Poll until the job ends (starting at `poll_interval`, backing off to 30 s). `progress` sees every
        status read; by default, in a notebook, a display updates in place."""
        if progress is None and "ipykernel" in sys.modules:
            from crosstrain.progress import Progress

            progress = Progress(self.identity, self.console_url, live=False)
        backend = self._backend(settings, config_profile)
        return backend.wait(self, timeout=timeout, poll_interval=poll_interval, progress=progress)

    def cancel(self, *, config_profile: str | None = None, **settings: Any) -> None:
        self._backend(settings, config_profile).cancel(self)

    def logs(
        self, *, follow: bool = False, trial: int | None = None, config_profile: str | None = None, **settings: Any
    ) -> Iterator[str]:
        """The job's log lines, with any credential in them redacted; with `follow`, more as they come until the
        job ends. `trial`: of a sweep whose handle holds its trials' runs (Databricks, AI Runtime), that trial's
        only."""
        backend = self._backend(settings, config_profile)
        handle = self if trial is None else self._trial(trial)
        return map(redact, backend.logs(handle, follow=True) if follow else backend.logs(handle))

    def _trial(self, number: int) -> JobHandle:
        """The sweep's handle narrowed to trial `number` (its logs read that trial's run only)."""
        sweep = self.ref.get("sweep") if isinstance(self.ref, Mapping) else None
        trials = sweep.get("trials") if isinstance(sweep, Mapping) else None
        if not isinstance(trials, list):
            raise SpecError(
                [
                    Problem(
                        "trial", f"{self.identity} is no sweep whose handle holds its trials' runs", "leave --trial out"
                    )
                ]
            )
        chosen = [t for t in trials if isinstance(t, Mapping) and t.get("trial") == number]
        if not chosen:
            numbers = ", ".join(str(t.get("trial")) for t in trials if isinstance(t, Mapping))
            raise SpecError([Problem("trial", f"{self.identity} has no trial {number}", f"use one of {numbers}")])
        ref = {**self.ref, "sweep": {**sweep, "trials": chosen}}  # type: ignore[dict-item]
        return dataclasses.replace(self, ref=ref)

    def result(
        self, timeout: float | None = None, *, trust: bool = False, config_profile: str | None = None, **settings: Any
    ) -> Any:
        """What a function job's rank 0 returned (`crosstrain.submit_function`), once the job has succeeded:
        waits for it (up to `timeout`), then reads it back where the platform lets crosstrain read it (this
        machine, Cloud Storage, a Databricks volume or DBFS). Elsewhere `Unsupported` says where it is; a job that
        failed raises `JobFailed` (`FunctionFailed`, with the rank and its traceback, where that is readable).
        The result is unpickled, which runs any code it holds: a handle crosstrain did not make for this user
        (crafted, edited, or made on another machine) reads it only with `trust=True`."""
        if not self.result_at:
            raise SpecError(
                [
                    Problem(
                        "handle.result_at",
                        f"{self.identity} runs a command, not a function: it returns no result",
                        "read what the job wrote, or submit a function: crosstrain.submit_function(fn, job, target)",
                    )
                ]
            )
        if not trust and not self._trusted():
            raise SpecError(
                [
                    Problem(
                        "handle.result_seal",
                        f"{self.identity}'s result at {self.result_at} would be unpickled, which runs any code it "
                        "holds, and crosstrain did not make this handle for this user on this machine (it was "
                        "edited, crafted or made elsewhere)",
                        "if you trust where the handle and its result came from: handle.result(trust=True)",
                    )
                ]
            )
        backend = self._backend(settings, config_profile)
        data = backend.read_result(self, timeout=timeout)
        try:
            import cloudpickle
        except ImportError:
            from crosstrain.errors import MissingDependency

            raise MissingDependency("reading a function's result needs cloudpickle: pip install cloudpickle") from None
        return cloudpickle.loads(data)

    def _repr_html_(self) -> str:
        from crosstrain.display import handle_html

        return handle_html(self)


def _code_ref(data: Any) -> CodeRef | None:
    if data is None:
        return None
    from crosstrain.packaging import CodeRef

    return CodeRef.from_dict(data)


def _kind(kind: type) -> str:
    return {str: "string", int: "whole number", dict: "JSON object", list: "list"}.get(kind, kind.__name__)
