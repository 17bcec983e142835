"""What the Databricks targets share (one-time runs with TorchDistributor, and AI Runtime runs): the workspace
settings' checks, and the code uploads as the workspace receives them with the checks on where they go.

Both targets upload the same content-addressed code archive to workspace files or a Unity Catalog volume, and
submit through the same `POST /api/2.2/jobs/runs/submit`; each keeps its own package (the platforms are
independent of each other), and this module is what they have in common.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import types as pytypes
import typing
from typing import Any, Protocol
from urllib.parse import parse_qs, quote, unquote, urlparse

from pydantic_core import PydanticCustomError

from crosstrain import packaging, uploads
from crosstrain.backends.binding import shown
from crosstrain.errors import Problem, SpecError
from crosstrain.records import HttpCall
from crosstrain.safe import redact
from crosstrain.schemas.generate import Node, sdk_version


class Workspace(Protocol):
    """The settings that place uploads: the workspace folder, and the volume where one is set."""

    @property
    def workspace_dir(self) -> str: ...

    @property
    def volume(self) -> str | None: ...


_VOLUME = re.compile(r"/Volumes/[^/]+/[^/]+/[^/]+(/.*)?")


def check_host(value: str) -> str:
    """A workspace URL as `scheme://host[:port]`, or ValueError with the fix."""
    value = value.strip().rstrip("/")
    url = urlparse(value if "://" in value else f"https://{value}")
    if url.scheme not in ("http", "https") or not url.hostname or url.path not in ("", "/"):
        raise ValueError(
            f"{redact(value)!r} is not a workspace URL; use one such as https://dbc-1234.cloud.databricks.com"
        )
    return f"{url.scheme}://{url.netloc}"


def check_volume(value: str | None) -> str | None:
    """A Unity Catalog volume folder, without traversal."""
    if value is None:
        return None
    folder = value.rstrip("/")
    if not _VOLUME.fullmatch(folder):
        raise PydanticCustomError(
            "crosstrain",
            f"{value!r} is not a Unity Catalog volume folder",
            {"fix": "use /Volumes/<catalog>/<schema>/<volume>, optionally with a folder under it"},
        )
    try:
        return uploads.check_destination(folder, "volume", absolute=True)
    except uploads.UploadRefused as refused:
        problem = refused.problem
        raise PydanticCustomError("crosstrain", problem.message.replace("{", "{{"), {"fix": problem.fix}) from None


def check_workspace_dir(value: str) -> str:
    """A folder under /Workspace/, without traversal."""
    folder = value.rstrip("/")
    if not folder.startswith("/Workspace/"):
        raise PydanticCustomError(
            "crosstrain", f"{value!r} is not a workspace folder", {"fix": "use a folder under /Workspace/"}
        )
    try:
        return uploads.check_destination(folder, "workspace_dir", absolute=True)
    except uploads.UploadRefused as refused:
        problem = refused.problem
        raise PydanticCustomError("crosstrain", problem.message.replace("{", "{{"), {"fix": problem.fix}) from None


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


def _check_upload_call(call: HttpCall, settings: Workspace, field: str) -> None:
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


def submit_schema() -> Node:
    """The schema of `runs/submit`'s body, from the parameters of databricks-sdk's `JobsAPI.submit` and the
    dataclasses they take; a dataclass field without a default is required."""
    from databricks.sdk.service.jobs import JobsAPI

    found: dict[str, Node] = {}

    def type_node(hint: Any) -> Node:
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin in (typing.Union, pytypes.UnionType):
            options = [a for a in args if a is not type(None)]
            if len(options) == 1:
                return type_node(options[0])
            raise ValueError(f"databricks: a union crosstrain cannot read: {hint}")
        if origin is list:
            return {"type": "array", "items": type_node(args[0])}
        if origin is dict:
            return {"type": "object", "values": type_node(args[1])}
        if hint is Any:
            return {"type": "any"}
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            return {"type": "string", "enum": [member.value for member in hint]}
        if dataclasses.is_dataclass(hint) and isinstance(hint, type):
            return {"$ref": dataclass_ref(hint)}
        simple: dict[Any, Node] = {
            str: {"type": "string"},
            int: {"type": "integer"},
            float: {"type": "number"},
            bool: {"type": "boolean"},
        }
        if hint in simple:
            return dict(simple[hint])
        raise ValueError(f"databricks: a type crosstrain cannot read: {hint}")

    def dataclass_ref(cls: type) -> str:
        name = f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}"
        if name not in found:
            found[name] = {}
            hints = typing.get_type_hints(cls)
            fields = {f.name: type_node(hints[f.name]) for f in dataclasses.fields(cls)}
            found[name] = {"type": "object", "properties": fields}
            required = sorted(
                f.name
                for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            )
            if required:
                found[name]["required"] = required
        return name

    hints = typing.get_type_hints(JobsAPI.submit)
    hints.pop("return")
    found["jobs.submit"] = {}
    found["jobs.submit"] = {"type": "object", "properties": {k: type_node(v) for k, v in sorted(hints.items())}}
    source = f"{sdk_version('databricks-sdk')}: databricks.sdk.service.jobs.JobsAPI.submit and its dataclasses"
    return {"source": source, "root": "jobs.submit", "types": dict(sorted(found.items()))}
