"""The Azure ML wire vocabulary: ARM paths, environment references, code-asset calls, data bindings."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from crosstrain import code_archive, data, folders, packaging
from crosstrain.adaptors import azure
from crosstrain.adaptors.http import unreadable
from crosstrain.backends.azureml.settings import (
    _ARM_ENVIRONMENT,
    _LABELLED_ENVIRONMENT,
    _NAMED_ENVIRONMENT,
    _REGISTRY_ENVIRONMENT,
    API_VERSION,
    ARM,
    BLOB_CONTAINER,
    BLOB_STORE,
    CODE_API_VERSION,
    CODE_HASH_VERSION,
    DATASTORE_API_VERSION,
    DATASTORE_URI,
    ENVIRONMENT_API_VERSION,
    FINGERPRINT_PROPERTY,
    LOCAL_UPLOAD,
    SAS_CONTAINER,
    STORE_CONTAINER,
    AzureMLSettings,
)
from crosstrain.errors import Problem, SubmitError
from crosstrain.frozen import frozen
from crosstrain.records import HttpCall, Request

if TYPE_CHECKING:
    from crosstrain.spec import TrainingJob


# -- wire helpers ------------------------------------------------------------------------------------------
def workspace_path(settings: AzureMLSettings) -> str:
    return (
        f"/subscriptions/{settings.subscription_id}/resourceGroups/{settings.resource_group}"
        f"/providers/Microsoft.MachineLearningServices/workspaces/{settings.workspace}"
    )


def environment_reference(value: str, workspace: str) -> str | None:
    """`properties.environmentId` for an environment reference, as azure-ai-ml 1.35.2 writes it (verified with
    its recording transport in the tests): `[azureml:]NAME:VERSION` becomes the version's ARM id,
    `[azureml:]NAME@latest` goes on as `azureml:NAME@latest` (the service resolves the label; the SDK makes no
    call), registry URIs and ARM ids go on verbatim. None: not a reference."""
    if _ARM_ENVIRONMENT.fullmatch(value) or _REGISTRY_ENVIRONMENT.fullmatch(value):
        return value
    bare = value.removeprefix("azureml:")
    labelled = _LABELLED_ENVIRONMENT.fullmatch(bare)
    if labelled:
        return f"azureml:{labelled['name']}@latest"
    named = _NAMED_ENVIRONMENT.fullmatch(bare)
    if named:
        return f"{workspace}/environments/{named['name']}/versions/{named['version']}"
    return None


def code_content_hash(files: tuple[packaging.CodeFile, ...]) -> str:
    """azure-ai-ml's `_get_file_list_content_hash` (hash version 202208) of the uploaded folder: sha256 over the
    file count, then `#<relative path>#<size>` of each file sorted by lower-cased path, then every file's bytes
    in that order. Memoised by the files' own digests: the bytes are read once per content."""
    key = tuple((f.path, f.size, f.sha256) for f in files)
    cached = _CONTENT_HASHES.get(key)
    if cached is not None:
        return cached
    ordered = sorted(files, key=lambda f: f.path.lower())
    digest = hashlib.sha256(str(len(files)).encode())
    for file in ordered:
        digest.update(f"#{file.path}#".encode())
        digest.update(str(file.size).encode())
    for file in ordered:
        digest.update(file.read())
    if len(_CONTENT_HASHES) > 16:
        _CONTENT_HASHES.clear()
    _CONTENT_HASHES[key] = digest.hexdigest()
    return _CONTENT_HASHES[key]


_CONTENT_HASHES: dict[tuple[tuple[str, int, str], ...], str] = {}


def code_asset_name(bundle: packaging.Bundle, archived: bool = False) -> str:
    """The code asset's name: content-addressed (the SDK picks a random one), so a render is deterministic; an
    archived bundle's (`crosstrain.code_archive`) is named apart, as its blobs differ."""
    return f"crosstrain-{bundle.short}" + ("-archive" if archived else "")


def anonymous_environment_version(image: str, conda: str | None = None) -> str:
    """The version azure-ai-ml gives an anonymous environment built from an image (and a conda file): the
    sha256 of its `hash_str`, made as the SDK makes it (`str.join` of the digests' characters, sic)."""

    def sha(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    text = sha(image)
    if conda:
        text = text.join(sha(conda))
    return sha(text)


def object_hash(folder: folders.Folder) -> str:
    """azure-ai-ml's `get_object_hash` of a local folder or file it uploads (a build context, an input): sha256,
    seeded with its "Initialize for october 2021 AML CLI version", then a file's bytes, or a folder's tree depth
    first, each folder's entries in the order of their lower-cased names: an entry's name, then a file's bytes or
    a folder's own entries. The blob folder the upload goes to is named by it (and a built environment's version
    is its digest). Memoised by the files' digests."""
    key = (
        tuple((f.path, f.size, f.sha256) for f in folder.files),
        folder.dirs,
        folder.is_file,
    )
    cached = _OBJECT_HASHES.get(key)
    if cached is not None:
        return cached
    digest = hashlib.sha256(b"Initialize for october 2021 AML CLI version")
    if folder.is_file:
        digest.update(folder.files[0].read())
    else:
        entries: dict[str, list[tuple[str, packaging.CodeFile | None]]] = {"": []}
        for rel in folder.dirs:
            parent, _, name = rel.rpartition("/")
            entries.setdefault(parent, []).append((name, None))
            entries.setdefault(rel, [])
        for file in folder.files:
            parent, _, name = file.path.rpartition("/")
            entries.setdefault(parent, []).append((name, file))

        def walk(rel: str) -> None:
            for name, file in sorted(entries.get(rel, []), key=lambda entry: (entry[0].lower(), entry[0])):
                digest.update(name.encode())
                if file is not None:
                    digest.update(file.read())
                else:
                    walk(f"{rel}/{name}" if rel else name)

        walk("")
    if len(_OBJECT_HASHES) > 16:
        _OBJECT_HASHES.clear()
    _OBJECT_HASHES[key] = digest.hexdigest()
    return _OBJECT_HASHES[key]


_OBJECT_HASHES: dict[tuple[Any, ...], str] = {}


def build_environment_version(upload_hash: str, dockerfile_path: str | None = None) -> str:
    """The version azure-ai-ml gives an anonymous environment built from a context (`source="build"`): the sha256
    of the digest of the context's object hash, `str.join`ed with the Dockerfile path's digest where one is
    given (sic, as for an image's conda file)."""

    def sha(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    text = sha(upload_hash)
    if dockerfile_path:
        text = text.join(sha(dockerfile_path))
    return sha(text)


def local_upload(folder: folders.Folder, upload_hash: str) -> str:
    """Where in the blob store a local folder or file goes, as azure-ai-ml uploads it: `LocalUpload/<object
    hash>/<its name>` (a folder's files under it, a file as that blob)."""
    return f"{LOCAL_UPLOAD}/{upload_hash}/{folder.folder.name}"


def upload_blobs(folder: folders.Folder, upload_hash: str) -> list[tuple[str, packaging.CodeFile]]:
    """Each blob the upload makes, and the file it holds, in the order the folder lists them (the first carries
    the SDK's upload indicator)."""
    prefix = local_upload(folder, upload_hash)
    if folder.is_file:
        return [(prefix, folder.files[0])]
    return [(f"{prefix}/{f.path}", f) for f in folder.files]


def input_uri(folder: folders.Folder, upload_hash: str, data_type: str) -> str:
    """The URI azure-ai-ml gives a local input once it has uploaded it: the datastore path of the upload, with a
    `/` after a `uri_folder`'s (as `_resolve_job_input` adds it; a model folder's goes without)."""
    uri = DATASTORE_URI.format(store=BLOB_STORE, path=local_upload(folder, upload_hash))
    return uri + "/" if data_type == "folder" else uri


def iso_duration(seconds: int) -> str:
    """Seconds as the ISO-8601 duration the SDK sends (isodate's form: P1DT1H1M1S, PT2H)."""
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = "".join(f"{n}{unit}" for n, unit in ((hours, "H"), (minutes, "M"), (secs, "S")) if n)
    return f"P{f'{days}D' if days else ''}{'T' + clock if clock else ''}" if days or clock else "PT0S"


def seconds_of(duration: str) -> int:
    """The inverse of `iso_duration`, for the CLI YAML form."""
    match = re.fullmatch(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?", duration)
    if not match:
        raise ValueError(f"not an ISO-8601 duration: {duration!r}")
    d, h, m, s = (int(g) if g else 0 for g in match.groups())
    return d * 86400 + h * 3600 + m * 60 + s


def _code_calls(
    bundle: packaging.Bundle, workspace: str, headers: dict[str, str], archived: bool = False
) -> tuple[str, list[HttpCall]]:
    """The code asset's ARM id and the calls that make it, in azure-ai-ml's order: list by content hash, and
    only on a miss startPendingUpload, the blobs, the code version. `archived`: the user's files go as one
    archive (`crosstrain.code_archive`)."""
    name = code_asset_name(bundle, archived)
    files = code_archive.shipped(bundle, archived)
    content_hash = code_content_hash(files)
    versions = f"{ARM}{workspace}/codes/{name}/versions"
    code_id = f"{workspace}/codes/{name}/versions/1"
    blobs = [{"name": f"{name}/{f.path}", "size": f.size, "sha256": f.sha256} for f in files]
    each = (
        "file of the unpacked bundle" if not archived else "file of crosstrain_code/, the user's files as one archive"
    )
    calls = [
        HttpCall(
            "GET",
            f"{versions}?api-version={CODE_API_VERSION}&hash={content_hash}&hashVersion={CODE_HASH_VERSION}",
            purpose="look for this content in the workspace (azure-ai-ml's content hash): on a hit nothing is "
            "uploaded and the three calls below are skipped; a hit under another name (an asset azure-ai-ml "
            "uploaded, with its random name) is reused: codeId becomes that version's id",
        ),
        HttpCall(
            "POST",
            f"{versions}/1/startPendingUpload?api-version={CODE_API_VERSION}",
            {"pendingUploadType": "TemporaryBlobReference"},
            headers,
            purpose="ask for a container to upload to: the answer's blobReferenceForConsumption holds blobUri and a "
            "container SAS URL (sasUri)",
        ),
        HttpCall(
            "PUT",
            f"{SAS_CONTAINER}/{name}/",
            {
                "description": f"{len(blobs)} blob PUTs (azure-storage-blob, with the SAS of the answer above, not "
                f"the ARM token), one per {each}, under this prefix; the first one carries "
                "azure-ai-ml's upload_status metadata",
                "hash_sha256": content_hash,
                "bytes": sum(f.size for f in files),
                "blobs": blobs,
            },
            purpose=f"upload the code: the URL starts with {SAS_CONTAINER}, the container SAS URL that only "
            "startPendingUpload's answer gives (filled in at submit)",
        ),
        HttpCall(
            "PUT",
            f"{versions}/1?api-version={CODE_API_VERSION}",
            {
                "properties": {
                    "codeUri": f"{BLOB_CONTAINER}/{name}",
                    "isAnonymous": True,
                    "properties": {
                        "hash_sha256": content_hash,
                        "hash_version": CODE_HASH_VERSION,
                    },
                }
            },
            headers,
            purpose=f"register the uploaded folder as code version {name}/1, indexed by its content hash "
            f"({BLOB_CONTAINER} is startPendingUpload's container URL, filled in at submit)",
        ),
    ]
    return code_id, calls


def _store_calls(workspace: str, headers: dict[str, str]) -> list[HttpCall]:
    """The calls that open the workspace's default blob store for uploads (a build context, local inputs), in
    azure-ai-ml's order: read the store, then its secret. Made once, before the first upload (the SDK reads them
    again for each folder it uploads)."""
    store = f"{ARM}{workspace}/datastores/{BLOB_STORE}"
    return [
        HttpCall(
            "GET",
            f"{store}?api-version={DATASTORE_API_VERSION}",
            purpose=f"read the workspace's default blob store: the account and container a build context or a local "
            f"input is uploaded to ({STORE_CONTAINER} below), and the kind of credential it takes",
        ),
        HttpCall(
            "POST",
            f"{store}/listSecrets?api-version={DATASTORE_API_VERSION}",
            {"expirableSecret": True, "expireAfterHours": 1},
            headers,
            purpose="ask for the store's secret to upload with (a SAS token or the account key); not sent where the "
            "store takes identities, and on a 403 the upload goes with the Azure credential, as azure-ai-ml does",
        ),
    ]


def _upload_call(folder: folders.Folder, upload_hash: str, what: str, input_name: str | None = None) -> HttpCall:
    """The blob PUTs of one local folder or file, as one described call (`what` it is): under `LocalUpload/<object
    hash>/<name>/`, or as `LocalUpload/<object hash>/<name>` for a file; an input's names the input."""
    prefix = local_upload(folder, upload_hash)
    blobs = [{"name": name, "size": f.size, "sha256": f.sha256} for name, f in upload_blobs(folder, upload_hash)]
    many = "one per file of the folder, under this prefix" if not folder.is_file else "the file, as this blob"
    return HttpCall(
        "PUT",
        f"{STORE_CONTAINER}/{prefix}" + ("" if folder.is_file else "/"),
        {
            "description": f"{len(blobs)} blob PUT{'s' if len(blobs) != 1 else ''} (azure-storage-blob, with the "
            f"store's secret, not the ARM token), {many}; the first one carries azure-ai-ml's upload_status "
            "metadata. Skipped when that blob already carries it (uploaded before, by crosstrain or azure-ai-ml)",
            **({"input": input_name} if input_name is not None else {}),
            "hash": upload_hash,
            "bytes": folder.size,
            "blobs": blobs,
        },
        purpose=f"upload {what}: the URL starts with {STORE_CONTAINER}, the container of the blob store read above "
        "(filled in at submit)",
    )


def _build_calls(
    folder: folders.Folder,
    upload_hash: str,
    dockerfile_path: str | None,
    environment_id: str,
    headers: dict[str, str],
) -> list[HttpCall]:
    """The calls that make an environment from a build context, after the blob store's (`_store_calls`), in
    azure-ai-ml's order: upload the folder, register the anonymous environment that points at it."""
    build = {
        "contextUri": f"{STORE_CONTAINER}/{local_upload(folder, upload_hash)}/",
        **({"dockerfilePath": dockerfile_path} if dockerfile_path else {}),
    }
    return [
        _upload_call(folder, upload_hash, "the build context"),
        HttpCall(
            "PUT",
            f"{ARM}{environment_id}?api-version={ENVIRONMENT_API_VERSION}",
            {"properties": {"build": build, "isAnonymous": True, "isArchived": False}},
            headers,
            purpose=f"register the uploaded folder as an anonymous environment that Azure ML builds (as azure-ai-ml "
            f"does; {STORE_CONTAINER} is filled in at submit); idempotent",
        ),
    ]


#: The job input and output types of `type:` (azure-ai-ml's AssetTypes).
_AZURE_DATA_TYPES = {
    "folder": "uri_folder",
    "file": "uri_file",
    "table": "mltable",
    "mlflow_model": "mlflow_model",
    "custom_model": "custom_model",
}
#: Where a registered asset of each type lives in the workspace (`azureml:NAME:VERSION` -> its ARM id).
_ASSET_FOLDERS = {"mlflow_model": "models", "custom_model": "models"}
#: The REST modes of `mode:`, per direction, as azure-ai-ml maps ro_mount, rw_mount, download, upload, direct.
_AZURE_DATA_MODES = {
    "inputs": {"mount": "ReadOnlyMount", "download": "Download", "direct": "Direct"},
    "outputs": {"mount": "ReadWriteMount", "upload": "Upload", "direct": "Direct"},
}
#: The same modes as az-yaml writes them.
_AZURE_YAML_MODES = {
    "ReadOnlyMount": "ro_mount",
    "ReadWriteMount": "rw_mount",
    "Download": "download",
    "Upload": "upload",
    "Direct": "direct",
}
_DATA_ASSET = re.compile(r"azureml:(?P<name>[^:@/]+):(?P<version>[^:@/]+)")
_DATA_ASSET_ID = re.compile(r"^/subscriptions/.*/(?:data|models)/(?P<name>[^/]+)/versions/(?P<version>[^/]+)$")


def _data_bindings(
    job: TrainingJob, direction: str, workspace: str, uploaded: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The job's own `inputs` or `outputs`, as `command(inputs=..., outputs=...)` sends them: a registered
    asset by its ARM id, a local file or folder by the URI of its upload (`uploaded`, by input name), any other
    location as its URI, an unset mode left to the service (mount)."""
    out: dict[str, Any] = {}
    declared = job.inputs if direction == "inputs" else job.outputs
    for name, location in declared.items():
        binding: dict[str, Any] = {}
        if location.path is not None:
            asset = _DATA_ASSET.fullmatch(location.path)
            folder = _ASSET_FOLDERS.get(location.type, "data")
            uri = f"{workspace}/{folder}/{asset['name']}/versions/{asset['version']}" if asset else location.path
            binding["uri"] = (uploaded or {}).get(name, uri)
        if location.mode is not None:
            binding["mode"] = _AZURE_DATA_MODES[direction][location.mode]
        binding["jobInputType" if direction == "inputs" else "jobOutputType"] = _AZURE_DATA_TYPES[location.type]
        out[name] = binding
    return out


def _yaml_bindings(
    bindings: Mapping[str, Any], kind_key: str, local: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """REST inputs or outputs in az-yaml's words; an uploaded input by its `local` path (absolute)."""
    out: dict[str, Any] = {}
    for name, binding in bindings.items():
        entry: dict[str, Any] = {"type": binding[kind_key]}
        if name in (local or {}):
            entry["path"] = (local or {})[name]
        elif "uri" in binding:
            asset = _DATA_ASSET_ID.match(binding["uri"])
            entry["path"] = f"azureml:{asset['name']}:{asset['version']}" if asset else binding["uri"]
        if "mode" in binding:
            entry["mode"] = _AZURE_YAML_MODES[binding["mode"]]
        out[name] = entry
    return out


def _job_url(ref: Mapping[str, Any], name: str) -> str:
    return (
        f"{ARM}/subscriptions/{ref['subscription_id']}/resourceGroups/{ref['resource_group']}"
        f"/providers/Microsoft.MachineLearningServices/workspaces/{ref['workspace']}/jobs/{name}"
        f"?api-version={API_VERSION}"
    )


def fingerprint_of_job(job: Mapping[str, Any]) -> str | None:
    """The fingerprint crosstrain recorded on a job (ARM JSON), if any."""
    properties = ((job.get("properties") or {}).get("properties")) or {}
    value = properties.get(FINGERPRINT_PROPERTY)
    return str(value) if value else None


def studio_url(settings: Mapping[str, Any], name: str) -> str:
    wsid = (
        f"/subscriptions/{settings['subscription_id']}/resourcegroups/{settings['resource_group']}"
        f"/workspaces/{settings['workspace']}"
    )
    return f"https://ml.azure.com/runs/{name}?wsid={wsid}"


def _send(
    pipeline: Any,
    call: HttpCall,
    *,
    missing_ok: bool = False,
    forbidden_ok: bool = False,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, dict[str, Any]] | None:
    """One rendered call, unchanged but for `headers` added (a credential submit adds, never rendered), through
    the MLClient's pipeline; None for a 404 if `missing_ok`, for a 403 if `forbidden_ok`."""
    what = f"{call.method} {call.url.split('?')[0]}"
    http = azure.http_request(call.method, call.url, call.body, {**call.headers, **(headers or {})})
    response = azure.call(lambda: pipeline.send_request(http), what)
    if (response.status_code == 404 and missing_ok) or (response.status_code == 403 and forbidden_ok):
        return None
    azure.raise_for_status(response, what)
    if response.status_code in (202, 204) and not response.content:  # accepted, with nothing to say
        return int(response.status_code), {}
    try:
        body = response.json()
    except ValueError as error:
        raise unreadable(error, what) from None
    if not isinstance(body, dict):
        raise unreadable(ValueError(f"not a JSON object: {str(body)[:80]}"), what)
    return int(response.status_code), body


def _is_blob_upload(call: HttpCall) -> bool:
    """The code upload (with startPendingUpload's SAS)."""
    return call.url.startswith(SAS_CONTAINER)


def _is_store_upload(call: HttpCall) -> bool:
    """An upload to the default blob store (a build context, a local input; with the store's secret)."""
    return call.url.startswith(STORE_CONTAINER)


def _is_input_upload(call: HttpCall) -> bool:
    """A local input's upload (its body names the input)."""
    return _is_store_upload(call) and isinstance(call.body, dict) and "input" in call.body


@frozen
class _CodeCalls:
    """The rendered code-asset calls of a request (see `_code_calls`)."""

    lookup: HttpCall
    start: HttpCall
    upload: HttpCall
    register: HttpCall
    id: str
    folder: packaging.CodeRef

    @property
    def all(self) -> tuple[HttpCall, ...]:
        return (self.lookup, self.start, self.upload, self.register)

    @classmethod
    def of(cls, request: Request) -> _CodeCalls | None:
        calls = list(request.calls)
        uploads = [i for i, call in enumerate(calls) if _is_blob_upload(call)]
        if not uploads:
            return None
        if request.code is None:
            raise SubmitError("the request uploads code but names no folder; render it again")
        i = uploads[0]
        if i < 2 or i + 1 >= len(calls) - 1:
            raise SubmitError("the request's code calls are not in the order render makes them; render it again")
        code_id = str(request.create.body["properties"].get("codeId") or "")
        return cls(calls[i - 2], calls[i - 1], calls[i], calls[i + 1], code_id, request.code)


@frozen
class _Upload:
    """One rendered upload to the blob store and the local folder or file the request records for it: the build
    context (with the environment PUT that follows it) or an input (by name)."""

    call: HttpCall
    folder: packaging.CodeRef
    input: str | None = None
    register: HttpCall | None = None


@frozen
class _StoreCalls:
    """The rendered calls of a request that use the default blob store (see `_store_calls`): the store's read and
    its secret, then the build context's upload and environment PUT, and each local input's upload."""

    store: HttpCall
    secrets: HttpCall
    uploads: tuple[_Upload, ...]

    @property
    def all(self) -> tuple[HttpCall, ...]:
        made = (call for upload in self.uploads for call in (upload.call, upload.register) if call is not None)
        return (self.store, self.secrets, *made)

    @classmethod
    def of(cls, request: Request) -> _StoreCalls | None:
        calls = list(request.calls)
        at = [i for i, call in enumerate(calls) if _is_store_upload(call)]
        if not at:
            return None
        if request.build_context is None and any(not _is_input_upload(calls[i]) for i in at):
            raise SubmitError("the request uploads a build context but names no folder; render it again")
        disorder = SubmitError("the request's blob store calls are not in the order render makes them; render it again")
        first = at[0]
        if first < 2 or not calls[first - 2].url.split("?")[0].endswith(f"/datastores/{BLOB_STORE}"):
            raise disorder
        uploads: list[_Upload] = []
        for i in at:
            call = calls[i]
            if not _is_input_upload(call):  # the build context: first, its environment PUT right after it
                if uploads or i + 1 >= len(calls) - 1 or request.build_context is None:
                    raise disorder
                uploads.append(_Upload(call, request.build_context, register=calls[i + 1]))
                continue
            name = str(call.body["input"])
            ref = request.inputs.get(name)
            if ref is None:
                raise SubmitError(
                    f"the request uploads input {name} but names no file or folder for it; render it again"
                )
            uploads.append(_Upload(call, ref, input=name))
        return cls(calls[first - 2], calls[first - 1], tuple(uploads))


def data_problem(direction: str, name: str, location: Any) -> Problem | None:
    """Azure ML's own rules for a location: a local output (Azure writes outputs to a datastore), a local table
    (crosstrain uploads files, folders and models, not an mltable), and a version resolved at submit (which a
    rendered request cannot fix)."""
    if data.kind(location) == "local" and direction == "outputs":
        return data.refusal(
            direction,
            name,
            f"{location.path} is a local path, and Azure ML writes outputs to a datastore",
            "write azureml://datastores/<datastore>/paths/<path>, or leave `path` out (Azure ML picks a place in the "
            "workspace's default datastore)",
        )
    if data.kind(location) == "local" and location.type == "table":
        return data.refusal(
            direction,
            name,
            f"{location.path} is a local path, and crosstrain uploads a local file or folder as a uri_file, "
            "uri_folder, mlflow_model or custom_model input, not as an mltable",
            f"register the table once (az ml data create --name {name} --path {location.path} --type mltable) and "
            f"write azureml:{name}:1",
        )
    if location.path is not None and location.path.endswith("@latest"):
        return data.refusal(
            direction,
            name,
            "azure-ai-ml resolves the latest version with a lookup just before the create, and a crosstrain request "
            "is fixed when it is rendered (so a re-submit is the same job)",
            f"pin the version: {location.path.removesuffix('@latest')}:VERSION (`az ml data show -n "
            f"{location.path.removeprefix('azureml:').removesuffix('@latest')} --label latest --query version`)",
        )
    return None
