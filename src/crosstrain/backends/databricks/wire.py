"""Uploads and the code bundle as the workspace receives them, and the checks on where they go."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, unquote, urlparse

from crosstrain import packaging, uploads
from crosstrain.backends.binding import shown
from crosstrain.backends.databricks.settings import DatabricksSettings
from crosstrain.errors import Problem, SpecError
from crosstrain.records import HttpCall

if TYPE_CHECKING:
    from databricks.sdk.service.jobs import Run


def _under(root: Path, target: str) -> bool:
    """Whether `target`, as written, names a path under `root` (symlinks aside)."""
    return Path(os.path.normpath(root / target)).is_relative_to(root)


def runtime_bundle() -> packaging.Bundle:
    """The bundle of crosstrain's runtime alone, for a job without `code:` (its training file is uploaded on
    its own, or is on the cluster): the same archive for every such job of this crosstrain version."""
    return packaging.bundle(None)


_ARCHIVES: dict[str, bytes] = {}


def archive_of(bundle: packaging.Bundle) -> bytes:
    """The bundle's archive, made once per digest (render measures it, send uploads it)."""
    if bundle.digest not in _ARCHIVES:
        if len(_ARCHIVES) > 4:
            _ARCHIVES.clear()
        _ARCHIVES[bundle.digest] = bundle.archive()
    return _ARCHIVES[bundle.digest]


def _check_call(host: str, path: str, purpose: str) -> HttpCall:
    return HttpCall(
        "GET",
        f"{host}/api/2.0/workspace/get-status?path={quote(path)}",
        None,
        {"Accept": "application/json"},
        purpose=purpose,
    )


def _query_path(url: str) -> str:
    return parse_qs(urlparse(url).query).get("path", [""])[0]


def _files_path(url: str, prefix: str) -> str:
    return unquote(urlparse(url).path.removeprefix(prefix))


def _content(content: Any, bundle: packaging.Bundle) -> bytes:
    """The bytes a rendered upload describes: the bundle's archive, or one of its files, checked against the
    digest the request names (a request edited to name other content is refused)."""
    if isinstance(content, dict) and content.get("archive") == packaging.ARCHIVE_NAME:
        if content.get("sha256 of the bundle") == bundle.digest:
            return archive_of(bundle)
    elif isinstance(content, dict) and "bundle file" in content:
        for file in bundle.files:
            if file.path == content["bundle file"] and file.sha256 == content.get("sha256"):
                return file.read()
    raise SpecError(
        [
            Problem(
                "calls.body.content",
                f"{shown(content)} is not this request's code bundle (sha256 {bundle.short})",
                "render the request again instead of editing what it uploads",
            )
        ]
    )


def _check_upload_call(call: HttpCall, settings: DatabricksSettings, field: str) -> None:
    """A (possibly edited) request writes only under its settings' workspace folder or volume, by a path
    without traversal."""
    if call.method == "GET":
        _check_upload_path(_query_path(call.url), (settings.workspace_dir,), f"{field}.url")
    elif call.method == "HEAD":
        _check_upload_path(_files_path(call.url, "/api/2.0/fs/files"), (settings.volume,), f"{field}.url")
    elif "/fs/directories/" in call.url:
        _check_upload_path(_files_path(call.url, "/api/2.0/fs/directories"), (settings.volume,), f"{field}.url")
    elif "/fs/files/" in call.url:
        path = call.body["path"]
        if _files_path(call.url, "/api/2.0/fs/files") != path:
            raise SpecError([Problem(f"{field}.url", "the URL and the body name other files", "render again")])
        _check_upload_path(path, (settings.volume,), f"{field}.body.path")
    else:
        _check_upload_path(call.body["path"], (settings.workspace_dir,), f"{field}.body.path")


def _check_upload_path(path: str, folders: tuple[str | None, ...], field: str) -> None:
    """`path` is under one of `folders`, without traversal."""
    uploads.check_destination(path, field, absolute=True)
    if not any(folder and path.startswith(f"{folder}/") for folder in folders):
        raise SpecError(
            [
                Problem(
                    field,
                    f"{path!r} is outside {' and '.join(f for f in folders if f) or 'the upload folders'}",
                    "render the request again instead of editing where it uploads",
                )
            ]
        )


def _cluster_tags(run: Run) -> dict[str, str] | None:
    """The custom tags of the run's cluster ({} on a run that crosstrain did not make, or made before it recorded
    fingerprints), or None where the workspace reports no task's cluster."""
    clusters = [task.new_cluster for task in run.tasks or [] if task.new_cluster is not None]
    if not clusters:
        return None
    return {str(k): str(v) for cluster in clusters for k, v in (cluster.custom_tags or {}).items()}
