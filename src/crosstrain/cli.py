"""`crosstrain`: render, validate, submit and follow training jobs.

Results go to stdout (JSON, or a native form with --format); narration and progress go to stderr.
Exit codes: 0 ok, 1 unexpected error, 2 invalid spec or usage (or a spec the target cannot express),
3 submission failed, 4 the job failed while waiting, 5 --timeout expired while waiting.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from crosstrain.errors import CrosstrainError, ExitCode, JobFailed, Problem, SpecError, WaitTimeout

EPILOG = """exit codes: 0 ok, 1 unexpected error, 2 invalid spec or usage, 3 submission failed,
4 job failed while waiting, 5 still running when --timeout expired"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse's own exit code for usage errors is 2 as well
        self.print_usage(sys.stderr)
        self.exit(ExitCode.INVALID, f"{self.prog}: error: {message}\n")


def _say(message: str) -> None:
    print(message, file=sys.stderr)


def _print_json(data: Any, out: TextIO | None = None) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False), file=out or sys.stdout)


def _spec_args(p: argparse.ArgumentParser, *, many_targets: bool = False) -> None:
    p.add_argument("job", help="job file (YAML or JSON), or - for stdin")
    if many_targets:
        p.add_argument(
            "-t",
            "--target",
            action="append",
            help="target to check (repeatable); default: every target in the job file's targets section",
        )
    else:
        p.add_argument("-t", "--target", help="where to run; default: the job file's only target")
    p.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="target setting, overriding the job file and environment (repeatable)",
    )


def _local_args(p: argparse.ArgumentParser) -> None:
    local = p.add_argument_group("on this machine (the local target)")
    local.add_argument("--local", action="store_true", help="same as --target local")
    local.add_argument(
        "--emulate",
        metavar="PLATFORM",
        help="whose environment each node gets: torchrun (default), vertex, aiplatform, azureml, azureml-mpi, "
        "databricks",
    )
    local.add_argument("--nodes", type=int, metavar="N", help="run at most N of the job's nodes")
    local.add_argument("--nproc-per-node", type=int, metavar="M", help="processes per node (default: the job's)")


def _run_id_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run-id", help="identity suffix; 'new' makes a fresh one so the same spec runs again")


def _handle_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("handle", help="what `crosstrain submit` printed: the text itself, a file holding it, or -")
    p.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="where this machine sends credentials (e.g. host=https://..., project=...), over the environment; "
        "the handle must match it (repeatable)",
    )


def _handle_settings(args: argparse.Namespace) -> dict[str, Any]:
    from crosstrain.settings import parse_assignments

    return dict(parse_assignments(args.settings))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="crosstrain",
        description="One job spec, many clouds: render and submit distributed PyTorch training jobs.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB", parser_class=_Parser)

    def verb(name: str, help_text: str) -> argparse.ArgumentParser:
        p = verbs.add_parser(name, help=help_text, description=help_text, epilog=EPILOG)
        p.add_argument("--json", action="store_true", help="machine-readable output on stdout, errors included")
        return p

    p = verb("render", "print every HTTP call submit would make, without sending anything (dry run)")
    _spec_args(p)
    _local_args(p)
    _run_id_arg(p)
    p.add_argument("--format", default="json", help="json (default) or a native form the target offers")
    p = verb("validate", "check a job file, and that each target can run it")
    _spec_args(p, many_targets=True)
    p = verb("run", "run a job to its end: here with --local, else submit it and wait; exit 4 if it fails")
    _spec_args(p)
    _local_args(p)
    _run_id_arg(p)
    p.add_argument("--timeout", type=float, help="with a cloud target: stop waiting after this many seconds")
    p = verb("submit", "send a job (or a rendered request saved as JSON); print its handle on stdout")
    _spec_args(p)
    _local_args(p)
    _run_id_arg(p)
    p.add_argument("--wait", action="store_true", help="then wait until the job ends")
    p.add_argument("--timeout", type=float, help="with --wait: give up after this many seconds")
    p = verb("status", "print a submitted job's state")
    _handle_arg(p)
    p = verb("wait", "wait until a job ends; exit 4 unless it succeeded")
    _handle_arg(p)
    p.add_argument("--timeout", type=float, help="give up after this many seconds (exit 5)")
    p.add_argument("--poll", type=float, default=10.0, help="first poll interval in seconds (default 10)")
    p = verb("cancel", "cancel a submitted job")
    _handle_arg(p)
    p = verb("logs", "print a job's logs")
    _handle_arg(p)
    verb("schema", "print the JSON Schema of job files (for editors and CI checks)")
    p = verb("catalog", "list the GPUs and machine types each target offers")
    p.add_argument("-t", "--target", help="only this target's offers")
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("crosstrain")
    except PackageNotFoundError:
        return "unknown"


def _read_text(source: str) -> str:
    if source == "-":
        return sys.stdin.read()
    path = Path(source)
    return path.read_text(encoding="utf-8") if path.is_file() else source


def _load_handle(source: str) -> Any:
    from crosstrain.backends.base import JobHandle

    text = _read_text(source).strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("handle"), str):
        text = data["handle"]  # the --json form of `submit`
    return JobHandle.loads(text)


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    from crosstrain.settings import parse_assignments

    settings: dict[str, Any] = dict(parse_assignments(args.settings))
    local = {"emulate": "emulate", "nodes": "nodes", "nproc_per_node": "nproc_per_node"}
    given = {key: getattr(args, attr) for attr, key in local.items() if getattr(args, attr, None) is not None}
    if given and _target(args) != "local":
        flags = ", ".join("--" + attr.replace("_", "-") for attr in given)
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
    from crosstrain import api
    from crosstrain.backends import create_backend

    job = api.with_run_id(_load_job(args.job), args.run_id)
    target = api.choose_target(job, _target(args))
    backend = create_backend(target)
    request = backend.render(job, api.target_settings(target, args.job, _settings(args)))
    for note in request.notes:
        _say(f"note: {note}")
    print(request.to_json() if args.json else backend.format(request, args.format))
    return ExitCode.OK


def _load_job(source: str) -> Any:
    from crosstrain.loader import load_job

    return load_job(source)


def cmd_validate(args: argparse.Namespace) -> int:
    from crosstrain import api

    job = _load_job(args.job)
    results = api.validate(job, args.target, settings=_settings(args))
    ok = not any(results.values())
    if args.json:
        _print_json(
            {
                "valid": ok,
                "job": job.name,
                "targets": {t: [p.to_dict() for p in ps] for t, ps in results.items()},
            }
        )
    else:
        _say(f"{args.job}: the spec is valid")
        for target, problems in results.items():
            _say(f"  {target}: " + ("ok" if not problems else "cannot run it"))
            for problem in problems:
                _say("    - " + str(problem).replace("\n", "\n      "))
    return ExitCode.OK if ok else ExitCode.INVALID


def cmd_submit(args: argparse.Namespace) -> int:
    from crosstrain import api
    from crosstrain.loader import job_from_dict, parse_text

    text = _read_text(args.job) if args.job == "-" or args.job.endswith(".json") else None
    request = api.read_request(text) if text is not None else None
    if request is not None:
        handle = api.submit(request, **_handle_settings(args))  # --set: what the request must match
    else:
        job = job_from_dict(parse_text(text, args.job), source=args.job) if text is not None else _load_job(args.job)
        job = api.with_run_id(job, args.run_id)
        target = api.choose_target(job, _target(args))
        handle = api.submit(job, target, **api.target_settings(target, args.job, _settings(args)))
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
    if args.wait:
        return _wait(handle, args.timeout, 10.0, args.json)
    return ExitCode.OK


def cmd_run(args: argparse.Namespace) -> int:
    from crosstrain import api

    job = api.with_run_id(_load_job(args.job), args.run_id)
    target = api.choose_target(job, _target(args))
    settings = api.target_settings(target, args.job, _settings(args))
    if target != "local":
        handle = api.submit(job, target, **settings)
        _say(f"submitted {handle.identity} to {handle.target}" + (" (it existed already)" if handle.adopted else ""))
        return _wait(handle, args.timeout, 10.0, args.json)
    # With --json, stdout holds only the result: the processes' output goes to stderr with the narration.
    with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
        handle = api.submit(job, target, **settings)
    status = handle.status()
    if args.json:
        _print_json({"identity": handle.identity, **status.to_dict(), "outcome": handle.ref.get("outcome")})
    return ExitCode.OK if status.state.value == "SUCCEEDED" else ExitCode.JOB_FAILED


def _wait(
    handle: Any, timeout: float | None, poll: float, as_json: bool, settings: dict[str, Any] | None = None
) -> int:
    _say(f"waiting for {handle.identity}...")
    try:
        status = handle.wait(timeout, poll_interval=poll, **(settings or {}))
    except (JobFailed, WaitTimeout) as exc:
        status = handle.status(**(settings or {}))
        if as_json:
            _print_json({"identity": handle.identity, **status.to_dict(), "error": str(exc)})
        _say(str(exc))
        return exc.exit_code
    if as_json:
        _print_json({"identity": handle.identity, **status.to_dict()})
    _say(f"{handle.identity}: {status.state.value}")
    return ExitCode.OK


def cmd_status(args: argparse.Namespace) -> int:
    handle = _load_handle(args.handle)
    status = handle.status(**_handle_settings(args))
    if args.json:
        _print_json({"identity": handle.identity, "target": handle.target, **status.to_dict()})
    else:
        print(f"{status.state.value}\t{status.native_state}\t{status.message}".rstrip())
    return ExitCode.OK


def cmd_wait(args: argparse.Namespace) -> int:
    return _wait(_load_handle(args.handle), args.timeout, args.poll, args.json, _handle_settings(args))


def cmd_cancel(args: argparse.Namespace) -> int:
    handle = _load_handle(args.handle)
    handle.cancel(**_handle_settings(args))
    if args.json:
        _print_json({"identity": handle.identity, "cancelled": True})
    _say(f"asked {handle.target} to cancel {handle.identity}")
    return ExitCode.OK


def cmd_logs(args: argparse.Namespace) -> int:
    handle = _load_handle(args.handle)
    lines = handle.logs(**_handle_settings(args))
    if args.json:
        _print_json({"identity": handle.identity, "lines": list(lines)})
    else:
        for line in lines:
            print(line)
    return ExitCode.OK


def cmd_schema(args: argparse.Namespace) -> int:
    from crosstrain.schema import job_schema

    _print_json(job_schema())
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
    else:
        for r in rows:
            accel = f"  [{r['accelerator']}]" if r["accelerator"] else ""
            print(f"{r['target']:<17} {r['gpu']}:{r['count']:<3} {', '.join(r['machine_types'])}{accel}")
    return ExitCode.OK


COMMANDS = {
    "render": cmd_render,
    "validate": cmd_validate,
    "run": cmd_run,
    "submit": cmd_submit,
    "status": cmd_status,
    "wait": cmd_wait,
    "cancel": cmd_cancel,
    "logs": cmd_logs,
    "schema": cmd_schema,
    "catalog": cmd_catalog,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(COMMANDS[args.verb](args))
    except CrosstrainError as exc:
        if getattr(args, "json", False):
            problems = [p.to_dict() for p in getattr(exc, "problems", ())]
            extra = {"job_may_exist": True} if getattr(exc, "job_may_exist", False) else {}
            _print_json({"error": type(exc).__name__, "message": str(exc), "problems": problems, **extra})
        _say(f"crosstrain {args.verb}: {exc}")
        return int(exc.exit_code)
    except KeyboardInterrupt:
        _say("interrupted")
        return 130
    except BrokenPipeError:
        return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
