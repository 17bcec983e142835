"""The Python API: `crosstrain.render`, `crosstrain.submit`, `crosstrain.validate` (what the CLI calls too)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crosstrain.backends import create_backend, entries, get_backend_class
from crosstrain.errors import CrosstrainError, Problem, SpecError, UnknownBackend
from crosstrain.loader import job_from_dict, load_job

if TYPE_CHECKING:
    from crosstrain.backends.base import JobHandle, Request
    from crosstrain.spec import TrainingJob


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
    return job_from_dict({**job.model_dump(exclude_unset=True), "run_id": run_id})


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


def submit(
    job: str | Path | Mapping[str, Any] | TrainingJob | Request,
    target: str | None = None,
    *,
    run_id: str | None = None,
    **settings: Any,
) -> JobHandle:
    """Send a job (or an already rendered, possibly edited, `Request`) and return its handle.

    A request is sent as it is: `settings` then say where this machine sends credentials (e.g.
    `host="https://..."`, over the environment), and a request that points elsewhere is refused.
    """
    from crosstrain.backends.base import Request

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
    spec = load_job(job)
    known = entries()
    names = targets if targets is not None else list(spec.targets)
    results: dict[str, list[Problem]] = {}
    for name in spec.targets:
        if name not in known and targets is None:
            results[name] = [
                Problem(f"targets.{name}", f"unknown target {name!r}", f"use one of {', '.join(sorted(known))}")
            ]
    for name in names:
        if name in results:
            continue
        try:
            create_backend(name, environ=environ).render(spec, settings)
            results[name] = []
        except SpecError as exc:
            results[name] = list(exc.problems)
        except UnknownBackend as exc:
            results[name] = [Problem("--target", str(exc), "")]
    return results


def read_request(text: str) -> Request | None:
    """A rendered request from JSON text, or None if the text is not one (then it is a job spec)."""
    from crosstrain.backends.base import Request

    try:
        data = json.loads(text)
    except ValueError:
        return None
    if isinstance(data, dict) and {"target", "identity", "calls"} <= data.keys():
        try:
            return Request.from_dict(data)
        except (KeyError, TypeError) as exc:
            raise CrosstrainError(f"not a valid rendered request: {exc}") from None
    return None
