"""The CLI's parser: every verb and its options, built for the verb a command line names (`build_parser`)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, NoReturn

from crosstrain.errors import UsageError
from crosstrain.registry import BUILTIN_BACKENDS

EPILOG = """exit codes: 0 ok, 1 unexpected error, 2 invalid spec or usage, 3 submission failed,
4 job failed while waiting, 5 still running when --timeout expired, 6 an SDK this needs is not installed,
7 a preflight check failed (check, submit --check), 130 interrupted (143/129: SIGTERM/SIGHUP)"""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """Raise instead of exiting, so `main` reports it like any other error (exit 2, JSON under --json)."""
        self.print_usage(sys.stderr)
        raise UsageError(f"{message} (see `{self.prog} --help`)")

    def _get_formatter(self) -> argparse.HelpFormatter:
        """argparse's formatter at the width it would choose, without `shutil`: argparse makes one for every option
        it adds, and finding the terminal's width through `shutil` imports it (with bz2, lzma: 2 ms of a cold
        command)."""
        return self.formatter_class(prog=self.prog, width=_columns() - 2)  # type: ignore[call-arg]


def _columns() -> int:
    """The terminal's width as `shutil.get_terminal_size` reads it: $COLUMNS, else standard output's, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns if sys.__stdout__ else 0
        except (AttributeError, ValueError, OSError):  # no file number, a closed file, not a terminal
            columns = 0
    return columns or 80


def spec_args(p: argparse.ArgumentParser, *, many_targets: bool = False) -> None:
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
    set_arg(p, "target setting, overriding the job file, the environment and the config file (repeatable)")


def set_arg(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE", help=text)
    profile_arg(p)


def profile_arg(p: argparse.ArgumentParser, text: str = "") -> None:
    p.add_argument(
        "--profile",
        metavar="NAME",
        help=text
        or "the config file's profile to use, over its defaults (default: $CROSSTRAIN_PROFILE; "
        "see `crosstrain config`)",
    )


def local_args(p: argparse.ArgumentParser) -> None:
    local = p.add_argument_group("on this machine (the local target)")
    local.add_argument("--local", action="store_true", help="same as --target local")
    local.add_argument(
        "--emulate",
        metavar="PLATFORM",
        help="whose environment each node gets: torchrun (default), "
        + ", ".join(name for entry in BUILTIN_BACKENDS.values() for name in entry.emulations),
    )
    local.add_argument("--nodes", type=int, metavar="N", help="run at most N of the job's nodes")
    local.add_argument("--nproc-per-node", type=int, metavar="M", help="processes per node (default: the job's)")
    local.add_argument(
        "--input",
        dest="stand_in_inputs",
        action="append",
        metavar="NAME=PATH",
        help="a local folder or file standing in for the job's input NAME (repeatable; targets.local.inputs)",
    )
    local.add_argument(
        "--output",
        dest="stand_in_outputs",
        action="append",
        metavar="NAME=PATH",
        help="a local folder standing in for the job's output NAME (repeatable; targets.local.outputs)",
    )


def run_id_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run-id", help="identity suffix; 'new' makes a fresh one so the same spec runs again")


def handle_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("handle", help="what `crosstrain submit` printed: the text itself, a file holding it, or -")
    set_arg(
        p,
        "where this machine sends credentials (e.g. host=https://..., project=...), over the environment; "
        "the handle must match it (repeatable)",
    )


def build_parser(named: str | None = None) -> argparse.ArgumentParser:
    """crosstrain's parser. Given the verb a command line `named`, only that verb's options are added: every verb
    is still listed with its help, and a cold command skips a hundred other options (argparse makes a help
    formatter, which reads the terminal's size, for each option it adds)."""
    parser = Parser(
        prog="crosstrain",
        description="One job spec, many clouds: render and submit distributed PyTorch training jobs.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=Version)
    # prog given: argparse would make a help formatter to work it out (importing shutil, for the terminal's width)
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB", parser_class=Parser, prog=parser.prog)

    def verb(name: str, help_text: str) -> argparse.ArgumentParser | None:
        """The verb's parser, where its options are wanted (None where the command line named another)."""
        p = verbs.add_parser(name, help=help_text, description=help_text, epilog=EPILOG)
        if named not in (None, name):
            return None
        p.add_argument("--json", action="store_true", help="machine-readable output on stdout, errors included")
        return p

    if p := verb("render", "print every HTTP call submit would make, without sending anything (dry run)"):
        spec_args(p)
        local_args(p)
        run_id_arg(p)
        p.add_argument("--format", default="json", help="json (default) or a native form the target offers")
    if p := verb("validate", "check a job file, and that each target can run it"):
        spec_args(p, many_targets=True)
    if p := verb("run", "run a job to its end: here with --local, else submit it and wait; exit 4 if it fails"):
        spec_args(p)
        local_args(p)
        run_id_arg(p)
        p.add_argument(
            "--timeout", type=duration, help="with a cloud target: stop waiting after this long (600, 90m, 24h)"
        )
    if p := verb("submit", "send a job (or a rendered request saved as JSON); print its handle on stdout"):
        spec_args(p)
        local_args(p)
        run_id_arg(p)
        p.add_argument("--wait", action="store_true", help="then wait until the job ends")
        p.add_argument("--timeout", type=duration, help="with --wait: give up after this long (600, 90m, 24h)")
        p.add_argument(
            "--dry-run",
            action="store_true",
            help="print the request submit would send (as `render --json`); send nothing",
        )
        p.add_argument(
            "--check", action="store_true", help="run `crosstrain check` first; send nothing if it fails (exit 7)"
        )
    if p := verb("status", "print a submitted job's state"):
        handle_arg(p)
    if p := verb("wait", "wait until a job ends; exit 4 unless it succeeded"):
        handle_arg(p)
        p.add_argument("--timeout", type=duration, help="give up after this long (600, 90m, 24h; exit 5)")
        p.add_argument("--poll", type=duration, default=1.0, help="first poll interval (default 1s; backs off to 30s)")
    if p := verb("list", "the jobs crosstrain made on a target, newest first, with state, age and console link"):
        p.add_argument("-t", "--target", default="local", help="where to look (default: local)")
        set_arg(p, "target setting, as for submit (repeatable)")
        p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    if p := verb("cancel", "cancel a submitted job"):
        handle_arg(p)
    if p := verb("logs", "print a job's logs"):
        handle_arg(p)
        p.add_argument("-f", "--follow", action="store_true", help="keep printing lines while the job runs")
        p.add_argument("--trial", type=int, help="a Databricks sweep's trial N only (default: every trial)")
    verb("schema", "print the JSON Schema of job files (for editors and CI checks)")
    if p := verb(
        "targets",
        "list the targets and their settings: each one's value here, where it came from, and where else it can",
    ):
        p.add_argument("job", nargs="?", help="a job file whose targets section counts too (- for stdin)")
        p.add_argument("-t", "--target", help="only this target")
        set_arg(p, "target setting, as for render (repeatable)")
    add_config_parser(verbs, options=named in (None, "config"))
    if p := verb("completion", 'print a shell completion script: eval "$(crosstrain completion bash)"'):
        p.add_argument("shell", choices=("bash", "zsh", "fish"))
    if p := verb("catalog", "list the GPUs and machine types each target offers"):
        p.add_argument("-t", "--target", help="only this target's offers")
    if p := verb("prices", "the list prices crosstrain prices jobs with: source and date"):
        add_prices_parser(p)
    if p := verb("check", "read-only preflight: can each target start the job now, and why not"):
        spec_args(p, many_targets=True)
    return parser


def duration(text: str) -> float:
    """Seconds (`600`, `0.5`) or a duration (`90s`, `15m`, `24h`, `1h30m`), as job files take them."""
    try:
        return float(text)
    except ValueError:
        pass
    from crosstrain.spec_fields import parse_duration

    try:
        return float(parse_duration(text))
    except Exception:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: write seconds (600) or 90m, 24h, 1h30m"
        ) from None


class Version(argparse._VersionAction):
    """`--version`, the version read from the package metadata only when asked (a lookup among every package)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            self.version = f"%(prog)s {version('crosstrain')}"
        except PackageNotFoundError:
            self.version = "%(prog)s unknown"
        super().__call__(parser, namespace, values, option)


CONFIG_HELP = """keys: TARGET.SETTING (vertex.region) for the defaults, profiles.NAME.TARGET.SETTING (or
--profile NAME) for a profile's. Where a value comes from, lowest first: built-in defaults, the config file's
defaults, its profile, environment variables, the job file's targets section, --set. The file:
$CROSSTRAIN_CONFIG, else $XDG_CONFIG_HOME/crosstrain/config.toml, else ~/.config/crosstrain/config.toml."""


def add_config_parser(verbs: Any, *, options: bool) -> None:
    """`crosstrain config ACTION`: gcloud's `config` and az's defaults, for crosstrain's settings; its actions
    and their options only where `options` (the command line named `config`)."""
    text, raw = (
        "read and write this user's defaults for each target (the config file)",
        argparse.RawDescriptionHelpFormatter,
    )
    config = verbs.add_parser(
        "config", help=text, description=f"{text}.\n\n{CONFIG_HELP}", epilog=EPILOG, formatter_class=raw
    )
    if not options:
        return
    actions = config.add_subparsers(dest="action", required=True, metavar="ACTION", parser_class=Parser)
    for name, text, takes in (
        ("get", "print the value the config file sets for KEY", ("key",)),
        ("set", "check VALUE against the target's setting, then write it to the config file", ("key", "value")),
        ("unset", "remove KEY from the config file", ("key",)),
        ("list", "every setting the config file holds, checked against its target", ()),
        ("path", "print where the config file is (whether or not it exists)", ()),
    ):
        p = actions.add_parser(
            name, help=text, description=f"{text}.\n\n{CONFIG_HELP}", epilog=EPILOG, formatter_class=raw
        )
        p.add_argument("--json", action="store_true", help="machine-readable output on stdout, errors included")
        for arg in takes:
            p.add_argument(
                arg,
                metavar=arg.upper(),
                help="TARGET.SETTING, or profiles.NAME.TARGET.SETTING" if arg == "key" else None,
            )
        if takes:
            profile_arg(p, "the profile whose KEY this is (as profiles.NAME.KEY)")


def add_prices_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "items", nargs="*", metavar="ITEM", help="only these machine types, GPUs or VM sizes (a part of the name)"
    )
    p.add_argument("-t", "--target", action="append", help="only this target's prices (repeatable)")
    p.add_argument(
        "--refresh",
        action="store_true",
        help="reread the prices of the table's items from the public price APIs that need no key (Azure's Retail "
        "Prices API) and show what changed",
    )
    p.add_argument(
        "--write", action="store_true", help="with --refresh: save the reread prices in the table crosstrain ships"
    )
    p.add_argument("--api-url", help="with --refresh: read this price API instead (a mirror, or a test's server)")
