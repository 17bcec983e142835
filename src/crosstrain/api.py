"""The Python API: `crosstrain.render`, `crosstrain.submit`, `crosstrain.validate` (what the CLI calls too)."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crosstrain.errors import CrosstrainError, Problem, SpecError, UnknownBackend
from crosstrain.loader import job_from_dict, load_job
from crosstrain.records import CREDENTIAL_HEADERS
from crosstrain.registry import create_backend, entries, get_backend_class
from crosstrain.spec import TrainingJob

if TYPE_CHECKING:
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
    **settings: Any,
) -> Request:
    """Every HTTP call that `submit` would make, without sending anything.

    `settings` override the job file's `targets.<target>` section (e.g. `project="my-proj"`).
    """
    spec = with_run_id(load_job(job), run_id)
    name = choose_target(spec, target)
    return create_backend(name, environ=environ).render(spec, target_settings(name, job, settings))


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
    for field in ("command", "args"):
        for role, pool in (("", spec), ("primary.", spec.primary), ("workers.", spec.workers)):
            if getattr(pool, field):
                raise SpecError(
                    [
                        Problem(
                            f"{role}{field}",
                            "a job that runs a function has no command of its own: the function is its entry point",
                            f"remove `{role}{field}` from the job, or run the command without a function",
                        )
                    ]
                )
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
    return spec.model_copy(update={"command": list(FUNCTION_COMMAND)}).with_function(payload)


def result_path(output_dir: str | None) -> str | None:
    """Where a node writes a function's result: the job's `output_dir` as the node's file system sees it."""
    if not output_dir:
        return None
    base = output_dir.rstrip("/")
    if base.startswith("gs://"):
        return "/gcs/" + base.removeprefix("gs://") + "/crosstrain-result"  # Cloud Storage FUSE on Vertex AI
    if base.startswith("dbfs:/"):
        return "/dbfs/" + base.removeprefix("dbfs:/").lstrip("/") + "/crosstrain-result"
    if base.startswith("/Volumes/"):
        return base + "/crosstrain-result"
    return None


def _with_result_dir(job: TrainingJob, target: str) -> TrainingJob:
    """The job, told where rank 0 writes the function's result on `target`; refused where it would be lost."""
    if target == "local":
        return job
    path = result_path(job.output_dir)
    if path is not None:
        return job.model_copy(update={"env": {**job.env, "CROSSTRAIN_RESULT_DIR": path}})
    if target in ("azureml", "fake"):
        return job  # Azure ML uploads ./outputs with the run
    raise SpecError(
        [
            Problem(
                "output_dir",
                f"a function's result on {target} is written to the job's output_dir, and the job has none "
                "that the nodes can write (gs://, dbfs:/ or /Volumes/)",
                "set output_dir, e.g. gs://my-bucket/runs or /Volumes/main/ml/runs",
            )
        ]
    )


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
    import tempfile

    import cloudpickle

    from crosstrain import function
    from crosstrain.errors import FunctionFailed, JobFailed

    spec = with_function(fn, job, args, kwargs)
    with tempfile.TemporaryDirectory(prefix="crosstrain-result-") as folder:
        env = {**spec.env, "CROSSTRAIN_RESULT_DIR": folder}
        spec = spec.model_copy(update={"env": env})
        handle = create_backend("local").submit(spec, target_settings("local", job, settings))
        status = handle.status()
        out = Path(folder)
        errors = sorted(out.glob("error-rank*.txt"), key=lambda p: (p.stat().st_mtime_ns, p.name))
        if errors:
            rank = int(errors[0].stem.removeprefix("error-rank"))
            raise FunctionFailed(rank, errors[0].read_text(errors="replace"), len(errors))
        if status.state.value != "SUCCEEDED" or not (out / function.RESULT).is_file():
            raise JobFailed(f"the run ended {status.state.value}: {status.message or 'rank 0 returned no result'}")
        return cloudpickle.loads((out / function.RESULT).read_bytes())


def submit(
    job: str | Path | Mapping[str, Any] | TrainingJob | Request | Callable[..., Any],
    target: str | Path | Mapping[str, Any] | TrainingJob | None = None,
    *more: str | None,
    run_id: str | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    **settings: Any,
) -> JobHandle:
    """Send a job (or an already rendered, possibly edited, `Request`) and return its handle.

    `submit(fn, job, target, args=..., kwargs=...)` ships the function instead of a command: every rank runs
    it, and rank 0's result is written to the job's output folder (`crosstrain.function`).

    A request is sent as it is: `settings` then say where this machine sends credentials (e.g.
    `host="https://..."`, over the environment), and a request that points elsewhere is refused.
    """
    from crosstrain.records import Request

    if callable(job) and not isinstance(job, Request | TrainingJob):
        if target is None or isinstance(target, Request):
            raise SpecError([Problem("job", "submit(fn, job, target): the job is missing", "pass the job")])
        spec = with_function(job, target, args, kwargs)
        name = choose_target(spec, more[0] if more else None)
        spec = _with_result_dir(spec, name)
        return create_backend(name).submit(with_run_id(spec, run_id), target_settings(name, target, settings))
    if more or args or kwargs:
        raise SpecError(
            [Problem("args", "arguments are for a function: submit(fn, job, target, args=...)", "remove them")]
        )
    assert target is None or isinstance(target, str)

    if isinstance(job, Request):
        binding = get_backend_class(job.target).binding_settings
        if run_id or (target and target != job.target) or set(settings) - set(binding):
            where = f" (with a request, settings say only where it may go: {', '.join(binding)})" if binding else ""
            raise SpecError(
                [
                    Problem(
                        "request",
                        "a rendered request is sent as it is",
                        f"render again with the settings you want{where}",
                    )
                ]
            )
        return create_backend(job.target, **({"settings": settings} if settings else {})).send(job)
    spec = with_run_id(load_job(job), run_id)
    name = choose_target(spec, target)
    return create_backend(name).submit(spec, target_settings(name, job, settings))


def validate(
    job: str | Path | Mapping[str, Any] | TrainingJob,
    targets: list[str] | None = None,
    *,
    settings: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
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
            create_backend(name, environ=environ).render(spec, own)
            results[name] = []
        except SpecError as exc:
            results[name] = list(exc.problems)
        except UnknownBackend as exc:
            results[name] = [Problem("--target", str(exc), "")]
    return results


def _setting_names(target: str) -> frozenset[str]:
    try:
        return frozenset(get_backend_class(target).settings_model.model_fields)
    except CrosstrainError:  # a backend whose SDK is missing still names its settings in its module
        return frozenset()


def settings_for(target: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The `--set` overrides that apply to `target` (`TARGET.key` scoped, plain keys as they are)."""
    from crosstrain.settings import scoped

    return scoped(settings, target, _setting_names(target), {target, *entries()}, only_target=True)


def read_request(text: str, name: str | None = None) -> Request | None:
    """A rendered request from JSON text, or None if the text is not one (then it is a job spec).

    Parsed within `inputs.REQUEST`'s limits; a request with a field of the wrong type is a `SpecError` naming it.
    """
    from crosstrain import inputs
    from crosstrain.records import Request

    if not text.lstrip().startswith("{"):
        return None
    try:
        data = inputs.parse_json(text, inputs.REQUEST, name)
    except inputs.NotJSON:
        return None
    except SpecError:
        if len(text) <= inputs.JOB.max_bytes:
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
    from crosstrain import inputs

    fix = "render the job again (`crosstrain render JOB --json`) and edit only values"
    problems: list[Problem] = []

    def need(path: str, value: Any, kind: type | tuple[type, ...], what: str) -> bool:
        if isinstance(value, kind) and not isinstance(value, bool):
            return True
        problems.append(Problem(path, f"must be {what}, not {inputs.excerpt(value)}", fix))
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
                need(f"calls[{i}].headers.{inputs.excerpt(key, 40)[1:-1]}", value, str, "a string")
            if CREDENTIAL_HEADERS & {str(h).lower() for h in headers}:
                problems.append(
                    Problem(f"calls[{i}].headers", "a rendered request must not carry credentials", "remove them")
                )
    code = data.get("code")
    if code is not None and need("code", code, dict, "a mapping"):
        need("code.folder", code.get("folder"), str, "a string")
        need("code.digest", code.get("digest"), str, "a string")
        need("code.files", code.get("files"), int, "a whole number")
        need("code.bytes", code.get("bytes"), int, "a whole number")
        for key in ("ignore_files", "requirements"):
            if need(f"code.{key}", code.get(key) or [], list, "a list"):
                for j, item in enumerate(code.get(key) or []):
                    need(f"code.{key}[{j}]", item, str, "a string")
    return problems[:20]
