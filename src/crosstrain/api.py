"""The Python API (what the CLI calls too): one thing per name.

`render(job, target)` is the request, sent by nothing; `submit(job, target)` renders and sends it;
`send(request)` sends a rendered (possibly edited) request as it is; `render_function`, `submit_function` and
`run` do the same with a Python function as every rank's entry point, whose handle's `result()` returns what rank
0 returned; `validate(job)` says what each target refuses.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crosstrain.errors import ConfigError, CrosstrainError, Problem, SpecError, UnknownBackend
from crosstrain.loader import job_from_dict, load_job
from crosstrain.records import CREDENTIAL_HEADERS
from crosstrain.registry import create_backend, entries, get_backend_class
from crosstrain.spec import TrainingJob

if TYPE_CHECKING:
    from crosstrain import fallback
    from crosstrain.backends.base import Backend
    from crosstrain.preflight import Report
    from crosstrain.records import JobHandle, Request


def choose_target(job: TrainingJob, target: str | None) -> str:
    """The explicit target, else the job file's only target, else `local` where the job file names none."""
    if target:
        return target
    if len(job.targets) == 1:
        return next(iter(job.targets))
    if not job.targets:
        return "local"
    raise SpecError(
        [
            Problem(
                "--target",
                f"no target chosen (the job file lists {', '.join(job.targets)})",
                f"pass --target (one of {', '.join(sorted(entries()))}), or --local to run it here",
            )
        ]
    )


def target_settings(target: str, source: object, settings: Mapping[str, Any]) -> dict[str, Any]:
    """`settings`, plus what the job's source implies: a local run works in the job file's folder by default,
    as a cloud job works in the image that was built next to it."""
    if target == "local" and "workdir" not in settings and isinstance(source, str | Path) and str(source) != "-":
        path = Path(source)
        if path.is_file():
            return {**settings, "workdir": str(path.absolute().parent)}
    return dict(settings)


def new_run_id() -> str:
    """A fresh run id, for submitting the same spec again as a new job."""
    import secrets

    return f"{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def with_run_id(job: TrainingJob, run_id: str | None) -> TrainingJob:
    if run_id is None:
        return job
    run_id = new_run_id() if run_id == "new" else run_id
    renamed = job_from_dict({**job.model_dump(exclude_unset=True), "run_id": run_id})
    renamed.__pydantic_private__ = dict(job.__pydantic_private__ or {})  # its folder and shipped function
    return renamed


def render(
    job: str | Path | Mapping[str, Any] | TrainingJob,
    target: str | None = None,
    *,
    run_id: str | None = None,
    environ: Mapping[str, str] | None = None,
    config_profile: str | None = None,
    **settings: Any,
) -> Request:
    """Every HTTP call that `submit` would make, without sending anything.

    `settings` override the job file's `targets.<target>` section (e.g. `project="my-proj"`), which is over the
    environment and this user's config file; `config_profile` picks the config file's profile (the CLI's
    `--profile`; not `profile`, which is a Databricks setting).
    """
    spec = with_run_id(load_job(job), run_id)
    name = choose_target(spec, target)
    backend = create_backend(name, environ=environ, config_profile=config_profile)
    if spec.fallback:  # every alternative renders first; the primary's request says them
        from crosstrain import fallback

        def made(other: str) -> Backend[Any, Any]:
            return backend if other == name else create_backend(other, environ=environ, config_profile=config_profile)

        return fallback.rendered(spec, name, target_settings(name, job, settings), backend=made)[1]
    return backend.render(spec, target_settings(name, job, settings))


def fallback_run(
    job: str | Path | Mapping[str, Any] | TrainingJob,
    target: str | None = None,
    *,
    run_id: str | None = None,
    config_profile: str | None = None,
    check: bool = False,
    **settings: Any,
) -> fallback.Run:
    """The run of a job with `fallback:` (`crosstrain.fallback`): `.submit()` finds or starts its one live attempt,
    `.wait()` follows it and moves on where an attempt is passed over for quota or capacity; with `check`, each
    attempt's preflight is read first, and one that says quota or capacity is passed over uncreated."""
    from crosstrain import fallback

    spec = with_run_id(load_job(job), run_id)
    name = choose_target(spec, target)

    def made(other: str) -> Backend[Any, Any]:
        return create_backend(other, config_profile=config_profile)

    return fallback.Run(spec, name, target_settings(name, job, settings), backend=made, check=check)


FUNCTION_COMMAND = ["python", "-m", "crosstrain.function"]


def with_function(
    fn: Callable[..., Any],
    job: str | Path | Mapping[str, Any] | TrainingJob,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
) -> TrainingJob:
    """The job, running `fn(*args, **kwargs)` on every rank instead of a command (`crosstrain.function`)."""
    try:
        import cloudpickle
    except ImportError:
        from crosstrain.errors import MissingDependency

        raise MissingDependency("shipping a function needs cloudpickle: pip install cloudpickle") from None
    spec = load_job(job)
    # One job file serves both ways: its command when it is run as a file, the function when one is given.
    own = [
        f"{role}{field} `{' '.join(value)}`"
        for role, pool in (("", spec), ("primary.", spec.primary), ("workers.", spec.workers))
        for field in ("command", "args")
        if (value := getattr(pool, field))
    ]
    if own:
        pools = {
            role: getattr(spec, role).model_copy(update={"command": None, "args": None})
            for role in ("primary", "workers")
        }
        spec = spec.model_copy(update={"args": [], "shell": False, **pools})
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    by_value = module is not None and _local_module(module)
    try:
        if by_value:  # the nodes cannot import the user's own module: its code travels in the pickle
            cloudpickle.register_pickle_by_value(module)
        payload = cloudpickle.dumps((fn, tuple(args), dict(kwargs or {})))
    except Exception as exc:
        raise SpecError(
            [Problem("function", f"cannot pickle the function or its arguments: {exc}", "pass picklable values")]
        ) from None
    finally:
        if by_value:
            cloudpickle.unregister_pickle_by_value(module)
    function = spec.model_copy(update={"command": list(FUNCTION_COMMAND)})
    name = f"{getattr(fn, '__qualname__', None) or type(fn).__name__}()"
    note = f"{name} runs on every rank in place of the job file's {' and '.join(own)}" if own else ""
    return function.with_function(payload, note)


def _local_module(module: types.ModuleType) -> bool:
    """A module of the user's own (a file outside any installed-packages folder), other than `__main__`, which
    cloudpickle already ships by value."""
    path = getattr(module, "__file__", None)
    if module.__name__ == "__main__" or not path:
        return False
    parts = Path(path).parts
    return (
        "site-packages" not in parts and "dist-packages" not in parts and not module.__name__.startswith("crosstrain")
    )


def render_function(
    fn: Callable[..., Any],
    job: str | Path | Mapping[str, Any] | TrainingJob,
    target: str | None = None,
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    run_id: str | None = None,
    environ: Mapping[str, str] | None = None,
    config_profile: str | None = None,
    **settings: Any,
) -> Request:
    """What `submit_function` would send: `job` with `fn(*args, **kwargs)` as every rank's entry point, and
    where rank 0 leaves its result (`request.result_at`). Sends nothing."""
    return _function_request(fn, job, target, args, kwargs, run_id, environ, settings, config_profile)[1]


def _function_request(
    fn: Callable[..., Any],
    job: str | Path | Mapping[str, Any] | TrainingJob,
    target: str | None,
    args: Sequence[Any],
    kwargs: Mapping[str, Any] | None,
    run_id: str | None,
    environ: Mapping[str, str] | None,
    settings: Mapping[str, Any],
    config_profile: str | None = None,
) -> tuple[Backend[Any, Any], Request]:
    """The backend that renders a function's job, and its request (which that backend then sends as its own)."""
    spec = with_run_id(with_function(fn, job, args, kwargs), run_id)
    name = choose_target(spec, target)
    backend = create_backend(name, environ=environ, config_profile=config_profile)
    return backend, backend.render(spec, target_settings(name, job, settings))


def submit_function(
    fn: Callable[..., Any],
    job: str | Path | Mapping[str, Any] | TrainingJob,
    target: str | None = None,
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    run_id: str | None = None,
    config_profile: str | None = None,
    **settings: Any,
) -> JobHandle:
    """Run `fn(*args, **kwargs)` on every rank of `job` on `target` (the function is pickled into the job's code
    bundle with cloudpickle: `crosstrain.function`); `handle.result()` waits and returns rank 0's result."""
    backend, request = _function_request(fn, job, target, args, kwargs, run_id, None, settings, config_profile)
    if not request.result_at:
        raise SpecError([backend.lost_result()])
    return backend.send(request).of(request)


def run(
    fn: Callable[..., Any],
    job: str | Path | Mapping[str, Any] | TrainingJob,
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    **settings: Any,
) -> Any:
    """Run `fn(*args, **kwargs)` on every rank of `job` on this machine (the local target, `settings` such as
    `emulate="vertex"`) from the same bundle a cloud target receives, and return rank 0's result. A rank that
    raises fails the run with `FunctionFailed`: its rank and traceback."""
    return submit_function(fn, job, "local", args=args, kwargs=kwargs, **settings).result()


def submit(
    job: str | Path | Mapping[str, Any] | TrainingJob,
    target: str | None = None,
    *,
    run_id: str | None = None,
    config_profile: str | None = None,
    **settings: Any,
) -> JobHandle:
    """Render `job` for `target` and send it; the handle follows the job. `settings` override the job file's
    `targets.<target>` section; `config_profile` picks the config file's profile (as `render`). A retried submit
    finds the job the first one made instead of making another."""
    from crosstrain.records import Request

    if isinstance(job, Request) or (callable(job) and not isinstance(job, TrainingJob)):
        right = "send(request)" if isinstance(job, Request) else "submit_function(fn, job, target)"
        raise SpecError([Problem("job", "submit takes a job (a file, a mapping or a TrainingJob)", f"use {right}")])
    spec = with_run_id(load_job(job), run_id)
    if spec.fallback:  # one live attempt of the alternatives, the handle saying which and why
        return fallback_run(job, target, run_id=run_id, config_profile=config_profile, **settings).submit()
    name = choose_target(spec, target)
    return create_backend(name, config_profile=config_profile).submit(spec, target_settings(name, job, settings))


def send(request: Request, *, config_profile: str | None = None, **settings: Any) -> JobHandle:
    """Send a rendered (possibly edited) request as it is. `settings` say only where this machine sends
    credentials (e.g. `host="https://..."`, over the environment): a request that points elsewhere is refused."""
    binding = get_backend_class(request.target).binding_settings
    unknown = sorted(set(settings) - set(binding))
    if unknown:
        where = f" (with a request, settings say only where it may go: {', '.join(binding)})" if binding else ""
        raise SpecError(
            [
                Problem(
                    f"--set {unknown[0]}",
                    "a rendered request is sent as it is",
                    f"render again with the settings you want{where}",
                )
            ]
        )
    backend = create_backend(
        request.target, config_profile=config_profile, **({"settings": settings} if settings else {})
    )
    return backend.send(request).of(request)


def validate(
    job: str | Path | Mapping[str, Any] | TrainingJob,
    targets: list[str] | None = None,
    *,
    settings: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    config_profile: str | None = None,
) -> dict[str, list[Problem]]:
    """Problems per target (an empty list where the job renders). Spec errors raise `SpecError`.

    With no `targets`, every target the job file names is checked.
    """
    from crosstrain.settings import scoped, unused

    spec = load_job(job)
    known = entries()
    names = targets if targets is not None else list(spec.targets)
    results: dict[str, list[Problem]] = {}
    fields = {name: _setting_names(name) for name in names if name in known}
    problems = unused(settings or {}, fields)
    if problems:
        raise SpecError(problems)
    for name in spec.targets:
        if name not in known and targets is None:
            results[name] = [
                Problem(f"targets.{name}", f"unknown target {name!r}", f"use one of {', '.join(sorted(known))}")
            ]
    for name in names:
        if name in results:
            continue
        try:
            own = scoped(settings or {}, name, fields.get(name, ()), known, only_target=False)
            if spec.fallback:  # with `name` as the primary: every alternative renders too
                from crosstrain import fallback

                fallback.plan(
                    spec, name, own, backend=lambda n: create_backend(n, environ=environ, config_profile=config_profile)
                )
            else:
                create_backend(name, environ=environ, config_profile=config_profile).render(spec, own)
            results[name] = []
        except ConfigError:
            raise  # this machine's config file, not something the target cannot do: it stops the check
        except SpecError as exc:
            results[name] = list(exc.problems)
        except UnknownBackend as exc:
            results[name] = [Problem("--target", str(exc), "")]
    return results


def check(
    job: str | Path | Mapping[str, Any] | TrainingJob,
    targets: list[str] | None = None,
    *,
    settings: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    config_profile: str | None = None,
) -> dict[str, Report]:
    """`crosstrain check`: per target (default: every one the job file names), whether the job can start there
    now and why not, read-only (`Backend.check`). Spec errors raise `SpecError`."""
    from crosstrain.preflight import Check, Outcome, Report

    spec = load_job(job)
    reports: dict[str, Report] = {}
    for name in targets if targets is not None else list(spec.targets):
        try:
            backend = create_backend(name, environ=environ, config_profile=config_profile)
        except UnknownBackend as exc:
            reports[name] = Report(name, (Check("--target", Outcome.INVALID, str(exc)),))
            continue
        reports[name] = backend.check(spec, settings_for(name, settings or {}))
    return reports


def _setting_names(target: str) -> frozenset[str]:
    try:
        return frozenset(get_backend_class(target).settings_model.model_fields)
    except CrosstrainError:  # a backend whose SDK is missing still names its settings in its module
        return frozenset()


def settings_for(target: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The `--set` overrides that apply to `target` (`TARGET.key` scoped, plain keys as they are)."""
    if not settings:  # none given: no plugin scan for the target names they could be scoped to
        return {}
    from crosstrain.settings import scoped

    others = {key.split(".", 1)[0] for key in settings if "." in key} - {target}
    known = {target, *entries()} if others else {target}  # the plugin scan only for a key scoped elsewhere
    return scoped(settings, target, _setting_names(target), known, only_target=True)


def read_request(text: str, name: str | None = None) -> Request | None:
    """A rendered request from JSON text, or None if the text is not one (then it is a job spec).

    Parsed within `untrusted.REQUEST`'s limits; a request with a field of the wrong type is a `SpecError` naming it.
    """
    from crosstrain import untrusted
    from crosstrain.records import Request

    if not text.lstrip().startswith("{"):
        return None
    try:
        data = untrusted.parse_json(text, untrusted.REQUEST, name)
    except untrusted.NotJSON:
        return None
    except SpecError:
        if len(text) <= untrusted.JOB.max_bytes:
            return None  # small enough to be a job file: the job loader says what is wrong, in a job's terms
        raise
    if not (isinstance(data, dict) and {"target", "identity", "calls"} <= data.keys()):
        return None
    problems = _request_problems(data)
    if problems:
        raise SpecError(problems, source=name, headline="invalid rendered request")
    return Request.from_dict(data)


def _request_problems(data: dict[str, Any]) -> list[Problem]:
    """What `Request.from_dict` needs, checked field by field so an edited request gets a path, not a crash."""
    from crosstrain import untrusted

    fix = "render the job again (`crosstrain render JOB --json`) and edit only values"
    problems: list[Problem] = []

    def need(path: str, value: Any, kind: type | tuple[type, ...], what: str) -> bool:
        if isinstance(value, kind) and not isinstance(value, bool):
            return True
        problems.append(Problem(path, f"must be {what}, not {untrusted.excerpt(value)}", fix))
        return False

    for key in ("target", "identity", "job_name"):
        need(key, data.get(key), str, "a string")
    need("fingerprint", data.get("fingerprint", ""), str, "a string")
    need("settings", data.get("settings") or {}, dict, "a mapping")
    if need("notes", data.get("notes") or [], list, "a list"):
        for i, note in enumerate(data.get("notes") or []):
            need(f"notes[{i}]", note, str, "a string")
    calls = data.get("calls")
    if need("calls", calls, list, "a list of calls") and not calls:
        problems.append(Problem("calls", "holds no call", fix))
    for i, call in enumerate(calls if isinstance(calls, list) else []):
        if not need(f"calls[{i}]", call, dict, "a mapping with method and url"):
            continue
        need(f"calls[{i}].method", call.get("method"), str, "a string")
        need(f"calls[{i}].url", call.get("url"), str, "a string")
        need(f"calls[{i}].purpose", call.get("purpose", ""), str, "a string")
        headers = call.get("headers") or {}
        if need(f"calls[{i}].headers", headers, dict, "a mapping of names to values"):
            for key, value in headers.items():
                need(f"calls[{i}].headers.{untrusted.excerpt(key, 40)[1:-1]}", value, str, "a string")
            if CREDENTIAL_HEADERS & {str(h).lower() for h in headers}:
                problems.append(
                    Problem(f"calls[{i}].headers", "a rendered request must not carry credentials", "remove them")
                )
    refs = [(field, data.get(field)) for field in ("code", "build_context")]  # the local folders the calls upload
    inputs = data.get("inputs") or {}
    if need("inputs", inputs, dict, "a mapping of input names to folders"):
        refs += [(f"inputs.{untrusted.excerpt(str(name), 40)[1:-1]}", ref) for name, ref in inputs.items()]
    for field, code in refs:
        if code is not None and need(field, code, dict, "a mapping"):
            need(f"{field}.folder", code.get("folder"), str, "a string")
            need(f"{field}.digest", code.get("digest"), str, "a string")
            need(f"{field}.files", code.get("files"), int, "a whole number")
            need(f"{field}.bytes", code.get("bytes"), int, "a whole number")
            for key in ("ignore_files", "requirements"):
                if need(f"{field}.{key}", code.get(key) or [], list, "a list"):
                    for j, item in enumerate(code.get(key) or []):
                        need(f"{field}.{key}[{j}]", item, str, "a string")
    return problems[:20]
