"""What the Databricks targets share (one-time runs with TorchDistributor, and AI Runtime runs): the workspace
settings' checks, and the code uploads as the workspace receives them with the checks on where they go.

Both targets upload the same content-addressed code archive to workspace files or a Unity Catalog volume, and
submit through the same `POST /api/2.2/jobs/runs/submit`; each keeps its own package (the platforms are
independent of each other), and this module is what they have in common.
"""

from __future__ import annotations

import base64
import configparser
import dataclasses
import enum
import hashlib
import io
import re
import types as pytypes
import typing
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar
from urllib.parse import parse_qs, quote, unquote, urlparse

from pydantic import field_validator
from pydantic_core import PydanticCustomError

from crosstrain import packaging, uploads
from crosstrain.backends.base import MAX_RESULT_BYTES, Backend
from crosstrain.backends.binding import Binding, Configured, origin_of, shown
from crosstrain.data import Reach
from crosstrain.errors import JobFailed, Problem, SpecError, SubmitError
from crosstrain.frozen import frozen
from crosstrain.records import HttpCall, JobHandle, JobState, JobSummary, Request
from crosstrain.safe import redact
from crosstrain.schemas.generate import Node, sdk_version
from crosstrain.settings import TargetSettings, setting

if TYPE_CHECKING:
    from databricks.sdk import WorkspaceClient
    from databricks.sdk.service.jobs import Run


T = TypeVar("T")


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


#: `life_cycle_state` -> common state, for runs that have not ended.
STATE_MAP: Mapping[str, JobState] = {
    "QUEUED": JobState.QUEUED,
    "PENDING": JobState.QUEUED,
    "BLOCKED": JobState.QUEUED,
    "WAITING_FOR_RETRY": JobState.QUEUED,
    "RUNNING": JobState.RUNNING,
    "TERMINATING": JobState.RUNNING,
    "INTERNAL_ERROR": JobState.FAILED,
}
#: A run that ended (TERMINATED or SKIPPED) succeeded only with this `result_state`; CANCELED is cancelled,
#: everything else (FAILED, TIMEDOUT, SUCCESS_WITH_FAILURES, UPSTREAM_*, ...) is a failure.
SUCCESS, CANCELED = "SUCCESS", "CANCELED"


def state_of(run: Run) -> tuple[JobState, str, str]:
    """The run's common state, its `life_cycle_state[/result_state]` and its `state_message`."""
    state = run.state
    life = state.life_cycle_state.value if state and state.life_cycle_state else "UNKNOWN"
    result = state.result_state.value if state and state.result_state else ""
    message = (state.state_message if state else "") or ""
    native = f"{life}/{result}" if result else life
    if life in ("TERMINATED", "SKIPPED"):
        return {SUCCESS: JobState.SUCCEEDED, CANCELED: JobState.CANCELLED}.get(result, JobState.FAILED), native, message
    if life == "TERMINATING" and result == CANCELED:
        return JobState.CANCELLING, native, message
    return STATE_MAP.get(life, JobState.UNKNOWN), native, message


class WorkspaceSettings(TargetSettings):
    """The settings both Databricks targets have: the workspace, how to authenticate, where uploads go."""

    host: str = setting(
        description="Workspace URL, e.g. https://dbc-1234.cloud.databricks.com.", env=("DATABRICKS_HOST",)
    )
    profile: str | None = setting(
        None,
        description="~/.databrickscfg profile for authentication (DATABRICKS_TOKEN and the other unified-auth "
        "variables are read by the Databricks SDK itself).",
        env=("DATABRICKS_CONFIG_PROFILE",),
    )
    workspace_dir: str = setting(
        "/Workspace/Shared/crosstrain",
        description="Workspace folder that submit uploads to: the code archive under code/<sha of the bundle>/.",
    )
    volume: str | None = setting(
        None,
        description="A Unity Catalog volume folder (/Volumes/<catalog>/<schema>/<volume>[/folder]) for the code "
        "archive, under code/<sha of the bundle>/: for archives over the workspace import's 10 MB.",
    )

    @field_validator("volume")
    @classmethod
    def _volume(cls, value: str | None) -> str | None:
        return check_volume(value)

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        return check_host(value)

    @field_validator("workspace_dir")
    @classmethod
    def _workspace_dir(cls, value: str) -> str:
        return check_workspace_dir(value)


#: `dbfs/read` returns at most 1 MB per call.
_DBFS_READ = 1024 * 1024


class WorkspaceFiles:
    """Files in DBFS (`dbfs:/...`) or a Unity Catalog volume (`/Volumes/...`), read by size and byte range."""

    def __init__(self, w: WorkspaceClient, call: Callable[[Callable[[], Any], str], Any], *, dbfs: bool) -> None:
        self.w, self.call, self.dbfs = w, call, dbfs

    @staticmethod
    def path(location: str) -> tuple[str, bool]:
        """A location as the API names it (DBFS paths without `dbfs:`), and whether it is in DBFS."""
        if location.startswith("dbfs:"):
            return "/" + location.removeprefix("dbfs:").lstrip("/"), True
        return location, False

    def size(self, path: str) -> int | None:
        """The file's size; None where there is no such file."""
        from crosstrain.adaptors import databricks as adaptor

        if self.dbfs:
            info = self.call(partial(adaptor.found_or_none, partial(self.w.dbfs.get_status, path)), f"dbfs {path}")
            return None if info is None else int(info.file_size or 0)
        meta = self.call(partial(adaptor.found_or_none, partial(self.w.files.get_metadata, path)), f"fs {path}")
        return None if meta is None else int(meta.content_length or 0)

    def chunk(self, path: str, start: int, end: int) -> bytes:
        """Bytes `start` to `end` (exclusive) of the file."""
        if self.dbfs:
            data = b""
            while start + len(data) < end:
                at = start + len(data)
                read = partial(self.w.dbfs.read, path, offset=at, length=min(_DBFS_READ, end - at))
                got = base64.b64decode(self.call(read, f"dbfs/read {path}").data or "")
                if not got:
                    break
                data += got
            return data

        def ranged() -> bytes:
            headers = {"Accept": "application/octet-stream", "Range": f"bytes={start}-{end - 1}"}
            if self.w.config.workspace_id:  # as the SDK's own Files API calls send it
                headers["X-Databricks-Workspace-Id"] = self.w.config.workspace_id
            answer = self.w.api_client.do("GET", f"/api/2.0/fs/files{quote(path)}", headers=headers, raw=True)
            if not isinstance(answer, dict):
                raise SubmitError(f"fs/files {path}: the workspace answered without the file's contents")
            data = bytes(answer["contents"].read())
            return data[start:end] if len(data) > end - start else data  # a server that ignored the range

        return bytes(self.call(ranged, f"fs/files {path}"))


WS = TypeVar("WS", bound=WorkspaceSettings)
P = TypeVar("P")


#: A Unity Catalog volume, as both kinds of Databricks compute reach one.
VOLUME_REACH = Reach(
    frozenset({None, "mount", "direct"}),
    "every node sees it as files (FUSE) and reads and writes it in place, with no copy",
    "mount (the default) or direct",
)


@frozen
class Recorded:
    """What crosstrain recorded on a run it made: the job's identity and the request's fingerprint ("" or None
    where that run does not carry one)."""

    identity: str | None
    fingerprint: str | None


class WorkspaceBackend(Backend[WS, P]):
    """What both Databricks backends do the same way through databricks-sdk: one client per workspace and
    profile, where credentials may go (the configured workspace, a profile's own host), the uploads of a request
    (content-addressed, each checked where it goes and reused only where it holds its content), reading a run,
    and cancelling one."""

    #: The most a code folder may be without a volume (its archive goes through the workspace import).
    code_limits: ClassVar[packaging.Limits]

    def __init__(self, *, client: WorkspaceClient | None = None, log_interval: float = 30.0, **kwargs: Any) -> None:
        """`client`: a `WorkspaceClient` to use for every call (tests and benchmarks point one at a loopback
        workspace; make it with `crosstrain.adaptors.databricks.workspace_client`, so that its own retries are
        off). Without one, each call site makes one for the settings' or the handle's host and profile."""
        super().__init__(**kwargs)
        self.client = client
        self.log_interval = log_interval  # how often `logs(follow=True)` looks for newly delivered lines

    def result_bytes(self, handle: JobHandle) -> bytes:
        """A function job's result, from the volume (or DBFS) folder under the job's output_dir."""
        path, dbfs = WorkspaceFiles.path(handle.result_at)
        if not (dbfs or path.startswith("/Volumes/")):
            return super().result_bytes(handle)
        files = WorkspaceFiles(self._handle_client(handle), self._safe_call, dbfs=dbfs)
        size = files.size(path)
        if size is None:
            raise JobFailed(f"job {handle.identity} succeeded and left no result at {handle.result_at}")
        if size > MAX_RESULT_BYTES:
            too_many = f"{handle.result_at} holds {size:,} bytes, over {MAX_RESULT_BYTES:,}"
            raise SpecError([Problem("result", too_many, "load it from there")])
        return files.chunk(path, 0, size)

    def _client(self, host: str, profile: str | None) -> WorkspaceClient:
        if self.client is not None:
            return self.client
        from crosstrain.adaptors import databricks as adaptor

        def make() -> WorkspaceClient:  # making one authenticates and probes the host
            return adaptor.workspace_client(
                host, profile=profile, timeout=self.retry.call_timeout, connect_timeout=self.retry.connect_timeout
            )

        return self.cached_client((host, profile), make)

    binding_settings = ("host", "profile")
    binding = Binding(
        origins=None,
        service=None,
        nowhere_else="the Databricks token goes nowhere else",
        made_for="your workspace",
        required=("host",),
        origin_key="host",
        origin_noun="workspace",
        configure_also=", or use a ~/.databrickscfg profile for it",
    )

    def _workspace(self, profile: str | None) -> tuple[str | None, str]:
        """The workspace this machine configures, and where that comes from: an injected client's host, else
        `--set host`, `DATABRICKS_HOST`, crosstrain's config file, else the host of the profile in ~/.databrickscfg
        (the configured profile, else `profile`, else the file's default), as the Databricks SDK reads them."""
        if self.client is not None:
            return origin_of(str(self.client.config.host or "")), "the client crosstrain was given"
        configured = self.configured()
        if "host" in configured:
            return configured["host"], self.configured_source("host")
        return self._profile_host(configured.get("profile") or profile)

    def _profile_host(self, profile: str | None) -> tuple[str | None, str]:
        """The host of `profile` (None: the default one) in the Databricks config file, as the SDK picks it."""
        path = Path(self.environ.get("DATABRICKS_CONFIG_FILE") or "~/.databrickscfg").expanduser()
        parser = configparser.ConfigParser(default_section="\0", interpolation=None)  # DEFAULT is a profile
        try:
            parser.read(path, encoding="utf-8")
        except (configparser.Error, UnicodeDecodeError, OSError):
            return None, f"{path} (unreadable)"
        if profile is None:
            profile = parser.get("__settings__", "default_profile", fallback="").strip() or "DEFAULT"
        host = parser.get(profile, "host", fallback="") if parser.has_section(profile) else ""
        where = f"profile {profile} in {path}"
        if not host:
            return None, where
        try:
            return check_host(host), where
        except ValueError:
            return None, where

    def configured_origin(self, stated: Mapping[str, Any], env: Mapping[str, str]) -> Configured:
        """The workspace this machine configures, for the profile a handle or request names."""
        profile = stated.get("profile")
        host, source = self._workspace(profile if isinstance(profile, str) else None)
        return Configured(host, source if host else f"no DATABRICKS_HOST, no host in {source}")

    def binding_extras(self, stated: Mapping[str, Any], at: str, what: str) -> list[Problem]:
        """The profile a handle or request names: its credentials go to its own host, which must be the one."""
        profile = stated.get("profile")
        if not isinstance(profile, str | None):
            return [Problem(f"{at}.profile", f"{shown(profile)} is not a profile name", f"use the {what} as made")]
        used = self._profile_for(profile)
        found = origin_of(stated.get("host"))
        if used is None or self.client is not None:
            return []
        profile_host, where = self._profile_host(used)
        if profile_host is not None and profile_host != found:
            return [
                Problem(
                    f"{at}.profile",
                    f"{where} is for {profile_host}, not {found}: its credentials would go to another workspace",
                    f"pass --set profile=<the profile of {found}>",
                )
            ]
        return []

    def _profile_for(self, profile: str | None) -> str | None:
        """The profile that authenticates: the configured one, else the one the handle or request names."""
        configured = self.configured().get("profile") if self.client is None else None
        return configured or profile

    def _handle_client(self, handle: JobHandle) -> WorkspaceClient:
        """The client for the handle's workspace, once it is known to be the configured one."""
        self.check_handle(handle)
        profile = handle.ref.get("profile")
        if not self.is_issued(handle):
            profile = self._profile_for(profile)
        return self._client(handle.ref["host"], profile)

    def _safe_call(self, fn: Callable[[], T], what: str) -> T:
        """One SDK call that is safe to repeat (a read, a cancel, an upload), retried as a poll."""
        from crosstrain.adaptors import databricks as adaptor

        return self.retry.poll(lambda: adaptor.call(fn, what))

    def _sent_bundle(self, request: Request) -> packaging.Bundle:
        """The bundle the request uploads, made again: the job's folder (refused if it changed since render), or
        crosstrain's runtime alone."""
        try:
            if request.code is not None:
                limits = packaging.Limits() if request.settings.get("volume") else self.code_limits
                return packaging.check_unchanged(request.code, limits)
            return runtime_bundle()
        except uploads.UploadRefused as refused:
            raise SpecError([refused.problem]) from None

    def _holds(self, w: WorkspaceClient, path: str, expected: bytes, volume: bool) -> bool:
        """Whether `path` holds `expected`, byte for byte. Its name is its content's digest, but a name is no
        proof: a truncated or replaced object is uploaded again, never run. The size first, then what is read
        back (at most one byte more than expected)."""
        from crosstrain.adaptors import databricks as adaptor

        if volume:
            meta = self._safe_call(partial(adaptor.found_or_none, partial(w.files.get_metadata, path)), f"fs {path}")
            if meta is None or int(meta.content_length or 0) != len(expected):
                return False

            def read() -> bytes:
                return WorkspaceFiles(w, lambda fn, what: fn(), dbfs=False).chunk(path, 0, len(expected) + 1)
        else:
            info = self._safe_call(
                partial(adaptor.found_or_none, partial(w.workspace.get_status, path)), f"workspace/get-status {path}"
            )
            if info is None or (info.size is not None and int(info.size) != len(expected)):
                return False

            def read() -> bytes:
                export = adaptor.workspace().ExportFormat.AUTO
                return bytes(w.workspace.download(path, format=export).read(len(expected) + 1))

        held = self._safe_call(read, f"read back {path}")
        return hashlib.sha256(held).digest() == hashlib.sha256(expected).digest()

    def recorded(self, run: Run) -> Recorded | None:
        """What crosstrain recorded on `run` (where each backend records it: a cluster tag, the command script's
        path), or None where the workspace reports nothing of the kind on it."""
        raise NotImplementedError

    def send(self, request: Request) -> JobHandle:
        from crosstrain.adaptors import databricks as adaptor

        trusted = self.is_rendered(request)
        self.check_request(request)
        settings = self.request_settings(request)
        profile = settings.profile if trusted else self._profile_for(settings.profile)
        w = self._client(settings.host, profile)
        if request.sweep is not None:  # one runs/submit per trial, each checked before anything is sent
            from crosstrain.backends import _databricks_sweep

            runs = [adaptor.submit_arguments(c.body) for c in request.calls if _databricks_sweep.is_submit(c)]
            _databricks_sweep.check_runs(request, runs)
            self._upload(w, request, settings)
            return _databricks_sweep.send(self, request, w, settings.host, profile, runs)
        kwargs = adaptor.submit_arguments(request.create.body)  # before anything is sent
        self._upload(w, request, settings)
        # Databricks dedupes by the idempotency token (the identity): a retry after an unknown outcome, or a
        # submit racing another of the same request, gets the run that token started, never a second one.
        waiter = self.retry.create(
            lambda: adaptor.call(lambda: w.jobs.submit(**kwargs), "runs/submit"),
            dedupes=self.capabilities.dedupes_create,
            identity=request.identity,
        )
        run_id = int(waiter.run_id)
        try:
            run = self._read_run(w, run_id)
        except SubmitError as error:
            raise SubmitError(
                f"run {run_id} was submitted with identity {request.identity}, but reading it back failed: {error}."
                " Submit the same job again to adopt it (the idempotency token returns this run)",
                job_may_exist=True,
            ) from error
        recorded = self.recorded(run)
        if recorded is not None:  # a workspace that does not report it leaves nothing to compare
            self.check_same_request(request, recorded.fingerprint, f"run {run_id} on {settings.host}")
        return self.issue(
            JobHandle(
                self.name,
                request.identity,
                str(run_id),
                console_url=run.run_page_url or "",
                ref={"host": settings.host, "profile": profile, "run_id": run_id},
                # runs/submit answers a known token exactly as a new one ({"run_id": N}), and nothing on the run
                # says which submit started it, so a re-submit that got the existing run cannot be told apart.
                adopted=False,
            )
        )

    def list_jobs(self, overrides: Mapping[str, Any] | None = None) -> Iterator[JobSummary]:
        """The workspace's one-time runs (`runs/list`, run_type SUBMIT_RUN) on which crosstrain recorded an
        identity, newest first, each with a handle for status, wait, logs and cancel."""
        from crosstrain.adaptors import databricks as adaptor

        settings = self.list_settings(overrides)
        profile = self._profile_for(settings.profile)
        w = self._client(settings.host, profile)
        jobs = adaptor.jobs()

        def listing() -> list[Any]:
            return list(w.jobs.list_runs(run_type=jobs.RunType.SUBMIT_RUN, expand_tasks=True))

        runs = self._safe_call(listing, f"runs/list on {settings.host}")
        found = [(run, self.recorded(run)) for run in runs if run.run_id is not None]
        from crosstrain.backends import _databricks_sweep as sweeps

        rows: list[JobSummary | list[Any]] = []  # a job's row, or a sweep's trials (one row, where its newest is)
        sweep_rows: dict[str, list[Any]] = {}
        for run, recorded in sorted(found, key=lambda item: -(item[0].start_time or 0)):
            if recorded is None or not recorded.identity:
                continue
            trial = sweeps.trial_of(run, recorded.identity)
            if trial is not None:  # a sweep's trial: one row per sweep
                if trial[0] not in sweep_rows:
                    rows.append(sweep_rows.setdefault(trial[0], []))
                sweep_rows[trial[0]].append((run, recorded.identity, trial[1], trial[2]))
                continue
            state, native, _ = state_of(run)
            console = run.run_page_url or ""
            ref = {"host": settings.host, "profile": profile, "run_id": run.run_id}
            handle = JobHandle(self.name, recorded.identity, str(run.run_id), console_url=console, ref=ref)
            rows.append(JobSummary(recorded.identity, state, native, (run.start_time or 0) / 1000, console, handle))
        for row in rows:
            yield row if isinstance(row, JobSummary) else sweeps.listed(self, settings.host, profile, row)

    #: A run's common state, `life_cycle_state[/result_state]` and message (for the modules the backends share).
    run_state = staticmethod(state_of)

    def _files_at(self, w: WorkspaceClient, location: str) -> tuple[WorkspaceFiles, str]:
        """The volume or DBFS files API for `location`, and its path there."""
        path, dbfs = WorkspaceFiles.path(location)
        return WorkspaceFiles(w, self._safe_call, dbfs=dbfs), path

    def _read_run(self, w: WorkspaceClient, run_id: int) -> Run:
        return self._safe_call(partial(w.jobs.get_run, run_id), f"runs/get {run_id}")

    def _upload(self, w: WorkspaceClient, request: Request, settings: WS) -> None:
        """The request's uploads (every call but the last), each path checked before anything is sent; an upload
        whose content-addressed path holds its content already, or a run's own file that is there, is skipped."""
        from crosstrain.adaptors import databricks as adaptor

        uploads_ = request.calls[:-1]
        if request.sweep is not None:  # a sweep's uploads come before its runs/submit calls, one per trial
            from crosstrain.backends._databricks_sweep import is_submit

            uploads_ = tuple(call for call in request.calls if not is_submit(call))
        for i, call in enumerate(uploads_):  # every path checked before anything is sent
            _check_upload_call(call, settings, f"calls[{i}]")
        bundle = self._sent_bundle(request)
        skip = False
        for call in uploads_:
            body, url = call.body, call.url
            if call.method in ("GET", "HEAD"):  # the content address holds the content -> skip its uploads
                volume = call.method == "HEAD"  # a volume (Files API), else workspace files
                path = _files_path(url, "/api/2.0/fs/files") if volume else _query_path(url)
                writes = next((c for c in uploads_ if isinstance(c.body, dict) and c.body.get("path") == path), None)
                content = writes.body.get("content") if writes is not None else None
                if isinstance(content, dict):  # named by its content: reused only where it holds that content
                    skip = self._holds(w, path, _content(content, bundle), volume)
                else:  # a run's own file (named by the run): there, it is the run's, never overwritten
                    skip = self._safe_call(
                        partial(adaptor.exists, partial(w.workspace.get_status, path)), f"workspace/get-status {path}"
                    )
            elif skip:
                continue
            elif url.endswith("/workspace/mkdirs"):
                self._safe_call(partial(w.workspace.mkdirs, body["path"]), "workspace/mkdirs")
            elif "/fs/directories/" in url:
                folder = _files_path(url, "/api/2.0/fs/directories")
                self._safe_call(partial(w.files.create_directory, folder), "fs/directories")
            elif "/fs/files/" in url:
                data, path = _content(body["content"], bundle), body["path"]

                def put_file(data: bytes = data, path: str = path) -> None:
                    w.files.upload(path, io.BytesIO(data), overwrite=True, use_parallel=False)

                self._safe_call(put_file, "fs/files")
            elif isinstance(body["content"], str):  # a lone training file, inline
                workspace = adaptor.workspace()
                upload = partial(
                    w.workspace.import_,
                    body["path"],
                    content=body["content"],
                    format=workspace.ImportFormat(body["format"]),
                    overwrite=body["overwrite"],
                )
                self._safe_call(upload, "workspace/import")
            else:
                workspace = adaptor.workspace()
                data, path, fmt = (
                    _content(body["content"], bundle),
                    body["path"],
                    workspace.ImportFormat(body["format"]),
                )

                def import_file(data: bytes = data, path: str = path, fmt: Any = fmt) -> None:
                    # A fresh stream per attempt: a retry re-reads the bytes from the start.
                    w.workspace.upload(path, io.BytesIO(data), format=fmt, overwrite=True)

                self._safe_call(import_file, "workspace/import")

    def cancel(self, handle: JobHandle) -> None:
        if "sweep" in handle.ref:  # every trial's run
            from crosstrain.backends import _databricks_sweep

            return _databricks_sweep.cancel(self, handle)
        run_id = int(handle.ref["run_id"])
        self._safe_call(partial(self._handle_client(handle).jobs.cancel_run, run_id), f"runs/cancel {run_id}")
