"""CLI verbs beside `crosstrain.cli`: the verbs that look before anything is paid for, `crosstrain prices` (the
price table crosstrain ships, and `--refresh` from the public price APIs) and `crosstrain check` (a read-only
preflight per target), and what the CLI's own process sets up before it validates a job.

`crosstrain.cli_parser` parses their options and `crosstrain.cli` runs them; this module prints as it does
(results on stdout, narration on stderr, every text redacted and made safe for a terminal, `--json` on stdout).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import sys
import types
from typing import Any

from crosstrain.errors import ExitCode, Problem, SpecError
from crosstrain.safe import json_text, redact, terminal

#: The verbs that validate a job: the only ones that build crosstrain's models at start.
VALIDATING = frozenset({"render", "validate", "run", "submit", "check"})


def without_pydantic_plugins() -> None:
    """No pydantic plugin discovery in the CLI's process: it validates only crosstrain's own models, and the
    discovery reads the entry points of every installed distribution (about 50 ms of CPU, an eighth of a cold
    render, with the cloud SDKs installed). pydantic's plugin loader imports `importlib.metadata` as it loads
    (15 ms more), so where it is not loaded yet it is stood in for by a module that finds no plugins and hands
    any other name pydantic asks of it to the real loader, told that there are none. A program that imports
    crosstrain keeps its plugins, and so does every process a run starts."""
    name = "pydantic.plugin._loader"
    if name not in sys.modules:
        stand_in = types.ModuleType(name, "crosstrain's CLI: pydantic's plugin loader, finding no plugins")
        vars(stand_in).update(get_plugins=tuple, __getattr__=functools.partial(_from_plugin_loader, name))
        sys.modules[name] = stand_in
    elif vars(sys.modules[name]).get("_plugins", "absent") is None:  # vars: the stand-in's __getattr__ not asked
        sys.modules[name]._plugins = {}  # type: ignore[attr-defined]


def _from_plugin_loader(name: str, attribute: str) -> Any:
    """What pydantic asks of its plugin loader beyond `get_plugins`, from the real one, with no plugins found
    (a module's own dunder names, which the import system looks for, are not asked of it)."""
    if attribute.startswith("__") and attribute.endswith("__"):
        raise AttributeError(attribute)
    sys.modules.pop(name, None)
    loader = importlib.import_module(name)
    if getattr(loader, "_plugins", "absent") is None:
        loader._plugins = {}  # type: ignore[attr-defined]
    return getattr(loader, attribute)


def _say(message: str) -> None:
    print(terminal(redact(message)), file=sys.stderr)


def _show(text: str) -> None:
    print(terminal(redact(text)))


def _print_json(data: Any) -> None:
    print(json_text(json.dumps(data, indent=2, ensure_ascii=False)))


def _priced_targets(only: list[str] | None) -> list[tuple[str, Any]]:
    from crosstrain.registry import BUILTIN_BACKENDS, get_backend_class

    found = []
    for name in only or list(BUILTIN_BACKENDS):
        cls = get_backend_class(name)
        if cls.price_package is not None:
            found.append((name, cls))
        elif only:
            raise SpecError(
                [Problem("--target", f"{name} prices nothing (it runs on your own machines)", "pick a cloud target")]
            )
    return found


def cmd_prices(args: argparse.Namespace) -> int:
    from crosstrain import pricing

    if (args.write or args.api_url) and not args.refresh:
        raise SpecError([Problem("--write" if args.write else "--api-url", "goes with --refresh", "add --refresh")])
    wanted = [item.lower() for item in args.items]
    rows: list[dict[str, Any]] = []
    refreshed: dict[str, Any] = {}
    for name, cls in _priced_targets(args.target):
        table = pricing.shipped(cls.price_package)
        kept = [p for p in table if not wanted or any(w in p.item.lower() for w in wanted)]
        if args.refresh:
            got = cls.refresh_prices(sorted({p.item for p in kept}), args.api_url)
            if got is None:
                _say(f"{name}: no price API without a key; its table stays as shipped")
            else:
                new, said = got
                for line in said:
                    _say(f"{name}: {line}")
                refreshed[name] = _changes(kept, new)
                if args.write and new:
                    items = {p.item for p in new}
                    merged = [p for p in table if p.item not in items] + new
                    path = pricing.shipped_path(cls.price_package)
                    path.write_text(json.dumps(pricing.dump(merged), indent=1) + "\n", encoding="utf-8")
                    pricing.shipped.cache_clear()
                    _say(f"{name}: wrote {len(new)} prices to {path}")
                kept = new or kept
        rows += [_row(name, p) for p in kept]
    if args.json:
        _print_json({"prices": rows, **({"refreshed": refreshed} if args.refresh else {})})
        return ExitCode.OK
    for row in rows:
        tier = "spot" if row["spot"] else "on-demand"
        _show(
            f"{row['target']:<15} {row['item']:<28} {row['region'] or '(not stated)':<16} {tier:<10} "
            f"${row['usd_per_hour']:>10.4f}/h  read {row['read']}  {row['source']}"
        )
    for name, change in refreshed.items():
        counts = f"{len(change['changed'])} changed, {len(change['new'])} new, {len(change['gone'])} no longer listed"
        _say(f"{name}: {counts}")
        for item in change["changed"]:
            tier = "spot" if item["spot"] else "on-demand"
            _say(f"  {item['item']} {item['region']} {tier}: {item['was']} -> {item['now']}")
    if not rows:
        _say("no prices match")
    return ExitCode.OK


def _row(target: str, price: Any) -> dict[str, Any]:
    return {
        "target": target,
        "item": price.item,
        "region": price.region,
        "spot": price.spot,
        "usd_per_hour": price.usd_per_hour,
        "source": price.source.url,
        "read": price.source.read,
    }


def _changes(old: list[Any], new: list[Any]) -> dict[str, list[dict[str, Any]]]:
    was = {(p.item, p.region, p.spot): p.usd_per_hour for p in old}
    now = {(p.item, p.region, p.spot): p.usd_per_hour for p in new}

    def key(k: tuple[str, str, bool]) -> dict[str, Any]:
        return {"item": k[0], "region": k[1], "spot": k[2]}

    return {
        "changed": [{**key(k), "was": was[k], "now": v} for k, v in sorted(now.items()) if k in was and was[k] != v],
        "new": [{**key(k), "now": v} for k, v in sorted(now.items()) if k not in was],
        "gone": [key(k) for k in sorted(was) if k not in now],
    }


def cmd_check(args: argparse.Namespace) -> int:
    """`crosstrain check JOB [-t TARGET]...`: exit 0 when every check of every target passes, 7 when one fails."""
    from crosstrain import api, untrusted
    from crosstrain.loader import job_from_dict
    from crosstrain.settings import parse_assignments

    text, name = untrusted.read_text(args.job, untrusted.JOB)
    job = job_from_dict(untrusted.parse_yaml(text, untrusted.JOB, name), source=name).loaded_from(args.job)
    reports = api.check(job, args.target, settings=parse_assignments(args.settings), config_profile=args.profile)
    return show_reports(list(reports.values()), as_json=args.json)


def show_reports(reports: list[Any], *, as_json: bool, out: Any = None) -> int:
    """Print the reports (JSON on stdout, or a line per check); the exit code they mean."""
    ok = all(report.ok for report in reports)
    if as_json:
        _print_json({"ok": ok, "targets": {report.target: report.to_dict() for report in reports}})
    else:
        show = _show if ok else _say
        for report in reports:
            show(f"{report.target}: " + ("can start the job now" if report.ok else "cannot start the job now"))
            for check in report.checks:
                show("  " + str(check).replace("\n", "\n  "))
    if not reports:
        _say("no target to check: the job file names none (pass -t TARGET)")
    return ExitCode.OK if ok and reports else ExitCode.CHECK_FAILED


def told(handle: Any) -> Any:
    """`handle`, having said on stderr which attempt of a run with `fallback:` it follows and why the attempts
    before it were passed over (nothing for a job without fallback)."""
    from crosstrain.fallback import history

    for line in history(handle):
        _say(line)
    return handle
