"""`crosstrain`: render, validate, submit and follow training jobs.

Results go to stdout (JSON, or a native form with --format); narration and progress go to stderr.
Exit codes: 0 ok, 1 unexpected error, 2 invalid spec or usage (or a spec the target cannot express),
3 submission failed, 4 the job failed while waiting, 5 --timeout expired while waiting, 6 an SDK this needs is not
installed (the message says how to install it), 130 interrupted (143 or 129: a local run stopped by SIGTERM or
SIGHUP, every process it started stopped first).
No exception reaches the user as a traceback (set CROSSTRAIN_DEBUG=1 to see one for an unexpected error), and
with --json stdout holds one JSON object for every error, usage errors included. Text that can come from a
platform (states, messages, logs, console links, errors) reaches the terminal through `_say` and `_show`, which
redact credentials and show control characters as escapes (`crosstrain.safe`); JSON escapes them in strings.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from crosstrain import cli_verbs, colour
from crosstrain.cli_parser import build_parser
from crosstrain.errors import (
    CrosstrainError,
    ExitCode,
    JobFailed,
    Problem,
    SpecError,
    Stopped,
    UsageError,
    WaitTimeout,
    closest,
)
from crosstrain.registry import BUILTIN_BACKENDS
from crosstrain.safe import json_text, redact, terminal
from crosstrain.untrusted import cut

if TYPE_CHECKING:
    from crosstrain.backends.base import Backend
    from crosstrain.records import Request
    from crosstrain.spec import TrainingJob


def _say(message: str) -> None:
    """Narration and errors, on stderr."""
    print(terminal(redact(message)), file=sys.stderr)


def _show(text: str, *, flush: bool = False) -> None:
    """A result that holds a platform's text (a state, a message, a log line, a console link), on stdout."""
    print(terminal(redact(text)), flush=flush)


def _show_styled(cells: Sequence[str], styles: Sequence[Callable[[str], str]]) -> None:
    """One line of a result whose cells are each made safe first, then styled (colour codes are ours alone)."""
    print("".join(style(terminal(redact(cell))) for cell, style in zip(cells, styles, strict=True)))


def _print_json(data: Any, out: TextIO | None = None) -> None:
    """JSON on stdout: the values as they came, with every control character escaped (`safe.json_text`)."""
    print(json_text(json.dumps(data, indent=2, ensure_ascii=False)), file=out or sys.stdout)


def _handle_settings(args: argparse.Namespace) -> dict[str, Any]:
    """`--set` and `--profile`, as a handle's verbs and `api.send` take them."""
    return {**_assignments(args), "config_profile": args.profile}


def _assignments(args: argparse.Namespace) -> dict[str, str]:
    """`--set`'s pairs; `config_profile` is no setting (the Python API's name for --profile)."""
    from crosstrain.settings import parse_assignments

    settings = parse_assignments(args.settings)
    if "config_profile" in settings:
        raise SpecError([Problem("--set config_profile", "not a setting", "pick the config file's profile: --profile")])
    return settings


def _load_handle(args: argparse.Namespace) -> Any:
    """A handle from the text itself (JSON), a file holding it, or stdin (`-`); of a run with fallback, the
    attempt that is followed now."""
    from crosstrain import fallback, untrusted
    from crosstrain.records import JobHandle

    source = args.handle
    is_text = source.lstrip()[:1] in ("{", "[", '"')
    if source != "-" and not is_text and not os.path.lexists(source):
        raise SpecError(
            [
                Problem(
                    "handle",
                    f"not a handle and no such file: {untrusted.excerpt(source)}",
                    "pass the line `crosstrain submit` printed (it starts with {), a file holding it, or -",
                )
            ],
            headline="invalid job handle",
        )
    text = source if is_text else untrusted.read_text(source, untrusted.HANDLE)[0]
    return cli_verbs.told(fallback.following(JobHandle.loads(text), **_handle_settings(args)))


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    from crosstrain.settings import parse_assignments

    settings: dict[str, Any] = dict(_assignments(args))
    local = {"emulate": "--emulate", "nodes": "--nodes", "nproc_per_node": "--nproc-per-node"}
    given = {key: getattr(args, key) for key in local if getattr(args, key, None) is not None}
    for attr, key, flag in (("stand_in_inputs", "inputs", "--input"), ("stand_in_outputs", "outputs", "--output")):
        if getattr(args, attr, None):
            given[key] = parse_assignments(getattr(args, attr), flag)
            local[key] = flag
    if given and _target(args) != "local":
        flags = ", ".join(local[key] for key in given)
        raise SpecError([Problem(flags, "these options are for runs on this machine", "add --local")])
    return {**settings, **given}


def _target(args: argparse.Namespace) -> str | None:
    if getattr(args, "local", False):
        if args.target not in (None, "local"):
            raise SpecError([Problem("--local", f"--local and --target {args.target} disagree", "pass one of them")])
        return "local"
    target: str | None = args.target
    return target


def cmd_render(args: argparse.Namespace) -> int:
    job = _load_job(args.job)

    backend, request = _rendered(args, job)
    if args.json:
        _print_json(request.with_cost())
    else:
        print(backend.format(request, args.format))
    return ExitCode.OK


def _rendered(args: argparse.Namespace, job: TrainingJob) -> tuple[Backend[Any, Any], Request]:
    """The job rendered as `render` and `submit --dry-run` show it (its notes said on stderr), and its backend."""
    from crosstrain import api
    from crosstrain.registry import create_backend

    job = api.with_run_id(job, args.run_id)
    target = api.choose_target(job, _target(args))
    backend = create_backend(target, config_profile=args.profile)
    settings = api.target_settings(target, args.job, api.settings_for(target, _settings(args)))
    request = api.render(job, target, config_profile=args.profile, **settings) if job.fallback else None
    request = request or backend.render(job, settings)  # with fallback: the primary's, saying the alternatives
    for note in (*request.notes, *(request.cost.notes() if request.cost is not None else ())):
        _say(f"note: {note}")
    return backend, request


def _dry_run(args: argparse.Namespace, loaded: TrainingJob | Request) -> int:
    """`submit --dry-run`: the request as `render --json` prints it (a request file: as it is), nothing sent."""
    from crosstrain.records import Request

    if args.wait:
        raise UsageError("--dry-run sends nothing, so there is no job to --wait for (see `crosstrain submit --help`)")
    request = loaded if isinstance(loaded, Request) else _rendered(args, loaded)[1]
    said = request.cost is not None or request.cost_said is not None
    _print_json(request.with_cost() if said else request.to_dict())
    _say(f"dry run: nothing was sent; `crosstrain submit` without --dry-run sends {request.identity}")
    return ExitCode.OK


def _load_job(source: str) -> TrainingJob:
    from crosstrain import untrusted

    return _job_from_text(*untrusted.read_text(source, untrusted.JOB)).loaded_from(source)


def _job_from_text(text: str, name: str) -> TrainingJob:
    """Parse before importing pydantic and the backends, so hostile input is refused in a few tens of ms."""
    from crosstrain import untrusted

    data = untrusted.parse_yaml(text, untrusted.JOB, name)
    from crosstrain.loader import job_from_dict

    return job_from_dict(data, source=name)


def cmd_validate(args: argparse.Namespace) -> int:
    job = _load_job(args.job)
    from crosstrain import api

    results = api.validate(job, args.target, settings=_settings(args), config_profile=args.profile)
    ok = not any(results.values())
    if args.json:
        _print_json(
            {
                "valid": ok,
                "job": job.name,
                "checked": ["spec", *results],
                "targets": {t: [p.to_dict() for p in ps] for t, ps in results.items()},
            }
        )
    # valid: the report is the result (stdout); invalid, it is the error (stderr); beside --json, narration
    report = _show if ok and not args.json else _say
    checked = ", ".join(results) if results else "no target (the job file names none: pass -t TARGET)"
    report(f"{args.job}: the spec is valid; targets checked: {checked}")
    for target, problems in results.items():
        report(f"  {target}: " + ("ok" if not problems else "cannot run it"))
        for problem in problems:
            report("    - " + str(problem).replace("\n", "\n      "))
    return ExitCode.OK if ok else ExitCode.INVALID


def _job_or_request(source: str) -> TrainingJob | Request:
    """A .json file or stdin holds a job or a rendered request (read up to a request's limits); else a job."""
    from crosstrain import untrusted

    if source == "-" or source.endswith(".json"):
        text, name = untrusted.read_text(source, untrusted.REQUEST)
        from crosstrain import api

        request = api.read_request(text, name)
        if request is not None:
            return request
        return _job_from_text(text, name).loaded_from(source)
    return _load_job(source)


def cmd_submit(args: argparse.Namespace) -> int:
    loaded = _job_or_request(args.job)
    from crosstrain import api
    from crosstrain.records import Request

    if args.dry_run:
        return _dry_run(args, loaded)

    run: Any = None  # a job with fallback: its run, which `--wait` follows
    if isinstance(loaded, Request):
        if args.check:
            raise SpecError([Problem("--check", "checks a job file, not a rendered request", "submit the job file")])
        target = _target(args)
        if args.run_id or (target and target != loaded.target):
            raise SpecError(
                [
                    Problem(
                        "--run-id" if args.run_id else "--target",
                        "a rendered request is sent as it is",
                        "render again with the run id or target you want",
                    )
                ]
            )
        handle = api.send(loaded, **_handle_settings(args))  # --set: what the request must match
    else:
        job = api.with_run_id(loaded, args.run_id)
        target = api.choose_target(job, _target(args))
        overrides = api.settings_for(target, _settings(args))
        settings = {**api.target_settings(target, args.job, overrides), "config_profile": args.profile}
        report = (
            api.check(job, [target], settings=overrides, config_profile=args.profile)[target]
            if args.check and not job.fallback  # with fallback, each attempt is checked before its create
            else None
        )
        if report is not None and not report.ok:
            return cli_verbs.show_reports([report], as_json=args.json)
        with _local_output(target):
            run = api.fallback_run(job, target, check=args.check, **settings) if job.fallback else None
            handle = cli_verbs.told(run.submit()) if run is not None else api.submit(job, target, **settings)
    if handle.adopted:
        _say(
            f"a job with identity {handle.identity} existed already, made from this same request: using it. "
            "Pass --run-id new to start another run."
        )
    else:
        _say(f"submitted {handle.identity} to {handle.target}")
    if handle.console_url:
        _say(f"console: {handle.console_url}")
    if args.json:
        _print_json(
            {
                "handle": handle.dumps(),
                "target": handle.target,
                "identity": handle.identity,
                "job_id": handle.job_id,
                "console_url": handle.console_url,
                "adopted": handle.adopted,
            }
        )
    else:
        print(handle.dumps())
    sys.stdout.flush()
    if args.wait:  # a run with fallback moves on while it is waited for
        return _wait(run or handle, args.timeout, 1.0, args.json)
    if handle.target == "local" and handle.status().state.value != "SUCCEEDED":
        return ExitCode.JOB_FAILED  # the run is over: its outcome is known now
    return ExitCode.OK


def _local_output(target: str) -> contextlib.AbstractContextManager[Any]:
    """A local run's processes write to stderr with the narration: stdout holds only the result."""
    return contextlib.redirect_stdout(sys.stderr) if target == "local" else contextlib.nullcontext()


def cmd_run(args: argparse.Namespace) -> int:
    job = _load_job(args.job)
    from crosstrain import api
    from crosstrain.backends._supervisor import timed

    job = api.with_run_id(job, args.run_id)
    target = api.choose_target(job, _target(args))
    settings = api.target_settings(target, args.job, api.settings_for(target, _settings(args)))
    settings["config_profile"] = args.profile
    if target != "local":
        handle = api.submit(job, target, **settings)
        _say(f"submitted {handle.identity} to {handle.target}" + (" (it existed already)" if handle.adopted else ""))
        return _wait(handle, args.timeout, 1.0, args.json)
    with _local_output(target), timed("render, then run"):
        handle = api.submit(job, target, **settings)
    status = handle.status()
    if args.json:
        _print_json({"identity": handle.identity, **status.to_dict(), "outcome": handle.ref.get("outcome")})
    return ExitCode.OK if status.state.value == "SUCCEEDED" else ExitCode.JOB_FAILED


def _wait(
    handle: Any, timeout: float | None, poll: float, as_json: bool, settings: dict[str, Any] | None = None
) -> int:
    from crosstrain.progress import Progress
    from crosstrain.records import JobState, JobStatus

    progress = Progress(handle.identity, handle.console_url)
    seen: list[JobStatus] = []

    def shown(status: JobStatus) -> None:
        seen[:] = [status]
        progress(status)

    try:
        status = handle.wait(timeout, poll_interval=poll, progress=shown, **(settings or {}))
    except (JobFailed, WaitTimeout) as exc:  # the last status read says how it ended (none, where none answered)
        status = seen[0] if seen else JobStatus(JobState.UNKNOWN, "", "no status read answered")
        if as_json:
            _print_json({"identity": handle.identity, **status.to_dict(), **_outcome(handle), "error": str(exc)})
        _say(str(exc))
        return exc.exit_code
    if as_json:
        _print_json({"identity": handle.identity, **status.to_dict(), **_outcome(handle)})
    return ExitCode.OK


def _outcome(handle: Any) -> dict[str, Any]:  # a sweep's trials and best, kept on the handle by its status read
    outcome = handle.ref.get("outcome") if isinstance(handle.ref, dict) else None
    return {"outcome": outcome} if isinstance(outcome, dict) and "sweep" in outcome else {}


def cmd_status(args: argparse.Namespace) -> int:
    handle = _load_handle(args)
    status = handle.status(**_handle_settings(args))
    if args.json:
        _print_json({"identity": handle.identity, "target": handle.target, **status.to_dict(), **_outcome(handle)})
    else:
        on = colour.enabled(sys.stdout)
        rest = f"\t{status.native_state}\t{status.message}".rstrip()
        _show_styled([status.state.value, rest], [lambda text: colour.state(text, on), str])
    return ExitCode.OK


def cmd_wait(args: argparse.Namespace) -> int:
    return _wait(_load_handle(args), args.timeout, args.poll, args.json, _handle_settings(args))


def cmd_list(args: argparse.Namespace) -> int:
    import itertools
    import time

    from crosstrain import api
    from crosstrain.progress import elapsed_text
    from crosstrain.registry import create_backend

    backend = create_backend(args.target, config_profile=args.profile)
    jobs = list(itertools.islice(backend.list_jobs(api.settings_for(args.target, _settings(args))), max(args.limit, 0)))
    if args.json:
        _print_json([job.to_dict() for job in jobs])
        return ExitCode.OK
    now, person = time.time(), sys.stdout.isatty()
    rows = [
        (
            job.identity,  # a sweep's row says its trials to a person (a script reads them with --json)
            f"{job.state.value} ({job.sweep['summary']})" if job.sweep and person else job.state.value,
            f"{elapsed_text(max(0.0, now - job.created))} ago",
            job.console_url,
            job.handle.dumps() if job.handle else "",
        )
        for job in jobs
    ]
    if not jobs:
        _say(f"no job made by crosstrain on {args.target}")
    elif person:  # a person: a header and aligned columns (the handle, long, last)
        _print_table(("IDENTITY", "STATE", "CREATED", "CONSOLE", "HANDLE"), rows, states=1)
    else:  # a script: one job per line, tab-separated, the handle last (`cut -f5 | xargs crosstrain status`)
        for row in rows:
            _show("\t".join(row))
    return ExitCode.OK


def _print_table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]], *, states: int | None = None) -> None:
    """Rows under a header on stdout, each column as wide as its widest cell but the last; on a terminal with
    colour, the header bold and the `states` column in each state's colour. Cells are made safe before they are
    measured, so what is aligned is what shows."""
    on = colour.enabled(sys.stdout)
    safe = [tuple(terminal(redact(cell)) for cell in row) for row in (header, *rows)]
    widths = [max(len(cell) for cell in column) for column in zip(*safe, strict=True)]
    for index, row in enumerate(safe):
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=False)] + [row[-1]]
        if index == 0:
            cells = [colour.paint(cell, colour.BOLD, on) for cell in cells]
        elif states is not None:
            cells[states] = colour.state(cells[states], on)
        print("  ".join(cells).rstrip())


def cmd_cancel(args: argparse.Namespace) -> int:
    """Cancel a job that is going; one that has ended is said to have ended, and left as it is."""
    handle = _load_handle(args)
    settings = _handle_settings(args)
    status = handle.status(**settings)
    if status.state.terminal:
        if args.json:
            _print_json({"identity": handle.identity, "cancelled": False, "state": status.state.value})
        _say(f"{handle.identity} already ended {status.state.value} ({status.native_state}): nothing to cancel")
        return ExitCode.OK
    handle.cancel(**settings)
    if args.json:
        _print_json({"identity": handle.identity, "cancelled": True})
    _say(f"asked {handle.target} to cancel {handle.identity}")
    return ExitCode.OK


def cmd_logs(args: argparse.Namespace) -> int:
    handle = _load_handle(args)
    lines = handle.logs(**_handle_settings(args), follow=args.follow, trial=args.trial)
    if args.json:
        _print_json({"identity": handle.identity, "lines": list(lines)})
    else:
        for line in lines:
            _show(line, flush=args.follow)
    return ExitCode.OK


def cmd_schema(args: argparse.Namespace) -> int:
    from crosstrain.schema import job_schema

    _print_json(job_schema())
    return ExitCode.OK


def cmd_targets(args: argparse.Namespace) -> int:
    """Each target's settings: the value this machine (and the job file, where one is given) resolves, and the
    source it came from (`crosstrain.settings.sourced`, the order render applies)."""
    from crosstrain import userconfig
    from crosstrain.registry import entries, get_backend_class
    from crosstrain.safe import redact_all
    from crosstrain.settings import DEFAULT, check_config, described, scoped, sourced, unused

    known = entries()
    if args.target and args.target not in known:
        raise SpecError(
            [Problem("--target", f"unknown target {args.target!r}", f"use one of {', '.join(sorted(known))}")]
        )
    if args.job in known and not os.path.lexists(args.job):
        raise UsageError(f"{args.job!r} is a target, not a job file: pass -t {args.job}")
    job = _load_job(args.job) if args.job else None
    config = userconfig.load(profile=args.profile)
    assignments = _assignments(args)
    models = {
        name: get_backend_class(name).settings_model for name in sorted(known) if not args.target or name == args.target
    }
    problems = unused(assignments, {name: model.model_fields for name, model in models.items()})
    if problems:
        raise SpecError(problems)
    rows: list[dict[str, Any]] = []
    for name, model in models.items():
        layers = config.layers(name)
        check_config(model, layers)
        overrides = scoped(assignments, name, model.model_fields, known, only_target=bool(args.target))
        section = job.targets.get(name) if job is not None else None
        given = sourced(model, config=layers, section=section, overrides=overrides, environ=os.environ)
        entry, settings = known[name], redact_all(described(model, name, given))
        rows.append({"target": name, "summary": entry.summary, "install": entry.install_hint, "settings": settings})
    if args.json:
        _print_json(rows)
        return ExitCode.OK
    for row in rows:
        _show(f"{row['target']}: {row['summary']}  ({row['install']})")
        for setting in row["settings"]:
            default = "required" if setting["required"] else f"default {json.dumps(setting['default'])}"
            origin, value = setting["origin"], json.dumps(setting["value"])
            value = (
                "not set"
                if origin is None
                else f"{value} (the default)"
                if origin == DEFAULT
                else f"{value} from {origin}"
            )
            _show(f"  {setting['name']} ({default}): {setting['description']}\n      value: {value}")
            _show(f"      set with: {', '.join(setting['from'])}")
    return ExitCode.OK


def cmd_config(args: argparse.Namespace) -> int:
    """`crosstrain config get|set|unset|list|path`: the config file's keys, each checked against its target's
    settings (`crosstrain.userconfig`) before it is written."""
    from crosstrain import userconfig
    from crosstrain.safe import redact_all

    path, said = userconfig.config_path()
    if path is None:  # pragma: no cover - the process environment always has a home
        raise SpecError([Problem("$CROSSTRAIN_CONFIG", "no config file: no home folder", "set $CROSSTRAIN_CONFIG")])
    source, exists = userconfig.shown(path), path.exists()
    if args.action == "path":
        if args.json:
            _print_json({"file": str(path), "exists": exists, "from": said})
        else:
            _show(str(path))
        return ExitCode.OK
    config = userconfig.load(ambient=False)
    if args.action == "list":
        values, active = redact_all(userconfig.listing(config)), os.environ.get(userconfig.PROFILE_ENV) or None
        if args.json:
            _print_json({"file": str(path), "exists": exists, "profile": active, "profiles": config.profiles,
                         "settings": values})  # fmt: skip
            return ExitCode.OK
        in_use = f" (profile in use: {active}, from ${userconfig.PROFILE_ENV})" if active else ""
        _say(
            f"# {source}{in_use}"
            if values
            else f"{source} sets nothing: `crosstrain config set TARGET.SETTING VALUE` writes there"
        )
        for name, value in values.items():
            _show(f"{name} = {json.dumps(value, ensure_ascii=False)}")
        return ExitCode.OK
    key = userconfig.parse_key(args.key, args.profile)
    found, value = userconfig.stored(config, key)
    model = userconfig.model_for(key, stored=found and args.action != "set")
    if args.action == "set":
        value = userconfig.value_for(model, key, args.value)
        userconfig.set_value(path, key, value)
        done = {"key": str(key), "value": redact_all(value), "file": str(path)}
        _say(f"set {key} = {json.dumps(value)} in {source}")
    elif args.action == "unset":
        done = {"key": str(key), "removed": userconfig.unset_value(path, key), "file": str(path)}
        _say(f"removed {key} from {source}" if done["removed"] else f"{key} was not set in {source}: nothing to remove")
    else:
        done = {"key": str(key), "value": redact_all(value), "set": found, "file": str(path)}
        if not found:
            _say(f"{key} is not set in {source}")
        elif not args.json:
            _show(value if isinstance(value, str) else json.dumps(value))
    if args.json:
        _print_json(done)
    return ExitCode.OK


def cmd_completion(args: argparse.Namespace) -> int:
    from crosstrain.completion import script
    from crosstrain.registry import entries, get_backend_class

    targets = sorted(entries())
    emulations = ["torchrun", *(name for entry in BUILTIN_BACKENDS.values() for name in entry.emulations)]
    formats = sorted({fmt for name in BUILTIN_BACKENDS for fmt in get_backend_class(name).formats})
    known = {"--target": targets, "--emulate": emulations, "--format": formats}
    print(script(build_parser(), args.shell, known))
    return ExitCode.OK


def cmd_catalog(args: argparse.Namespace) -> int:
    from crosstrain import catalog

    platforms = [p for p in catalog.PLATFORMS if not args.target or p.split("-")[0] == args.target]
    if not platforms:
        raise SpecError(
            [
                Problem(
                    "--target",
                    f"the catalog has no target {args.target!r}",
                    f"use one of {', '.join(sorted({p.split('-')[0] for p in catalog.PLATFORMS}))}",
                )
            ]
        )
    rows: list[dict[str, Any]] = []
    for platform in platforms:
        for gpu, offer in catalog.OFFERS[platform].items():
            for count in offer.counts():
                machines = list(offer.machines.get(count, ())) or [offer.family_counts[count]]
                rows.append(
                    {
                        "target": platform,
                        "gpu": gpu,
                        "count": count,
                        "machine_types": machines,
                        "accelerator": offer.accelerator,
                        "note": offer.note,
                    }
                )
    if args.json:
        _print_json(rows)
        return ExitCode.OK
    table = [
        (r["target"], f"{r['gpu']}:{r['count']}", ", ".join(r["machine_types"]), r["accelerator"] or "") for r in rows
    ]
    if sys.stdout.isatty():  # a person: a header and aligned columns
        _print_table(("TARGET", "GPUS", "MACHINE TYPES", "ACCELERATOR"), table)
    else:  # a script: one offer per line, tab-separated
        for row in table:
            _show("\t".join(row))
    return ExitCode.OK


COMMANDS = {
    "render": cmd_render,
    "validate": cmd_validate,
    "run": cmd_run,
    "submit": cmd_submit,
    "status": cmd_status,
    "wait": cmd_wait,
    "cancel": cmd_cancel,
    "list": cmd_list,
    "logs": cmd_logs,
    "schema": cmd_schema,
    "catalog": cmd_catalog,
    "targets": cmd_targets,
    "config": cmd_config,
    "completion": cmd_completion,
    "prices": cli_verbs.cmd_prices,
    "check": cli_verbs.cmd_check,
}


def entry() -> NoReturn:
    """The `crosstrain` command: `main`, then an exit that does not tear the interpreter down. Freeing every
    module and object one by one takes about 28 ms after a cold render, a seventh of it, and nothing needs it:
    the exit handlers run (temporary folders removed, logs flushed) and the output is flushed, as at any exit.
    Where a thread other than the main one is still alive, the exit is the ordinary one, which waits for it.
    mypy exits so too."""
    code = main()
    if threading.active_count() > 1:
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):  # main flushed the command's output; this is what came after it
        try:
            if stream is not None:
                stream.flush()
        except (BrokenPipeError, ValueError):  # the reader left (`| head`), as main takes it; or it was closed
            pass
        except OSError:  # output that could not be written is a failure, as at Python's own exit
            code = code or ExitCode.ERROR
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for stream in (sys.stdout, sys.stderr):  # text that cannot be encoded is escaped, not a crash
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
    options = argv[: argv.index("--")] if "--" in argv else argv
    as_json = "--json" in options
    verb = next((arg for arg in options if arg in COMMANDS), "")
    try:
        named = _unknown_verb(options)
        args = build_parser(named).parse_args(argv)
        verb, as_json = args.verb, bool(getattr(args, "json", False))
        if verb in cli_verbs.VALIDATING:
            cli_verbs.without_pydantic_plugins()
        code = int(COMMANDS[args.verb](args))
        if sys.stdout is not None:  # what is still buffered, written here: a full disk is said, not lost at exit
            sys.stdout.flush()
        return code
    except CrosstrainError as exc:
        _report(verb, exc, str(exc), as_json, extra={"job_may_exist": True} if getattr(exc, "job_may_exist", 0) else {})
        return int(exc.exit_code)
    except Stopped as stopped:
        _report(verb, None, f"stopped by {signal.Signals(stopped.signum).name}", as_json, error="Interrupted")
        return 128 + stopped.signum
    except KeyboardInterrupt:
        _report(verb, None, "interrupted", as_json, error="Interrupted")
        return ExitCode.INTERRUPTED
    except BrokenPipeError:  # whoever read stdout stopped (`| head`): nothing more can be said there
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return ExitCode.OK
    except OSError as exc:  # the machine said no (a full disk, a file where a folder should be): not a bug
        where = f": {cut(redact(str(exc.filename)), 200)}" if exc.filename else ""
        _report(verb, None, f"{exc.strerror or exc}{where}", as_json, error=type(exc).__name__)
        return ExitCode.ERROR
    except Exception as exc:  # a bug: say so in one line, not a traceback (CROSSTRAIN_DEBUG=1 shows it)
        if os.environ.get("CROSSTRAIN_DEBUG"):
            import traceback

            traceback.print_exc()
        detail = f"{type(exc).__name__}: {cut(redact(str(exc)), 200)}" if str(exc) else type(exc).__name__
        message = (
            f"unexpected error ({detail}). This is a bug in crosstrain: please report it with the command you ran"
            + ("" if os.environ.get("CROSSTRAIN_DEBUG") else " and the traceback that CROSSTRAIN_DEBUG=1 prints")
        )
        _report(verb, None, message, as_json, error=type(exc).__name__, extra={"bug": True})
        return ExitCode.ERROR


def _unknown_verb(options: list[str]) -> str | None:
    """The verb the command line names (None where it names none: `--help`, `--version`); a mistyped one is
    refused with the closest verb (argparse lists them all, which helps less)."""
    word = next((arg for arg in options if not arg.startswith("-")), None)
    if word is None or word in COMMANDS:
        return word
    close = closest(word, COMMANDS)
    hint = f"did you mean `crosstrain {close}`?" if close else f"the commands: {', '.join(COMMANDS)}"
    build_parser().print_usage(sys.stderr)  # as argparse's own usage errors do
    raise UsageError(f"{word!r} is not a crosstrain command: {hint}")


def _report(
    verb: str,
    exc: CrosstrainError | None,
    message: str,
    as_json: bool,
    *,
    error: str = "",
    extra: dict[str, Any] | None = None,
) -> None:
    """An error on stderr and, under --json, as one JSON object on stdout, redacted whatever raised it (an
    unexpected exception's text included). Never raises."""
    message = redact(message)
    with contextlib.suppress(Exception):
        if as_json:
            problems = [p.to_dict() for p in getattr(exc, "problems", ())]
            data = {"error": error or type(exc).__name__, "message": message, "problems": problems, **(extra or {})}
            _print_json(data)
            if sys.stdout is not None:
                sys.stdout.flush()
    with contextlib.suppress(Exception):
        headline = f"crosstrain {verb}:" if verb else "crosstrain:"
        on = colour.enabled(sys.stderr)
        print(f"{colour.paint(headline, colour.BOLD + colour.RED, on)} {terminal(message)}", file=sys.stderr)


if __name__ == "__main__":
    entry()
