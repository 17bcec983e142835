"""Notebook display (`_repr_html_`) for jobs, requests and handles: a summary table and the JSON. Every value is
HTML-escaped with credentials redacted, and the only link, a handle's console, is made only of an http(s) URL."""

from __future__ import annotations

import html
import json
from typing import TYPE_CHECKING, Any

from crosstrain.safe import href, redact

if TYPE_CHECKING:
    from crosstrain.records import JobHandle, Request
    from crosstrain.spec import TrainingJob


def _text(value: str) -> str:
    return html.escape(redact(value))


def _table(title: str, rows: list[tuple[str, Any]]) -> str:
    left = "style='text-align:left'"
    cells = "".join(f"<tr><th {left}>{_text(k)}</th><td {left}>{_text(str(v))}</td></tr>" for k, v in rows)
    return f"<table><caption style='text-align:left'><b>{html.escape(title)}</b></caption>{cells}</table>"


def _json(label: str, data: Any) -> str:
    text = _text(json.dumps(data, indent=2, ensure_ascii=False))
    return f"<details><summary>{html.escape(label)}</summary><pre>{text}</pre></details>"


def job_html(job: TrainingJob) -> str:
    rows: list[tuple[str, Any]] = [("nodes", job.nodes)]
    for pool in job.pools():
        machine = pool.machine
        what = "default machine"
        if machine:
            gpu = f"{machine.accelerator.type}:{machine.accelerator.count}" if machine.accelerator else ""
            what = " ".join(x for x in (machine.type or "", gpu) if x)
        rows.append((pool.role, f"{pool.replicas} x {what} ({pool.image or 'no image'})"))
    if job.sweep is not None:
        sweep = job.sweep
        rows.append(
            (
                "sweep",
                f"{sweep.trial_count} trials ({sweep.algorithm}) of {', '.join(sweep.parameters)}: "
                f"{sweep.goal} {sweep.metric}",
            )
        )
    rows.append(("targets", ", ".join(job.targets) or "-"))
    return _table(f"TrainingJob {job.name}", rows) + _json("spec", job.model_dump(mode="json", exclude_none=True))


def request_html(request: Request) -> str:
    rows: list[tuple[str, Any]] = [("target", request.target), ("identity", request.identity)]
    rows += [(f"call {i + 1}", f"{c.method} {c.url}") for i, c in enumerate(request.calls)]
    rows += [("note", n) for n in request.notes]
    return _table(f"Request for {request.job_name}", rows) + _json("request JSON", request.to_dict())


def handle_html(handle: JobHandle) -> str:
    rows: list[tuple[str, Any]] = [
        ("target", handle.target),
        ("identity", handle.identity),
        ("job id", handle.job_id),
    ]
    return _table("JobHandle", rows) + _trials(handle) + _console(handle.console_url)


def _trials(handle: JobHandle) -> str:
    """A sweep's trials, one row each (its parameters, state and metric, else why it has none), the best marked;
    "" for a job."""
    sweep = (handle.ref.get("outcome") or {}).get("sweep") if isinstance(handle.ref, dict) else None
    if not isinstance(sweep, dict) or not isinstance(sweep.get("trials"), list):
        return ""
    best = (sweep.get("best") or {}).get("trial")
    metric = _text(str(sweep.get("metric", "metric")))
    head = f"<tr><th>trial</th><th>parameters</th><th>state</th><th>{metric}</th></tr>"
    rows = []
    for trial in sweep["trials"]:
        if not isinstance(trial, dict):
            continue
        params = ", ".join(f"{k}={v}" for k, v in (trial.get("params") or {}).items())
        mark = " (best)" if trial.get("trial") == best else ""
        cells = [
            f"{trial.get('trial')}{mark}",
            params,
            trial.get("state", ""),
            trial.get("value", trial.get("note", "")),
        ]
        rows.append("<tr>" + "".join(f"<td>{_text(str(cell))}</td>" for cell in cells) + "</tr>")
    caption = "<caption style='text-align:left'><b>trials</b></caption>"
    return f"<table>{caption}{head}{''.join(rows)}</table>"


def _console(url: str) -> str:
    """The console URL as a link where it is an http(s) one (`crosstrain.safe.href`), else as text: a handle read
    from a file may hold any URL, and `javascript:` would run in the notebook when clicked."""
    if not url:
        return ""
    target = href(url)
    if target is None:
        return f"<p>console: <code>{_text(url)}</code></p>"
    return f'<p><a href="{html.escape(target)}" rel="noopener noreferrer" target="_blank">console</a></p>'
